"""``lakeivm bench latency``: trigger -> visible of an on-demand refresh through a real Airflow scheduler.

Workload (issue 17.5): the stack of ``lakeivm.infra.deploy`` -- PostgreSQL, a Spark standalone master and
worker, the warm Spark Connect server, Airflow 3 with LocalExecutor -- over a TPC-H lake at
``--scale`` (plus an R-MAT edges table for the triangle view). Per view kind, ``--repeats`` times: a
batch of about ``--changes`` change-feed rows is committed to its base tables, the DAG is
triggered with ``{"refresh": true}`` through the REST API, and two times are taken: until the run's
log row is committed (the new result is readable: *visible*) and until the run succeeded (its
validation included); then a no-op refresh (nothing pending) is timed the same way. Reported:
min/median/max of each, each run's task durations and timeline (when each task was queued, started
and ended), the run's own seconds from the view's log, and the stack's cold start (each service's
time to healthy, the Connect server's included) separately. The stack's scheduler runs
``lakeivm.infra.airflow_executor`` (LocalExecutor with the tasks' imports preloaded before it forks).

The views are the shipped specs with ``tick: 24h``: the DAG's first scheduled run (at unpause)
builds the view, and no later tick queues in front of a triggered run (``max_active_runs=1``).
"""
from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from lakeivm.bench import machine, save, use_agg
from lakeivm.config import SHIPPED_VIEWS, Settings

KINDS = {"revenue_by_nation": "fivm", "cheapest_supplier_cost": "first_order", "graph_triangles": "triangle",
         "tpch_q17": "nested"}
GRAPH_SCALE, GRAPH_EDGES = 12, 20_000  # R-MAT edges table of the triangle view: 2^12 vertices


def main(argv: list[str], settings: Settings) -> int:
    """``lakeivm bench latency [--scale 0.01] [--changes 1000] [--repeats 3] [--views a,b] [--out DIR]``."""
    import argparse

    parser = argparse.ArgumentParser(prog="lakeivm bench latency", description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=0.01, help="TPC-H scale factor")
    parser.add_argument("--changes", type=int, default=1000, help="change-feed rows per batch (about)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--views", default=",".join(KINDS), help=f"comma-separated, from {', '.join(KINDS)}")
    parser.add_argument("--out", default="bench-results")
    args = parser.parse_args(argv)
    views = args.views.split(",")
    unknown = set(views) - set(KINDS)
    if unknown:
        parser.error(f"no change batch defined for {sorted(unknown)}; choose from {', '.join(KINDS)}")
    run_latency_bench(settings, args.scale, args.changes, args.repeats, views, args.out)
    return 0


def run_latency_bench(settings: Settings, scale: float, changes: int, repeats: int, views: list[str], out: str) -> dict:
    """Start the stack, build the lake, time every view's refreshes; returns (and writes) the results."""
    from lakeivm.infra.deploy import start_stack
    from lakeivm.store.lake import open_lake
    from lakeivm.spark import connect

    root = Path(tempfile.mkdtemp(prefix="lakeivm-latency-"))
    print(f"stack, lake and logs under {root} (removed after a run that succeeds)", flush=True)
    t0 = time.perf_counter()
    with start_stack(root, lake=str(root / "lake"), views=str(_views_folder(root / "views", views)), settings=settings) as stack:
        results = {"machine": machine(), "scale": scale, "changes": changes, "repeats": repeats,
                   "stack_start_s": round(time.perf_counter() - t0, 2), "cold_start_s": stack.timings, "views": []}
        spark = connect(stack.settings.spark_remote, stack.settings)
        try:
            lake = open_lake(spark, stack.settings)
            batches = _change_batches(lake, scale, views, changes)
            for view in views:
                results["views"].append(_measure_view(stack, lake, view, batches[view], repeats))
        finally:
            spark.stop()
    shutil.rmtree(root, ignore_errors=True)
    save(out, "latency", results, _plot)
    print(f"wrote {out}/latency.json and {out}/latency.png")
    return results


def _views_folder(folder: Path, views: list[str]) -> Path:
    folder.mkdir(parents=True)
    for view in views:
        spec = yaml.safe_load((SHIPPED_VIEWS / f"{view}.yaml").read_text())
        (folder / f"{view}.yaml").write_text(yaml.safe_dump({**spec, "tick": "24h", "refresh_policy": "incremental"}))
    return folder


def _change_batches(lake, scale: float, views: list[str], changes: int) -> dict[str, Callable[[], None]]:
    """Build the lake; per view, a callable committing one batch of about ``changes`` change-feed rows."""
    from lakeivm.datagen.graph import apply_edge_batch, edge_stream, rmat_edges, write_graph
    from lakeivm.datagen.tpch import TpchChangeStream, generate_tpch

    generate_tpch(lake, scale)
    stream = TpchChangeStream(lake, seed=17)
    orders = max(1, changes // 10)  # RF1 + RF2 of n orders: ~5n inserted and ~5n deleted rows (orders + ~4 lineitems)
    batches = {"revenue_by_nation": lambda: (stream.rf1(orders), stream.rf2(orders)),
               "tpch_q17": lambda: (stream.rf1(orders), stream.rf2(orders)),
               "cheapest_supplier_cost": lambda: stream.update_supplycost(max(1, changes // 8))}  # 4 suppliers x pre/post image
    if "graph_triangles" in views:
        edges = rmat_edges(GRAPH_SCALE, GRAPH_EDGES, seed=1)
        write_graph(lake, edges)
        edge_batches = edge_stream(edges, GRAPH_SCALE, 1_000, changes, seed=2)
        batches["graph_triangles"] = lambda: apply_edge_batch(lake, next(edge_batches))
    return batches


def _measure_view(stack, lake, view: str, commit_batch: Callable[[], None], repeats: int) -> dict:
    """Unpause (the first scheduled run builds the view), then time batch and no-op refreshes."""
    dag = f"lakeivm__{view}"
    stack.api.wait_for_dag(dag)
    stack.api.unpause(dag)
    build = _first_run(stack.api, dag)
    batch, noop = [], []
    for _ in range(repeats):
        commit_batch()
        batch.append(_timed_refresh(stack.api, lake, view))
        noop.append(_timed_refresh(stack.api, lake, view))
    entry = {"view": view, "kind": KINDS[view], "build_run_s": build, "batch": batch, "noop": noop,
             "visible_s": _spread([r["visible_s"] for r in batch if r["visible_s"] is not None] or [float("nan")]),
             "batch_s": _spread([r["seconds"] for r in batch]), "noop_s": _spread([r["seconds"] for r in noop])}
    print(f"{view} ({KINDS[view]}): 1 batch trigger -> visible {_show(entry['visible_s'])}, -> run succeeded "
          f"{_show(entry['batch_s'])}, no-op run {_show(entry['noop_s'])}; the last batch run's task timeline "
          f"(queued, started, ended; s after the run was queued) {batch[-1]['timeline']}, its run {batch[-1]['log_seconds']} s, "
          f"{batch[-1]['delta_rows']} change rows", flush=True)
    return entry


def _timed_refresh(api, lake, view: str) -> dict:
    """Trigger ``{"refresh": true}``; time until its log row is committed (the new result readable:
    ``visible_s``, None when nothing was pending) and until the run succeeded (validation included)."""
    from lakeivm.store import commit
    from lakeivm.infra.airflow_api import FINISHED

    dag = f"lakeivm__{view}"
    before = commit.last_committed(lake, view)
    t0 = time.perf_counter()
    run_id, visible = api.trigger(dag, {"refresh": True}), None
    while True:
        row = commit.last_committed(lake, view)  # read before the run's state: a committed run is seen here first
        if visible is None and row is not None and (before is None or row.seq != before.seq):
            visible = time.perf_counter() - t0
        run = api.run(dag, run_id)
        if run["state"] in FINISHED:
            break
        if time.perf_counter() - t0 > 300:
            raise RuntimeError(f"{dag} run {run_id} did not finish within 300 s")
        time.sleep(0.1)
    seconds = time.perf_counter() - t0
    if run["state"] != "success":
        raise RuntimeError(f"{dag} run {run_id} {run['state']}; see its task logs in the Airflow UI")
    committed = visible is not None
    return {"run_id": run_id, "seconds": round(seconds, 3), "visible_s": round(visible, 3) if committed else None,
            "tasks": api.task_durations(dag, run_id), "timeline": _timeline(api, dag, run),
            "queued_s": _between(run.get("queued_at"), run.get("start_date")),
            "airflow_run_s": _between(run.get("start_date"), run.get("end_date")), "committed": committed,
            "log_seconds": round(row.seconds, 3) if committed else None,
            "delta_rows": sum(row.delta_rows.values()) if committed else 0}


def _timeline(api, dag: str, run: dict) -> dict[str, list[float | None]]:
    """Per task: seconds from the run being queued to the task being queued, started and ended --
    the gaps between one task's end and the next one's start are Airflow's own latency."""
    return {ti["task_id"]: [_between(run.get("queued_at"), ti.get(key)) for key in ("queued_when", "start_date", "end_date")]
            for ti in api.task_instances(dag, run["dag_run_id"])}


def _first_run(api, dag: str, timeout: float = 600.0) -> float | None:
    """Wait for the DAG's first (scheduled) run, which builds the view; its Airflow duration."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        runs = api.runs(dag)
        if runs:
            run = api.wait_for_run(dag, runs[0]["dag_run_id"], timeout=timeout)
            if run["state"] != "success":
                raise RuntimeError(f"{dag}: the first run (the build) {run['state']}")
            return _between(run.get("start_date"), run.get("end_date"))
        time.sleep(1.0)
    raise RuntimeError(f"{dag}: no run started within {timeout:.0f} s of unpausing it")


def _between(start: str | None, end: str | None) -> float | None:
    from datetime import datetime

    if not start or not end:
        return None
    return round((datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds(), 3)


def _spread(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def _show(spread: dict[str, float]) -> str:
    return f"{spread['median']:.2f} s (min {spread['min']:.2f}, max {spread['max']:.2f})"


def _plot(results: dict, path: Path) -> None:
    use_agg()
    import matplotlib.pyplot as plt

    views = results["views"]
    x = range(len(views))
    fig, ax = plt.subplots(figsize=(max(5, 1.8 * len(views)), 4))
    for offset, key, label in ((-0.2, "batch_s", f"~{results['changes']} changes"), (0.2, "noop_s", "no-op")):
        medians = [v[key]["median"] for v in views]
        errors = [[m - v[key]["min"] for m, v in zip(medians, views)], [v[key]["max"] - m for m, v in zip(medians, views)]]
        ax.bar([i + offset for i in x], medians, 0.4, yerr=errors, capsize=3, label=label)
    ax.set_xticks(list(x), [f"{v['view']}\n({v['kind']})" for v in views])
    ax.set_ylabel("trigger -> visible, seconds (median, min-max)")
    ax.set_title(f"on-demand refresh through Airflow, SF {results['scale']} ({results['machine']['cores']} cores)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
