"""Airflow's LocalExecutor with lakeivm's task imports loaded before its workers fork (issue 17).

On Linux every LocalExecutor worker is forked from the scheduler, and every task process is forked
from a worker (Airflow 3's supervisor uses a bare ``os.fork``), so a module the scheduler imported
before starting its workers is already loaded in each task. A lakeivm task otherwise spends
seconds of every run importing PySpark's Connect client, the engine and -- in ``validate`` --
Great Expectations (scipy, altair, SQLAlchemy come with it). Importing is all this does: no Spark
session, connection or thread exists before the fork.

Use it with ``AIRFLOW__CORE__EXECUTOR=lakeivm.infra.airflow_executor.LakeIVMLocalExecutor`` (the loopback
deployment, ``lakeivm.infra.deploy``, and docker-compose set it). On a platform whose multiprocessing
spawns instead of forking, it is the plain LocalExecutor.
"""
from __future__ import annotations

import importlib
import logging
import time

from airflow.executors.local_executor import LocalExecutor

# What the apply and validate tasks import (lakeivm.infra.tasks): the Connect client, the engine,
# every maintainer through it, GX through lakeivm.run.quality, and DuckDB (small state merges, F-IVM's
# local propagation; slow to import, so imported once here rather than in every task).
PRELOAD = ("pyspark.sql.connect.session", "lakeivm.run.engine", "lakeivm.spark", "lakeivm.infra.tasks", "lakeivm.run.quality", "duckdb",
           "airflow.providers.apache.spark.hooks.spark_connect")


def preload(modules: tuple[str, ...] = PRELOAD) -> float:
    """Import ``modules`` and Great Expectations (quietly, as lakeivm.run.quality does); the seconds it took."""
    t0 = time.perf_counter()
    for name in modules:
        importlib.import_module(name)
    importlib.import_module("lakeivm.run.quality").import_gx()
    return time.perf_counter() - t0


class LakeIVMLocalExecutor(LocalExecutor):
    """LocalExecutor whose forked workers, and so their tasks, start with ``PRELOAD`` imported."""

    def start(self) -> None:
        if self.is_mp_using_fork:
            seconds = preload()
            logging.getLogger("lakeivm").info("lakeivm: preloaded the tasks' imports in %.1f s before forking workers", seconds)
        super().start()
