"""lakeivm's Spark Connect server in the foreground: the main process of the compose service spark-connect.

    python connect_server.py --master spark://spark-master:7077 --port 15002 --driver-host spark-connect

``lakeivm spark start`` (lakeivm.infra.server.start) starts this server in the background and returns (a pid
file and a log under ~/.lakeivm): right for a shell, wrong for a container, whose main process must be
the server itself. This builds the command the way lakeivm.infra.server.start does -- pyspark's
SparkConnectServer (``lakeivm.infra.server.SERVER_CLASS``) through spark-submit, Delta's JARs as files and
lakeivm's JVM and session settings (``lakeivm.spark.jvm_conf``), ``spark.pyspark.python``, the Spark UI
on the next port -- and replaces this process with it (exec): the log goes to the container's output
and ``docker compose stop`` signals the JVM.

Two differences, both because it runs in a container: it listens on every interface of the container
(the compose network; compose publishes the port on the host's loopback only), and the executors on
the workers reach the driver at ``--driver-host`` (the service's name on the compose network).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def command(settings, master: str, port: int, driver_host: str, python: str, spark_home: str) -> list[str]:
    """The spark-submit command line of the server (as lakeivm.infra.server.start builds it)."""
    from lakeivm.infra.server import SERVER_CLASS
    from lakeivm.spark import jvm_conf

    conf = {**jvm_conf(settings.with_(spark_master=master), local=master.startswith("local")),
            "spark.connect.grpc.binding.address": "0.0.0.0", "spark.connect.grpc.binding.port": str(port),
            "spark.app.name": "lakeivm-connect", "spark.pyspark.python": python,
            "spark.ui.enabled": "true", "spark.ui.port": str(port + 1),
            "spark.driver.bindAddress": "0.0.0.0", "spark.driver.host": driver_host}
    argv = [str(Path(spark_home) / "bin" / "spark-submit"), "--class", SERVER_CLASS, "--master", master,
            "--name", "lakeivm-connect"]
    if "spark.driver.memory" in conf:
        argv += ["--driver-memory", conf.pop("spark.driver.memory")]
    for key, value in conf.items():
        argv += ["--conf", f"{key}={value}"]
    return argv + ["spark-internal"]


def main(argv: list[str] | None = None) -> None:
    from lakeivm.config import load_settings

    parser = argparse.ArgumentParser(prog="connect_server.py", description=__doc__.splitlines()[0])
    parser.add_argument("--master", required=True, help="the Spark master, e.g. spark://spark-master:7077")
    parser.add_argument("--port", type=int, default=15002, help="the Connect port (its Spark UI: the next port)")
    parser.add_argument("--driver-host", required=True, help="the name the executors reach this driver at")
    args = parser.parse_args(argv)
    python = os.environ.get("PYSPARK_PYTHON", sys.executable)  # the one path both images have
    spark_home = os.environ.get("SPARK_HOME", "/opt/spark")
    argv = command(load_settings(), args.master, args.port, args.driver_host, python, spark_home)
    print(f"connect_server: starting Spark Connect on port {args.port}, master {args.master}", flush=True)
    os.execve(argv[0], argv, {**os.environ, "PYSPARK_PYTHON": python})


if __name__ == "__main__":
    main()
