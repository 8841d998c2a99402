"""The ``lakeivm`` command: demo, status, refresh, read, explain, audit, unlock, datagen, bench.

Settings come from LAKEIVM_LAKE / LAKEIVM_SPARK_MASTER / LAKEIVM_VIEWS / LAKEIVM_LEASE_SECONDS or
``lakeivm.toml`` (see lakeivm.config); ``--lake`` and ``--views`` override them.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from lakeivm.config import Settings, load_settings
from lakeivm.errors import LakeIVMError, known_failure


EXTRAS = {"airflow": "airflow", "great_expectations": "airflow", "matplotlib": "bench", "dbt": "dbt"}  # module: the extra installing it


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        settings = load_settings()
    except ValueError as err:  # a setting that is not one (an unknown key, a lease_seconds that is no number)
        print(f"lakeivm: error: {err}", file=sys.stderr)
        return 2
    if args.lake:
        settings = settings.with_(lake=args.lake)
    if args.views:
        settings = settings.with_(views=args.views)
    try:
        return args.func(args, settings) or 0
    except LakeIVMError as err:
        print(f"lakeivm: error: {err}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as err:  # an optional part of lakeivm that is not installed (a worker install)
        extra = EXTRAS.get((err.name or "").split(".")[0])
        if extra is None:
            raise
        print(f"lakeivm: error: this command needs {err.name.split('.')[0]}, which this install of lakeivm lacks: "
              f"`pip install 'lakeivm[{extra}]'`", file=sys.stderr)
        return 2
    except Exception as err:  # a known Spark/Delta failure is one line, not a JVM trace
        message = known_failure(err)
        if message is None or os.environ.get("LAKEIVM_TRACE"):  # LAKEIVM_TRACE=1: the whole trace, for a bug report
            raise
        view = f"view {args.view!r}: " if getattr(args, "view", None) else ""
        kept = _keep_trace()
        print(f"lakeivm: error: {view}{message}" + (f" (the whole trace: {kept})" if kept else ""), file=sys.stderr)
        return 2
    finally:
        from lakeivm.spark import release_connect_session

        release_connect_session()  # before the interpreter exits (see its docstring)


def _keep_trace(keep: int = 50) -> str | None:
    """Write the exception being handled, whole, to ``$LAKEIVM_HOME/errors`` (``~/.lakeivm``; the newest
    ``keep`` are kept) for a bug report; its path, or None if it cannot be written."""
    import time
    import traceback

    from lakeivm.config import lakeivm_home

    folder = lakeivm_home() / "errors"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{os.getpid()}.txt"
        path.write_text(traceback.format_exc())
        for old in sorted(folder.glob("*.txt"))[:-keep]:
            old.unlink(missing_ok=True)
        return str(path)
    except OSError:
        return None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lakeivm", description="Incremental materialized views over Delta Lake.")
    parser.add_argument("--lake", help="lake root (default: LAKEIVM_LAKE or ./lake)")
    parser.add_argument("--views", help="folder of view specs (default: LAKEIVM_VIEWS or the views shipped in lakeivm/schemas/views)")
    sub = parser.add_subparsers(required=True, metavar="COMMAND")

    p = sub.add_parser("demo", help="TPC-H lake, change stream, DAG runs via dag.test(), views and audit printed")
    p.add_argument("--scale", type=float, default=0.01, help="TPC-H scale factor (default 0.01)")
    p.add_argument("--batches", type=int, default=3, help="change batches (default 3)")
    p.add_argument("--keep-server", action="store_true", help="leave the Spark Connect server the demo started running")
    p.set_defaults(func=_demo)

    p = sub.add_parser("init-demo", help="only build the TPC-H demo lake")
    p.add_argument("--scale", type=float, default=0.01)
    p.set_defaults(func=_init_demo)

    p = sub.add_parser("status", help="per view: last run, watermarks vs heads, pending rows, deadline")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_status)

    p = sub.add_parser("refresh", help="on-demand refresh of a view (the DAG's code path), or of every view")
    p.add_argument("view", nargs="?", help="the view (the views it reads are refreshed first)")
    p.add_argument("--all", action="store_true", help="every view of the folder, in one process: each change is read once")
    p.add_argument("--rebuild", action="store_true", help="rebuild from snapshots instead of applying changes")
    p.add_argument("--tick", action="store_true", help="run as a scheduled tick instead of an on-demand refresh")
    p.set_defaults(func=_refresh)

    p = sub.add_parser("calibrate", help="time batches of 2^j changes per table on a scratch copy; seed the cost models")
    p.add_argument("view")
    p.add_argument("--max-exp", type=int, default=10,
                   help="largest batch is 2^MAX_EXP changes (default 10; 16 also times the Spark read path of batches over 20k)")
    p.add_argument("--tables", help="comma-separated source tables (default: all of the view's)")
    p.set_defaults(func=_calibrate)

    p = sub.add_parser("read", help="print a view (last consistent snapshot)")
    p.add_argument("view")
    p.add_argument("--latest", action="store_true", help="newest state, possibly asymmetric")
    p.add_argument("--limit", type=int, default=20)
    p.set_defaults(func=_read)

    p = sub.add_parser("explain", help="how a view is maintained: incremental or full and why, its kind; for fivm the view tree")
    p.add_argument("view")
    p.set_defaults(func=_explain)

    p = sub.add_parser("audit", help="recompute the view's SQL at its watermarks and diff")
    p.add_argument("view")
    p.set_defaults(func=_audit)

    p = sub.add_parser("unlock", help="end a view's claim (its run died or hangs): refused while the claim's heartbeat "
                                      "is fresh, unless --force; `lakeivm status` shows the holder and its heartbeat age",
                       description="End the claim a run holds on VIEW, so the next refresh can run. A claim lapses on its "
                                   "own once its heartbeat is lease_seconds old (LAKEIVM_LEASE_SECONDS, default 120) or its "
                                   "process is gone from this host; until then unlock refuses, unless --force. The run that "
                                   "held the claim commits nothing (its next heartbeat or commit finds the claim gone), and "
                                   "the next refresh undoes the state it wrote.")
    p.add_argument("view")
    p.add_argument("--force", action="store_true", help="end the claim even though its heartbeat is fresh (its run is alive "
                                                        "or paused: it then commits nothing)")
    p.set_defaults(func=_unlock)

    p = sub.add_parser("repair", help="check the system tables' commit files; move a damaged newest one aside")
    p.set_defaults(func=_repair)

    p = sub.add_parser("datagen", help="generate data into the lake")
    p.add_argument("dataset", choices=["tpch", "graph", "orderbook"])
    p.add_argument("--scale", type=float, default=0.01, help="tpch: scale factor (default 0.01)")
    p.add_argument("--tpch-tables", help="tpch: comma-separated tables to generate, e.g. the ones a view reads (default: all 8)")
    p.add_argument("--edges", type=int, default=50_000, help="graph: R-MAT edges (default 50000)")
    p.add_argument("--log2-vertices", type=int, default=13, help="graph: 2^N vertices (default 13)")
    p.add_argument("--table", default="edges", help="graph: table name (default edges)")
    p.add_argument("--rows", type=int, default=10_000, help="orderbook: initial bids+asks rows (default 10000)")
    p.add_argument("--seed", type=int, default=1)
    p.set_defaults(func=_datagen)

    p = sub.add_parser("spark", help="the long-lived Spark Connect server every caller uses: start | stop | status")
    p.add_argument("action", choices=["start", "stop", "status"])
    p.add_argument("--master", default="local[2]", help="Spark master of the server (default local[2]; spark://host:7077 for a cluster)")
    p.add_argument("--remote", default=None, help="sc://host:port to listen on (default: the spark_remote setting or sc://127.0.0.1:15002)")
    p.set_defaults(func=_spark)

    p = sub.add_parser("dbt", help="dbt projects: `lakeivm dbt sync PROJECT` turns its materialized_view models "
                       "(or models tagged lakeivm) into views of the views folder")
    p.add_argument("action", choices=["sync"])
    p.add_argument("project", help="the dbt project's folder (its target/manifest.json is read)")
    p.add_argument("--deadline", help="the deadline of a model whose meta gives none (e.g. 5m)")
    p.add_argument("--compile", action="store_true", help="run `dbt compile` in the project first")
    p.add_argument("--target-path", default="target", help="dbt's target folder, relative to the project")
    p.set_defaults(func=_dbt)

    p = sub.add_parser("bench", help="benchmarks (JSON + PNG under bench-results/); `lakeivm bench SUITE --help`; "
                                     "`record` and `render` keep results in docs/benchmarks.md")
    p.add_argument("suite", choices=[*BENCH_SUITES, "all", *BENCH_TOOLS])
    p.add_argument("options", nargs=argparse.REMAINDER, help="the suite's own options")
    p.set_defaults(func=_bench)
    return parser


def _lake(settings: Settings, create: bool = False):
    """The configured lake; unless the command creates lakes (datagen), one must exist there: a
    mistyped --lake is refused instead of growing a new _system folder."""
    from lakeivm.store import storage
    from lakeivm.store.lake import open_lake

    if not create and not storage.exists(f"{settings.lake.rstrip('/')}/tables"):
        raise LakeIVMError(f"no lake at {settings.lake} (no tables/ folder there): pass --lake (or LAKEIVM_LAKE) "
                           "with the lake's root, or create one with `lakeivm datagen ...`.")
    return open_lake(settings=settings)


def _specs(settings: Settings):
    """The views folder's specs; each file that does not load is named on stderr and skipped."""
    from lakeivm.catalog.spec_cache import cached_specs

    specs = cached_specs(settings.views, settings.lake)
    for broken in specs.broken:
        print(f"lakeivm: warning: skipped a view spec that does not load: {broken.summary}", file=sys.stderr)
    for line in specs.not_taken:  # of a Spark Declarative Pipelines spec
        print(f"lakeivm: not maintained: {line}", file=sys.stderr)
    return specs


def _views(settings: Settings):
    """The lake's views (``lakeivm.Views``), after ``_lake``'s check that a lake is there; each spec
    file that does not load is named on stderr and skipped."""
    from lakeivm.api import Views

    return Views(_lake(settings), _specs(settings), settings)


def _view(settings: Settings, name: str):
    """One view of ``_views``; an unknown name or a spec that does not load is refused before the
    lake is opened (no Spark)."""
    from lakeivm.api import Views
    from lakeivm.spec import find_spec

    specs = _specs(settings)
    find_spec(specs, name)
    return Views(_lake(settings), specs, settings)[name]


def _repair(args, settings: Settings) -> int:
    from lakeivm.store import storage, system_tables
    from lakeivm.store.lake import Lake

    lake = Lake(None, settings.lake)  # type: ignore[arg-type] -- files only: no Spark
    if not storage.exists(f"{lake.root}/_system"):
        raise LakeIVMError(f"no lake at {lake.root} (no _system folder there): pass --lake with the lake's root.")
    results = [system_tables.repair(path) for path in (lake.log_path, lake.costs_path)]
    print("\n".join(line for report, _ in results for line in report))
    return 0 if all(ok for _, ok in results) else 1


def _unlock(args, settings: Settings) -> int:
    from lakeivm.store import commit, storage
    from lakeivm.store.lake import Lake

    lake = Lake(None, settings.lake)  # type: ignore[arg-type] -- the log only: no Spark
    if not storage.exists(f"{lake.root}/_system"):
        raise LakeIVMError(f"no lake at {lake.root} (no _system folder there): pass --lake with the lake's root.")
    ended = commit.unlock(lake, args.view, args.force, settings.lease_seconds)
    if ended is None:
        print(f"lakeivm: view {args.view!r} is not claimed by any run: nothing to unlock")
        return 0
    claim, age = ended
    print(f"lakeivm: ended the claim of {commit.describe(claim)} on view {args.view!r} (last heartbeat {commit.ago(age)}): "
          f"that run commits nothing; the next refresh undoes the state it wrote")
    return 0


def _status(args, settings: Settings) -> int:
    from dataclasses import asdict

    views = _views(settings)
    report = views.status()
    if args.json:
        unloaded = [{"view": broken.names[0], "source": broken.path, "error": broken.problem} for broken in views.broken]
        entries = [{k: v for k, v in asdict(entry).items() if v not in (None, {}, ())} for entry in report]
        print(json.dumps(entries + unloaded, indent=2, default=str))
        return 0
    for entry in report:
        print(f"{entry.view}  [{entry.kind or '?'}]  deadline {entry.deadline_s:g}s  tick {entry.tick_s:g}s")
        if entry.error:
            print(f"  error: {entry.error}")
            continue
        if entry.why_full:
            print(f"  recomputed in full: {entry.why_full}")
        if entry.waiting_for:
            print(f"  last run: {entry.last_run or 'never'}; the views it reads have not run yet: {', '.join(entry.waiting_for)} "
                  f"(`lakeivm refresh {entry.view}` builds them first)")
            continue
        print(f"  last run: {entry.last_run or 'never (run `lakeivm refresh ' + entry.view + '`)'}"
              + (f" -- {entry.last_mode} (refresh policy auto)" if entry.last_mode else ""))
        if entry.running:
            print(f"  running: {entry.running}")
        for table, head in entry.heads.items():
            mark = entry.watermarks.get(table, "-")
            seqs = "  (a view: its log seqs)" if table in entry.upstreams else ""
            print(f"  {table:<12} watermark {mark!s:>4}  head {head:>4}  pending rows {entry.pending_rows.get(table)}{seqs}")
        if entry.predicted_refresh_s is not None:
            verdict = "within" if entry.within_deadline else "MISSES"
            record = entry.deadline_record
            print(f"  refresh now: predicted {entry.predicted_refresh_s:.1f}s, {verdict} the deadline {entry.deadline_s:g}s")
            print(f"  last plan: {entry.last_plan}")
            print(f"  deadline record: {record['met']}/{record['refreshes']} on-demand refreshes met it; "
                  f"recent (run, seconds, met): {record['recent']}")
        if entry.upstreams and entry.chain_deadline_record:
            chain = entry.chain_deadline_record
            now = f"predicted {entry.chain_predicted_refresh_s:.1f}s; " if entry.chain_predicted_refresh_s is not None else ""
            print(f"  its chain (it and the views it reads): refresh now {now}{chain['met']}/{chain['refreshes']} refreshes "
                  f"met the deadline; recent (run, seconds, predicted, met): {chain['recent']}")
    return 0


def _spark(args, settings: Settings) -> int:
    from lakeivm.infra import server
    from lakeivm.config import DEFAULT_REMOTE

    remote = args.remote or settings.spark_remote or DEFAULT_REMOTE
    if args.action == "start":
        info = server.start(settings, master=args.master, remote=remote, progress=print)
        print(f"export LAKEIVM_SPARK_REMOTE={info.remote}   # or spark_remote in lakeivm.toml: every lakeivm caller then connects to it")
    elif args.action == "stop":
        info = server.stop(remote)
        print(f"lakeivm: stopped the Spark Connect server at {remote} (pid {info.pid})" if info else f"lakeivm: no server recorded for {remote}")
    else:
        info = server.status(remote)
        if info is None or not info.alive:
            print(f"lakeivm: no Spark Connect server running at {remote}")
            return 1
        print(f"lakeivm: Spark Connect server at {info.remote}: pid {info.pid}, master {info.master}, log {info.log}")
    return 0


def _calibrate(args, settings: Settings) -> int:
    from lakeivm.run.calibrate import calibrate, describe
    from lakeivm.spec import find_spec

    spec = find_spec(_specs(settings), args.view)
    models = calibrate(_lake(settings), spec, args.max_exp, args.tables.split(",") if args.tables else None)
    for table, model in models.items():
        print(f"{args.view} {table}: {describe(model)}, stored in _system/costs")
    return 0


def _refresh(args, settings: Settings) -> int:
    mode = "rebuild" if args.rebuild else ("tick" if args.tick else "refresh")
    if args.all == (args.view is not None):
        print("lakeivm: error: refresh: name one view, or --all for every view", file=sys.stderr)
        return 2
    if args.all:
        views = _views(settings)
        specs, rows = views.specs, views.refresh(mode=mode, progress=print)
    else:
        view = _view(settings, args.view)
        specs, rows = {view.name: view.spec}, {view.name: view.refresh(mode, progress=print)}
    for name, row in rows.items():
        if row is not None:  # (nothing to apply was said by the run)
            deadline = specs[name].deadline_s
            met = "" if row.deadline_met is None else (" (deadline met)" if row.deadline_met else f" (DEADLINE MISSED: {deadline:g}s)")
            print(f"{name}: run #{row.seq} {row.mode}, applied {list(row.applied) or 'snapshots'} in {row.seconds:.1f}s{met}")
    return 0


def _read(args, settings: Settings) -> int:
    view = _view(settings, args.view)
    view.read(latest=args.latest).show(args.limit, truncate=False)
    if "features" in view.spec.options:  # an F-IVM regression view: also its fitted coefficients
        from lakeivm.views.fivm.maintainer import describe_fit

        print(describe_fit(view.lake, view.spec, latest=args.latest))
    return 0


def _explain(args, settings: Settings) -> int:
    print(_view(settings, args.view).explain())
    return 0


def _audit(args, settings: Settings) -> int:
    report = _view(settings, args.view).audit()
    print(report)
    return 0 if report.ok else 1


def _datagen(args, settings: Settings) -> int:
    if args.dataset == "graph":
        from lakeivm.datagen.graph import rmat_edges, write_graph

        count = write_graph(_lake(settings, create=True), rmat_edges(args.log2_vertices, args.edges, args.seed), args.table)
        print(f"wrote {count} R-MAT edges over 2^{args.log2_vertices} vertices to table {args.table}")
        return 0
    if args.dataset == "orderbook":
        from lakeivm.datagen.orderbook import write_orderbook

        print(f"wrote order-book tables {write_orderbook(_lake(settings, create=True), args.rows, args.seed)}")
        return 0
    from lakeivm.datagen.tpch import TABLES, generate_tpch, tpch_tables, tpchgen

    tpchgen()  # installed (the bench extra)? Before Spark starts, as the tables are checked
    tables = tpch_tables(args.tpch_tables.split(",") if args.tpch_tables else TABLES)  # checked before Spark starts
    generate_tpch(_lake(settings, create=True), args.scale, tables)
    return 0


def _init_demo(args, settings: Settings) -> int:
    from lakeivm.demo import build_lake

    build_lake(settings, args.scale)
    return 0


def _needs(*modules: str) -> None:
    """Raise the missing optional module's ModuleNotFoundError (``main`` names its extra) before any work."""
    import importlib.util

    for module in modules:
        if importlib.util.find_spec(module) is None:
            raise ModuleNotFoundError(f"No module named {module!r}", name=module)


def _demo(args, settings: Settings) -> int:
    _needs("airflow")
    from lakeivm.demo import run_demo

    return run_demo(settings, scale=args.scale, batches=args.batches, keep_server=args.keep_server)


def _dbt(args, settings: Settings) -> int:
    import shutil
    import subprocess

    from lakeivm.catalog.dbt import sync

    if args.compile:
        here = Path(sys.executable).parent / "dbt"
        dbt = str(here) if here.exists() else shutil.which("dbt")
        if dbt is None:
            raise LakeIVMError("`dbt` is not installed: `pip install dbt-core dbt-spark[session]`, or compile the project "
                               "yourself and run `lakeivm dbt sync` without --compile")
        done = subprocess.run([dbt, "compile", "--project-dir", args.project, "--profiles-dir", args.project,
                               "--target-path", args.target_path], capture_output=True, text=True,
                              env={**os.environ, "DBT_SEND_ANONYMOUS_USAGE_STATS": "false"})
        if done.returncode != 0:
            raise LakeIVMError(f"`dbt compile` failed in {args.project}:\n{(done.stdout + done.stderr)[-3000:]}")
    synced = sync(args.project, settings.views, args.deadline, args.target_path)
    for line in synced.not_taken:
        print(f"lakeivm: not maintained: {line}", file=sys.stderr)
    print(f"{len(synced.views)} view(s) of dbt project {synced.project} written to {settings.views}/dbt_{synced.project}.sql: "
          + ", ".join(synced.views))
    return 0


# Each suite is a module of lakeivm.bench with ``main(argv, settings) -> int`` parsing its own options.
BENCH_SUITES = {"first-order": "first_order", "planner": "planner", "triangle": "triangle", "fivm": "fivm", "nested": "nested",
                "join-sample": "join_sample", "warm": "warm", "latency": "latency", "auto": "auto", "log": "log",
                "upstream": "upstream", "pipeline": "pipeline", "chain": "chain", "reads": "reads", "tpch": "tpch"}
# Not suites: they keep results as records in docs/benchmarks/ and write docs/benchmarks.md from them.
BENCH_TOOLS = {"record": "record", "render": "render"}


def _bench(args, settings: Settings) -> int:
    import importlib

    from lakeivm import bench

    if args.suite in BENCH_TOOLS:
        return importlib.import_module(f"lakeivm.bench.{BENCH_TOOLS[args.suite]}").main(args.options, settings)
    _needs("matplotlib")
    suites = BENCH_SUITES if args.suite == "all" else {args.suite: BENCH_SUITES[args.suite]}
    for name, module in suites.items():
        print(f"== lakeivm bench {name}", flush=True)
        bench.invoked(name, args.options)
        status = importlib.import_module(f"lakeivm.bench.{module}").main(args.options, settings)
        if status:
            return status
    return 0


def run(argv: Sequence[str] | None = None) -> NoReturn:
    """The ``lakeivm`` command: ``main``, then an exit that skips the interpreter's finalization.

    Finalizing, a native library's threads (pyarrow's pools; grpc's, see ``release_connect_session``)
    sometimes abort a process whose work is done: "terminate called without an active exception",
    SIGABRT -- 1 in 12-24 no-op refreshes here. A command that succeeded must exit 0, so the output
    is flushed and the process ends with ``os._exit`` (a local Spark JVM ends on its own: it exits
    when its parent's pipe closes)."""
    import logging
    import traceback

    try:
        code = main(argv)
    except SystemExit as done:  # argparse: --help, a usage error (its message already printed)
        code = 0 if done.code is None else done.code
        if not isinstance(code, int):  # sys.exit("message"), as the interpreter prints it
            print(code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt:
        code = 130
    except BaseException:  # noqa: BLE001 -- printed as the interpreter would
        traceback.print_exc()
        code = 1
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


if __name__ == "__main__":
    run()
