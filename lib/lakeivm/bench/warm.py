"""``lakeivm bench warm``: what one maintenance run costs beyond its work, on a warm Spark Connect server.

Over a TPC-H lake (``--scale``), for each view (revenue by nation as ``fivm`` and as
``first_order``, by default): a refresh with nothing pending and a refresh of one changed lineitem
row, each timed inside the process (``View.refresh``) and as a whole ``lakeivm refresh`` command (a new
client process: Python start, imports, connecting); per run the server's Spark jobs (its UI's REST
API), the Delta commits it wrote (state tables and log) and the planner's predicted seconds next to
the actual. The server's cold start is reported apart. Needs a server: ``lakeivm spark start`` and
LAKEIVM_SPARK_REMOTE, or ``--start-server``.
"""
from __future__ import annotations

import statistics
import subprocess
import sys
import time

from lakeivm.bench import machine, save
from lakeivm.config import DEFAULT_REMOTE, SHIPPED_VIEWS, Settings

VIEWS = ("revenue_fivm", "revenue_first_order")


def main(argv: list[str], settings: Settings) -> int:
    """``lakeivm bench warm [--scale 0.01] [--repeats 5] [--views ...] [--start-server] [--out DIR]``."""
    import argparse

    parser = argparse.ArgumentParser(prog="lakeivm bench warm", description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=0.01)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--views", default=",".join(VIEWS))
    parser.add_argument("--start-server", action="store_true", help="start a server for the benchmark (cold start timed) and stop it after")
    parser.add_argument("--out", default="bench-results")
    args = parser.parse_args(argv)
    from lakeivm.infra import server

    remote = settings.spark_remote or DEFAULT_REMOTE
    cold, info = None, server.status(remote)
    if args.start_server and (info is None or not info.alive):
        t0 = time.perf_counter()
        info = server.start(settings, remote=remote, progress=print)
        cold = time.perf_counter() - t0
    if info is None or not info.alive:
        parser.error(f"no Spark Connect server at {remote}: run `lakeivm spark start` or pass --start-server")
    try:
        run(settings.with_(spark_remote=info.remote), info, args.scale, args.views.split(","), args.repeats, args.out, cold)
    finally:
        if cold is not None:
            server.stop(info.remote)
    return 0


def run(settings: Settings, info, scale: float, views: list[str], repeats: int, out: str, cold: float | None) -> dict:
    from lakeivm.infra import server
    from lakeivm.api import Views
    from lakeivm.datagen.tpch import generate_tpch
    from lakeivm.store.lake import Lake
    from lakeivm.catalog.registry import load_spec, spec_from_dict
    from lakeivm.spark import get_spark

    root = f"{out}/lake-warm"
    spark = get_spark(settings)
    Lake(spark, root).delete(Lake(spark, root).root)
    base = load_spec(SHIPPED_VIEWS / "revenue_by_nation.yaml")
    specs = {v: spec_from_dict({"name": f"bench_{v}", "sql": base.sql, "deadline": base.deadline_s, "kind": v.split("_", 1)[1]})
             for v in views}
    maintained = Views.open(spark, lake=root, settings=settings, specs=specs.values())
    lake = maintained.lake
    generate_tpch(lake, scale, tables=("nation", "customer", "orders", "lineitem"))
    results = {"machine": machine(), "scale": scale, "server_cold_start_s": cold, "views": {}}
    for name, spec in specs.items():
        view = maintained[spec.name]
        view.refresh()
        noop, noop_cli, one, cli_one, jobs, commits, predicted = [], [], [], [], [], [], []
        for k in range(repeats):
            t0 = time.perf_counter()
            assert view.refresh() is None
            noop.append(time.perf_counter() - t0)
            noop_cli.append(_cli_refresh(settings, root, spec, name))
            _change_one_row(lake, k)
            before_jobs, before_commits = server.job_count(info), _commits(lake, spec)
            row = view.refresh()
            one.append(row.seconds)
            jobs.append(server.job_count(info) - before_jobs)
            commits.append(_commits(lake, spec) - before_commits)
            predicted.append((row.predicted_seconds, row.seconds))
            _change_one_row(lake, 100 + k)
            cli_one.append(_cli_refresh(settings, root, spec, name))
        ok = view.audit().ok
        entry = {"noop_run_s": noop, "noop_cli_s": noop_cli, "one_row_run_s": one, "one_row_cli_s": cli_one,
                 "spark_jobs": jobs, "delta_commits": commits, "predicted_vs_actual_s": predicted, "audit_ok": ok}
        results["views"][name] = entry
        med = {k: statistics.median(v) for k, v in entry.items() if isinstance(v, list) and v and not isinstance(v[0], tuple)}
        print(f"{name}: no-op {med['noop_run_s']:.3f} s in-process, {med['noop_cli_s']:.2f} s as a command; one changed row "
              f"{med['one_row_run_s']:.2f} s in-process ({med['spark_jobs']:.0f} Spark jobs, {med['delta_commits']:.0f} Delta commits), "
              f"{med['one_row_cli_s']:.2f} s as a command; predicted/actual {[(round(p or 0, 2), round(a, 2)) for p, a in predicted]}; "
              f"audit {'ok' if ok else 'DIFFERS'}", flush=True)
    save(out, "warm", results)
    print(f"wrote {out}/warm.json")
    return results


def _change_one_row(lake, k: int) -> None:
    """One lineitem row's discount changed in one commit (an update: two change-feed rows)."""
    lake.spark.sql(f"UPDATE delta.`{lake.table_path('lineitem')}` SET l_discount = 0.1 - l_discount "
                   f"WHERE l_orderkey = {1 + 32 * k} AND l_linenumber = 1").collect()


def _commits(lake, spec) -> int:
    """Delta commits so far over the view's state tables and the log."""
    from lakeivm.run.engine import prepare

    ctx, maintainer = prepare(lake, spec)
    return lake.head_version(lake.log_path) + sum(lake.head_version(p) for p in maintainer.state_tables(ctx).values())


def _cli_refresh(settings: Settings, root: str, spec, name: str) -> float:
    """Wall seconds of ``lakeivm refresh`` as a new process (spec from a temporary views folder)."""
    import os
    import tempfile

    import yaml

    with tempfile.TemporaryDirectory() as folder:
        with open(f"{folder}/{spec.name}.yaml", "w") as handle:
            yaml.safe_dump({"name": spec.name, "sql": spec.sql, "deadline": spec.deadline_s, "kind": spec.kind}, handle)
        env = {**os.environ, "LAKEIVM_SPARK_REMOTE": settings.spark_remote, "LAKEIVM_LAKE": root, "LAKEIVM_VIEWS": folder}
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "lakeivm.cli", "refresh", spec.name], env=env, check=True, capture_output=True)
        return time.perf_counter() - t0
