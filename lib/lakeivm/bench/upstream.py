"""``lakeivm bench upstream``: a view over a large view, its upstream's changes read from the change
data feed of the upstream's result against the difference of the upstream's two results, and
against recomputing the view.

Workload: TPC-H at ``--scale``; the upstream ``big_items`` keeps lineitem's rows with a quantity over
10 (a projection kept as rows with their counts, ~80 % of lineitem, MERGEd by each run); the view
over it sums them per supplier. Per batch (RF1 inserts + RF2 deletes of ``--orders`` orders) the
upstream is refreshed, then two copies of the view read the same upstream runs side by side:
``by_feed`` from the feed (the default), ``by_difference`` from the difference (``READ_FEED`` off), and
the view's SQL is recomputed by Spark over the upstream's result, and by DuckDB over lineitem's
snapshot (the two SQLs as one, what a single-machine user without the upstream would run; its read
and compute timed apart). Results: JSON + PNG under ``--out``.
"""
from __future__ import annotations

import statistics
import time
from pathlib import Path

from lakeivm.bench import machine, save, use_agg
from lakeivm.config import Settings

UPSTREAM = "SELECT l_orderkey, l_linenumber, l_suppkey, l_quantity, l_extendedprice FROM lineitem WHERE l_quantity > 10"
VIEW = "SELECT l_suppkey, SUM(l_extendedprice) AS revenue, COUNT(*) AS items FROM big_items GROUP BY l_suppkey"


def main(argv: list[str], settings: Settings) -> int:
    """``lakeivm bench upstream [--scale 0.1] [--orders 100] [--repeats 3] [--out DIR]``."""
    import argparse

    parser = argparse.ArgumentParser(prog="lakeivm bench upstream", description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=0.1, help="TPC-H scale factor")
    parser.add_argument("--orders", type=int, default=100, help="orders inserted and deleted per batch")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="bench-results")
    args = parser.parse_args(argv)
    run_upstream_bench(settings, args.scale, args.orders, args.repeats, args.out)
    return 0


def run_upstream_bench(settings: Settings, scale: float, orders: int, repeats: int, out: str) -> dict:
    """Run the benchmark; returns (and writes) the results."""
    from lakeivm.sources import upstream
    from lakeivm.api import Views
    from lakeivm.run.audit import recompute
    from lakeivm.bench.duckdb_baseline import recompute_duckdb
    from lakeivm.datagen.tpch import TpchChangeStream, generate_tpch
    from lakeivm.store.lake import Lake
    from lakeivm.catalog.registry import link_upstreams, spec_from_dict
    from lakeivm.spark import get_spark

    spark = get_spark(settings)
    root = f"{out}/lake-upstream-sf{scale}"
    Lake(spark, root).delete(Lake(spark, root).root)
    specs, _ = link_upstreams({name: spec_from_dict({"name": name, "deadline": 600, "sql": sql, "refresh_policy": "incremental"})
                               for name, sql in (("big_items", UPSTREAM), ("by_feed", VIEW), ("by_difference", VIEW))})
    views = Views.open(spark, lake=root, settings=settings, specs=specs.values())
    lake = views.lake
    counts = generate_tpch(lake, scale, tables=("lineitem", "orders"))
    for name in ("by_feed", "by_difference"):
        views[name].refresh()  # the upstream bootstrapped by the first
    kept = spark.read.format("delta").load(lake.view_path("big_items")).count()
    print(f"upstream big_items: {kept} distinct rows stored (lineitem {counts['lineitem']} rows)", flush=True)
    stream = TpchChangeStream(lake, seed=7)
    times: dict[str, list[float]] = {"upstream_s": [], "feed_s": [], "difference_s": [], "recompute_s": [], "duckdb_s": [],
                                     "duckdb_read_s": []}
    whole = VIEW.replace("FROM big_items", f"FROM ({UPSTREAM}) AS big_items")  # the view from lineitem, in one SQL
    rows = []
    for _ in range(repeats):
        stream.rf1(orders)
        stream.rf2(orders)
        up = views["big_items"].refresh()
        times["upstream_s"].append(up.seconds)
        rows.append(sum(up.delta_rows.values()))
        fed = views["by_feed"].refresh()
        upstream.READ_FEED = False
        try:
            diffed = views["by_difference"].refresh()
        finally:
            upstream.READ_FEED = True
        times["feed_s"].append(fed.seconds)
        times["difference_s"].append(diffed.seconds)
        t0 = time.perf_counter()
        recompute(lake, specs["by_difference"], diffed.pins).write.format("delta").mode("overwrite").save(f"{root}/recomputed")
        times["recompute_s"].append(time.perf_counter() - t0)
        duck = recompute_duckdb(lake, whole, {"lineitem": up.pins["lineitem"]})
        times["duckdb_s"].append(duck.seconds)
        times["duckdb_read_s"].append(duck.read_s)
    ok = all(views[name].audit().ok for name in ("by_feed", "by_difference"))
    median = {k: statistics.median(v) for k, v in times.items()}
    results = {"machine": machine(), "scale": scale, "orders": orders, "repeats": repeats, "lineitem_rows": counts["lineitem"],
               "upstream_rows": kept, "delta_rows": rows, **times, "audit_ok": ok,
               "difference_over_feed": median["difference_s"] / median["feed_s"],
               "recompute_over_feed": median["recompute_s"] / median["feed_s"], "duckdb_over_feed": median["duckdb_s"] / median["feed_s"]}
    print(f"SF {scale}, {orders} orders a batch (~{statistics.median(rows):.0f} netted lineitem rows): upstream refresh "
          f"{median['upstream_s']:.2f}s; the view over it: from the feed {median['feed_s']:.2f}s, from the difference "
          f"{median['difference_s']:.2f}s ({results['difference_over_feed']:.2f}x), recompute {median['recompute_s']:.2f}s "
          f"({results['recompute_over_feed']:.2f}x), DuckDB from lineitem {median['duckdb_s']:.2f}s (read {median['duckdb_read_s']:.2f}s; "
          f"{results['duckdb_over_feed']:.2f}x); audit {'ok' if ok else 'DIFFERS'}", flush=True)
    save(out, "upstream", results, _plot)
    print(f"wrote {out}/upstream.json and {out}/upstream.png")
    return results


def _plot(results: dict, path: Path) -> None:
    use_agg()
    import matplotlib.pyplot as plt

    labels = {"feed_s": "change data feed", "difference_s": "difference of results", "recompute_s": "Spark recomputation",
              "duckdb_s": "DuckDB from lineitem"}
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.bar(list(labels.values()), [statistics.median(results[k]) for k in labels])
    ax.set_ylabel("seconds per refresh of the view (median)")
    ax.set_title(f"a view over a view, TPC-H SF {results['scale']} ({results['machine']['cores']} cores)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
