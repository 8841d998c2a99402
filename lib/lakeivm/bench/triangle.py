"""``lakeivm bench triangle``: IVM^ε per-batch seconds for several ε against full recomputation.

For each graph size an R-MAT graph (power-law degrees, so heavy vertices exist) is written as the
``edges`` table; one triangle view per ε (0, ¼, ½, ¾, 1) over ``edges`` self-joined three times is
bootstrapped, then batches of edge inserts + deletes are committed and, side by side in one run,
every view is refreshed (``View.refresh``: CDF read, batch delta rule, rebalancing, MERGEs, log) and the
view's SQL is recomputed on the same snapshot. Every view's count is checked against the
recomputation. Reported per (size, batch, ε): per-batch seconds, auxiliary rows stored, and how the
per-batch cost grows when the graph grows. A measurement over ``--timeout`` seconds is cancelled
and reported as such. JSON + PNG under ``--out``.
"""
from __future__ import annotations

import argparse
import math
import statistics
import threading
import time
from pathlib import Path

from lakeivm.bench import machine, save, use_agg
from lakeivm.config import Settings

SQL = ("SELECT COUNT(*) AS triangles FROM edges e1 JOIN edges e2 ON e1.dst = e2.src "
       "JOIN edges e3 ON e2.dst = e3.src AND e3.dst = e1.src")


def main(argv: list[str], settings: Settings) -> int:
    parser = argparse.ArgumentParser(prog="lakeivm bench triangle", description=__doc__.splitlines()[0])
    parser.add_argument("--edges", default="100000,1000000", help="graph sizes in edges, comma-separated")
    parser.add_argument("--batches", default="1000,10000", help="edge changes per batch, comma-separated")
    parser.add_argument("--epsilons", default="0,0.25,0.5,0.75,1")
    parser.add_argument("--repeats", type=int, default=2, help="batches per batch size (default 2)")
    parser.add_argument("--edge-factor", type=int, default=8, help="edges per vertex (default 8)")
    parser.add_argument("--timeout", type=float, default=900, help="cancel a measurement after this many seconds")
    parser.add_argument("--out", default="bench-results")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sizes = [int(float(x)) for x in args.edges.split(",")]
    batch_sizes = [int(float(x)) for x in args.batches.split(",")]
    epsilons = [float(x) for x in args.epsilons.split(",")]
    results = run(settings, sizes, batch_sizes, epsilons, args.repeats, args.edge_factor, args.timeout, out)
    results["machine"] = machine()
    save(out, "triangle", results, _plot)
    print(f"wrote {out / 'triangle.json'} and {out / 'triangle.png'}")
    return 0


def run(settings: Settings, sizes: list[int], batch_sizes: list[int], epsilons: list[float], repeats: int,
        edge_factor: int, timeout: float, out: Path) -> dict:
    from lakeivm.api import Views
    from lakeivm.run.audit import recompute
    from lakeivm.bench.duckdb_baseline import recompute_duckdb
    from lakeivm.datagen.graph import apply_edge_batch, edge_stream, rmat_edges, write_graph
    from lakeivm.store.lake import Lake
    from lakeivm.catalog.registry import spec_from_dict
    from lakeivm.spark import get_spark

    spark = get_spark(settings)
    results: dict = {"sql": SQL, "epsilons": epsilons, "runs": []}
    for size in sizes:
        scale = max(4, math.ceil(math.log2(max(2, size // edge_factor))))
        root = str(out / f"lake-triangle-{size}")
        Lake(spark, root).delete(root)
        specs = {e: spec_from_dict({"name": f"tri_{int(e * 100)}", "sql": SQL, "deadline": 3600, "epsilon": e,
                                    "kind": "triangle"}) for e in epsilons}
        views = Views.open(spark, lake=root, settings=settings, specs=specs.values())
        lake = views.lake
        current = set(rmat_edges(scale, size, seed=size))
        write_graph(lake, current)
        print(f"graph: {size} edges over 2^{scale} vertices", flush=True)
        bootstrap = {}
        for epsilon, spec in specs.items():
            seconds, _ = _timed(spark, timeout, views[spec.name].refresh)
            bootstrap[epsilon] = seconds
            print(f"  bootstrap ε={epsilon}: {_fmt(seconds)}", flush=True)
        for batch_size in batch_sizes:
            for repeat in range(repeats):
                (batch,) = edge_stream(sorted(current), scale, 1, batch_size, seed=size + batch_size + repeat)
                apply_edge_batch(lake, batch)
                current.difference_update(batch.deletes)
                current.update(batch.inserts)
                entry = {"edges": size, "batch": batch_size, "repeat": repeat, "incremental_s": {}, "aux_rows": {},
                         "counts": {}, "bootstrap_s": bootstrap}
                for epsilon, spec in specs.items():
                    seconds, row = _timed(spark, timeout, views[spec.name].refresh)
                    entry["incremental_s"][epsilon] = seconds
                    if row is not None:
                        entry["counts"][epsilon] = views[spec.name].read().first()["triangles"]
                        entry["aux_rows"][epsilon] = _aux_rows(lake, spec.name)
                pins = {"edges": lake.head_version(lake.table_path("edges"))}
                seconds, recomputed = _timed(spark, timeout, lambda: recompute(lake, specs[epsilons[0]], pins).first()[0])
                entry["recompute_s"], entry["recomputed_count"] = seconds, recomputed
                duck = recompute_duckdb(lake, specs[epsilons[0]].sql, pins)
                entry["duckdb_s"], entry["duckdb_read_s"] = duck.seconds, duck.read_s
                if recomputed is not None and duck.rows[0][0] != recomputed:
                    raise SystemExit(f"DuckDB counts {duck.rows[0][0]} triangles, Spark {recomputed}")
                entry["all_equal"] = recomputed is None or all(c == recomputed for c in entry["counts"].values())
                results["runs"].append(entry)
                print(f"  batch {batch_size} #{repeat}: recompute {_fmt(seconds)}, DuckDB {_fmt(duck.seconds)} "
                      f"(read {_fmt(duck.read_s)}); " + ", ".join(
                    f"ε={e} {_fmt(s)}" for e, s in entry["incremental_s"].items()) + f"; counts equal: {entry['all_equal']}",
                    flush=True)
                if not entry["all_equal"]:
                    raise SystemExit(f"triangle counts differ from recomputation: {entry['counts']} vs {recomputed}")
    results["summary"] = _summary(results["runs"], sizes, batch_sizes, epsilons)
    for line in results["summary"]["lines"]:
        print(line)
    return results


def _timed(spark, timeout: float, action):
    """(seconds, result) of ``action``, or (None, None) when it was cancelled after ``timeout``."""
    from lakeivm.spark import is_connect

    timer = threading.Timer(timeout, spark.interruptAll if is_connect(spark) else spark.sparkContext.cancelAllJobs)
    timer.start()
    t0 = time.perf_counter()
    try:
        result = action()
        return time.perf_counter() - t0, result
    except Exception as err:  # a cancelled Spark job surfaces as an error of the action
        if time.perf_counter() - t0 >= timeout:
            return None, None
        raise err
    finally:
        timer.cancel()


def _aux_rows(lake, view: str) -> int:
    return sum(lake.read(lake.view_path(view, f"aux/{name}")).count() for name in ("rel", "w"))


def _summary(runs: list[dict], sizes: list[int], batch_sizes: list[int], epsilons: list[float]) -> dict:
    def median(values):
        values = [v for v in values if v is not None]
        return statistics.median(values) if values else None

    table, lines = {}, []
    for size in sizes:
        for batch in batch_sizes:
            mine = [r for r in runs if r["edges"] == size and r["batch"] == batch]
            cell = {"recompute_s": median(r["recompute_s"] for r in mine), "duckdb_s": median(r.get("duckdb_s") for r in mine)}
            for e in epsilons:
                cell[str(e)] = median(r["incremental_s"][e] for r in mine)
            table[f"{size}/{batch}"] = cell
            speed = {e: (cell["recompute_s"] / cell[str(e)]) if cell["recompute_s"] and cell[str(e)] else None for e in epsilons}
            lines.append(f"{size} edges, batches of {batch}: recompute {_fmt(cell['recompute_s'])}, "
                         f"DuckDB {_fmt(cell['duckdb_s'])}; " + ", ".join(
                f"ε={e} {_fmt(cell[str(e)])} ({speed[e]:.1f}x)" if speed[e] else f"ε={e} {_fmt(cell[str(e)])}" for e in epsilons))
    growth = {}
    for small, large in zip(sizes, sizes[1:]):
        for batch in batch_sizes:
            a, b = table[f"{small}/{batch}"], table[f"{large}/{batch}"]
            growth[f"{small}->{large}/{batch}"] = {k: (b[k] / a[k]) if a[k] and b[k] else None for k in a}
            lines.append(f"growth {small}->{large} edges, batches of {batch}: " + ", ".join(
                f"{k} x{v:.2f}" if v else f"{k} n/a" for k, v in growth[f"{small}->{large}/{batch}"].items()))
    return {"median_seconds": table, "growth": growth, "lines": lines}


def _fmt(seconds) -> str:
    return "timeout" if seconds is None else f"{seconds:.2f}s"


def _plot(results: dict, path: Path) -> None:
    use_agg()
    import matplotlib.pyplot as plt

    table = results["summary"]["median_seconds"]
    epsilons = results["epsilons"]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for label, cell in table.items():
        line, = ax.plot(epsilons, [cell[str(e)] for e in epsilons], marker="o", label=f"IVM^ε {label}")
        if cell["recompute_s"]:
            ax.axhline(cell["recompute_s"], color=line.get_color(), linestyle="--", label=f"recompute {label}")
    ax.set(xlabel="ε", ylabel="seconds per batch (median)", yscale="log",
           title="triangle count: IVM^ε per batch vs recomputation (edges/batch)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
