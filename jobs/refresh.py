"""spark-submit entry point: one maintenance run of a view, then (optionally) its validation.

Run from a source checkout, or as the file an installed lakeivm ships in the package ``lakeivm.jobs``
(``lakeivm.infra.scheduling.REFRESH_JOB``, what the DAG's spark-submit task runs)::

    spark-submit --packages io.delta:delta-spark_4.2_2.13:4.4.0 jobs/refresh.py VIEW [--mode tick|refresh|rebuild] [--validate]
    spark-submit --packages io.delta:delta-spark_4.2_2.13:4.4.0 <site-packages>/lakeivm/jobs/refresh.py VIEW ...

``--mode`` defaults to ``refresh``, as ``lakeivm refresh`` does; the DAG always passes it.
"""
from __future__ import annotations

import argparse
import json

from lakeivm.infra import tasks


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="refresh.py", description=__doc__.splitlines()[0])
    parser.add_argument("view")
    parser.add_argument("--mode", choices=["tick", "refresh", "rebuild"], default="refresh")
    parser.add_argument("--validate", action="store_true", help="run the view's expectation suite afterwards")
    args = parser.parse_args(argv)
    summary = tasks.apply(args.view, args.mode)
    if args.validate:
        summary = tasks.validate(args.view, summary)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
