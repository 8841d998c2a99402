"""spark-submit entry point from a source checkout; the job itself is ``lakeivm/jobs/refresh.py``.

    spark-submit --packages io.delta:delta-spark_4.2_2.13:4.4.0 jobs/refresh.py VIEW [--mode refresh] [--validate]
"""
from lakeivm.jobs.refresh import main

if __name__ == "__main__":
    main()
