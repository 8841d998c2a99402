"""``lakeivm demo``: a TPC-H lake and an R-MAT graph, change streams, the views' DAGs run with ``dag.test()``.

Everything runs on the embedded default: a local lake, Airflow's metadata in SQLite under
``.lakeivm-airflow/``, and Spark as a local Spark Connect server every DAG task connects to. Each batch of TPC-H changes is followed by one
scheduled tick of every view's DAG; the last batch by an on-demand refresh (``{"refresh": true}``).
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING

from lakeivm.config import Settings

if TYPE_CHECKING:
    from lakeivm.api import Views

AIRFLOW_HOME = Path(".lakeivm-airflow")
GRAPH_SCALE, GRAPH_EDGES, GRAPH_BATCH = 10, 4000, 200  # the demo's R-MAT edges table and its batches


def build_lake(settings: Settings, scale: float):
    """A fresh demo lake: TPC-H at ``scale`` under ``<lake>/tables``."""
    from lakeivm.datagen.graph import rmat_edges, write_graph
    from lakeivm.datagen.tpch import generate_tpch
    from lakeivm.store.lake import open_lake
    from lakeivm.store.lake import Lake
    from lakeivm.spark import get_spark

    spark = get_spark(settings)
    Lake(spark, settings.lake).delete(Lake(spark, settings.lake).root)
    lake = open_lake(spark, settings)
    generate_tpch(lake, scale)
    write_graph(lake, rmat_edges(GRAPH_SCALE, GRAPH_EDGES, seed=1))
    return lake


def prepare_airflow(settings: Settings) -> None:
    """Point Airflow at a local SQLite home and the DAG folder (the package lakeivm.dags); migrate its DB once."""
    home = AIRFLOW_HOME.resolve()
    os.environ.update({
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": os.environ.get("AIRFLOW__LOGGING__LOGGING_LEVEL", "WARNING"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(files("lakeivm.dags")),
        "LAKEIVM_LAKE": str(Path(settings.lake).resolve()) if "://" not in settings.lake else settings.lake,
        "LAKEIVM_VIEWS": settings.views,
        "LAKEIVM_SPARK_MASTER": settings.spark_master,
        "LAKEIVM_SPARK_REMOTE": settings.spark_remote,
    })
    if not (home / "airflow.db").exists():
        home.mkdir(exist_ok=True)
        print("airflow: migrating the metadata database (first demo only)")
        subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"], check=True, capture_output=True)


def run_demo(settings: Settings, scale: float = 0.01, batches: int = 3, keep_server: bool = False) -> int:
    """On the Spark Connect server (a running one, else one started for the demo and stopped after
    it unless ``keep_server``): build the lake, run every view's DAG after each change batch, print
    views and audits."""
    import warnings

    from lakeivm.infra import server
    from lakeivm.config import DEFAULT_REMOTE

    # dag.test() imports Starlette's test client, which warns about httpx: not the user's concern
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient` is deprecated")
    if settings.spark_remote or not settings.spark_master.startswith("local"):
        return _run_demo(settings, scale, batches)
    running = server.status(DEFAULT_REMOTE)
    started_here = running is None or not running.alive
    info = server.start(settings, remote=DEFAULT_REMOTE, progress=print) if started_here else running
    try:
        return _run_demo(settings.with_(spark_remote=info.remote), scale, batches)
    finally:
        if started_here and not keep_server:
            server.stop(info.remote)
            print(f"lakeivm: stopped the demo's Spark Connect server (`lakeivm spark start` keeps one running)")


def _run_demo(settings: Settings, scale: float, batches: int) -> int:
    from lakeivm.api import Views
    from lakeivm.datagen.graph import apply_edge_batch, edge_stream
    from lakeivm.datagen.tpch import TpchChangeStream

    started = time.perf_counter()
    print(f"== lakeivm demo: TPC-H SF {scale}, {batches} change batches, lake at {settings.lake}")
    lake = build_lake(settings, scale)
    prepare_airflow(settings)
    from lakeivm.infra.scheduling import build_dags

    dags = build_dags(settings, deadline_alerts=False)  # dag.test() cannot run DAGs with deadline alerts
    views = Views.open(lake.spark, settings=settings)
    print(f"== DAGs: {', '.join(dags)}")
    _run_all(dags, refresh=False, label="bootstrap")
    _print_fits(views)
    stream = TpchChangeStream(lake)
    edges = {(r["src"], r["dst"]) for r in lake.read(lake.table_path("edges")).collect()}
    graph = edge_stream(sorted(edges), GRAPH_SCALE, batches, GRAPH_BATCH, seed=2)
    for batch in range(1, batches + 1):
        changes = next(graph)
        apply_edge_batch(lake, changes)
        print(f"== batch {batch}: {stream.batch()}; edges +{len(changes.inserts)} -{len(changes.deletes)}")
        _run_all(dags, refresh=batch == batches, label="on-demand refresh" if batch == batches else "tick")
        _print_fits(views)
    failures = 0
    for status in views.status():
        print(f"\n== {status.view}: {status.last_run}, watermarks {dict(status.watermarks)}")
        rows = views[status.view].read()
        rows.orderBy(*rows.columns[:1]).show(10, truncate=False)
        report = views[status.view].audit()
        print(report)
        failures += not report.ok
    print(f"== demo finished in {time.perf_counter() - started:.0f}s; audits: {'all match the SQL' if not failures else f'{failures} differ'}")
    return 1 if failures else 0


def _print_fits(views: Views) -> None:
    """The least-squares coefficients of every F-IVM regression view (features/label), as of its newest run."""
    from lakeivm.views.fivm.maintainer import describe_fit

    for view in views.values():
        if "features" in view.spec.options:
            print(f"   {view.name}: {describe_fit(views.lake, view.spec, latest=True)}")


def _run_all(dags: dict, refresh: bool, label: str) -> None:
    for dag_id, dag in dags.items():
        t0 = time.perf_counter()
        run = dag.test(run_conf={"refresh": refresh})
        state = getattr(run, "state", "?")
        print(f"   {dag_id}: {label} -> {state} ({time.perf_counter() - t0:.1f}s)")
        if str(state) != "success" and "SUCCESS" not in str(state).upper():
            raise SystemExit(f"{dag_id} ended {state}; see the task log above")
