"""``lakeivm bench fivm``: per-batch seconds of F-IVM vs first-order IVM vs recomputation.

Workloads over TPC-H at each scale factor: the revenue-by-nation view (customer ⋈ orders ⋈
lineitem ⋈ nation, ``lakeivm/schemas/views/revenue_by_nation.yaml``) and a regression of
``l_extendedprice`` over lineitem ⋈ orders ⋈ partsupp with 5 and with 10 features. For the
regression, first-order IVM and recomputation maintain the same aggregates as plain SQL: COUNT(*),
SUM(x_i) and SUM(x_i * x_j) for i ≤ j (1 + m + m(m+1)/2 aggregates, §7.2). By default each batch
changes lineitem only: half inserts (copies of random lines under fresh line numbers) and half
deletes of random lines; ``--changes orders`` instead updates that many orders (another existing
customer, another priority): a delta on the other side of the fact table's join. Per batch, in one
run on the same snapshots: a refresh (``View.refresh``) of the fivm view (every table updatable), of the fivm view
with ``updatable: [lineitem]`` (``fivm_u``: Fig. 5's μ stores only the views a lineitem update
needs), of the first_order view (each selectable with ``--approaches``), and recomputation (the SQL
over the snapshots, written as a Delta table), and DuckDB recomputing the same SQL over the same
snapshots read with delta-rs (``duckdb``, its read and compute seconds also apart).
Also reported: rows stored per approach. Results: JSON + PNG under ``--out``.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import replace
from pathlib import Path

from lakeivm.bench import machine, save, use_agg
from lakeivm.config import SHIPPED_VIEWS, Settings

JOIN = ("FROM lineitem JOIN orders ON l_orderkey = o_orderkey "
        "JOIN partsupp ON l_partkey = ps_partkey AND l_suppkey = ps_suppkey")
FEATURES = {  # name -> SQL over one table; the label is l_extendedprice
    "l_quantity": "l_quantity", "l_discount": "l_discount", "l_tax": "l_tax", "ps_supplycost": "ps_supplycost",
    "priority": "CAST(SUBSTR(o_orderpriority, 1, 1) AS INT)", "ps_availqty": "ps_availqty",
    "o_totalprice": "o_totalprice", "l_linenumber": "l_linenumber",
    "transit_days": "DATEDIFF(l_receiptdate, l_shipdate)", "order_month": "MONTH(o_orderdate)",
}
LABEL = "l_extendedprice"
TABLES = ("nation", "customer", "orders", "lineitem", "partsupp")
APPROACHES = ("fivm", "fivm_u", "first_order")


def main(argv: list[str], settings: Settings) -> int:
    """``lakeivm bench fivm [--scales 0.1] [--batches 1000,10000] [--repeats 2] [--views ...] [--approaches ...] [--out DIR]``."""
    import argparse

    parser = argparse.ArgumentParser(prog="lakeivm bench fivm", description=__doc__.splitlines()[0])
    parser.add_argument("--scales", default="0.1", help="TPC-H scale factors, comma-separated (e.g. 0.1,1)")
    parser.add_argument("--batches", default="1000,10000", help="changes per batch (rows of the --changes table), comma-separated")
    parser.add_argument("--repeats", type=int, default=2, help="batches per size (median reported)")
    parser.add_argument("--views", default="revenue,regression5,regression10", help="workloads, comma-separated")
    parser.add_argument("--approaches", default=",".join(APPROACHES),
                        help="incremental approaches to run next to recomputation, comma-separated (default: all)")
    parser.add_argument("--changes", choices=sorted(CHANGES), default="lineitem",
                        help="the table each batch changes (default lineitem; orders: updates of customer and priority)")
    parser.add_argument("--no-audit", action="store_true", help="skip auditing the views after each size")
    parser.add_argument("--out", default="bench-results")
    args = parser.parse_args(argv)
    approaches = args.approaches.split(",")
    unknown = sorted(set(approaches) - set(APPROACHES))
    if unknown:
        parser.error(f"unknown approaches {unknown}; choose from {list(APPROACHES)}")
    run_fivm_bench(settings, [float(s) for s in args.scales.split(",")], [int(b) for b in args.batches.split(",")],
                   args.views.split(","), args.repeats, args.out, audit_views=not args.no_audit, approaches=approaches,
                   changes=args.changes)
    return 0


def workload_specs(name: str) -> dict:
    """{approach: ViewSpec} of one workload: ``fivm`` and ``first_order`` views and the SQL recomputed."""
    from lakeivm.catalog.registry import load_spec, spec_from_dict

    if name == "revenue":
        spec = load_spec(SHIPPED_VIEWS / "revenue_by_nation.yaml")
        raw = {"sql": spec.sql, "deadline": spec.deadline_s}
        return {"fivm": spec_from_dict({**raw, "name": "bench_revenue_fivm", "kind": "fivm"}),
                "fivm_u": spec_from_dict({**raw, "name": "bench_revenue_fivm_u", "kind": "fivm", "updatable": ["lineitem"]}),
                "first_order": spec_from_dict({**raw, "name": "bench_revenue_first_order", "kind": "first_order"})}
    m = int(name.removeprefix("regression"))
    names = list(FEATURES)[:m]
    fivm = spec_from_dict({
        "name": f"bench_reg{m}_fivm", "deadline": 60, "kind": "fivm",
        "sql": f"SELECT COUNT(*) AS lines, AVG({LABEL}) AS avg_price {JOIN}",
        "features": [f"{FEATURES[n]} AS {n}" for n in names], "label": LABEL,
    })
    exprs = {n: f"CAST({FEATURES.get(n, n)} AS DOUBLE)" for n in [*names, LABEL]}
    order = list(exprs)
    sums = [f"SUM({exprs[n]}) AS s__{n}" for n in order]
    products = [f"SUM({exprs[u]} * {exprs[v]}) AS q__{u}__{v}" for i, u in enumerate(order) for v in order[i:]]
    cofactor_sql = f"SELECT COUNT(*) AS c, {', '.join(sums + products)} {JOIN}"
    return {"fivm": fivm,
            "fivm_u": replace(fivm, name=f"bench_reg{m}_fivm_u", options={**fivm.options, "updatable": ["lineitem"]}),
            "first_order": spec_from_dict({"name": f"bench_reg{m}_first_order", "deadline": 60, "kind": "first_order",
                                           "sql": cofactor_sql})}


def change_lineitem(lake, rows: int, seed: int) -> None:
    """``rows`` lineitem changes in two commits: rows/2 copies of random lines under fresh line
    numbers (their orders and partsupp rows exist), then deletes of rows/2 other random lines."""
    from pyspark.sql import functions as F

    path = lake.table_path("lineitem")
    current = lake.read(path)
    picked = _random_rows(current, rows, seed).localCheckpoint(eager=True)
    top = current.agg(F.max("l_linenumber")).first()[0]
    inserted = picked.limit(rows // 2).withColumn("l_linenumber", F.col("l_linenumber") + F.lit(top + 1))
    inserted.write.format("delta").mode("append").save(path)
    doomed = picked.exceptAll(picked.limit(rows // 2)).select("l_orderkey", "l_linenumber")
    lake.merge(path, doomed, "t.l_orderkey = s.l_orderkey AND t.l_linenumber = s.l_linenumber", "WHEN MATCHED THEN DELETE")


def change_orders(lake, rows: int, seed: int) -> None:
    """``rows`` random orders updated in one MERGE: each moves to the next customer key (keys 1..N all
    exist) and to the next order priority, so both the revenue and the regression views change."""
    from pyspark.sql import functions as F

    path = lake.table_path("orders")
    customers = lake.read(lake.table_path("customer")).count()
    priorities = F.array(*(F.lit(p) for p in ("1-URGENT", "2-HIGH", "3-MEDIUM", "4-NOT SPECIFIED", "5-LOW")))
    next_priority = F.element_at(priorities, F.substring("o_orderpriority", 1, 1).cast("int") % 5 + 1)
    picked = (_random_rows(lake.read(path), rows, seed)
              .select("o_orderkey", (F.col("o_custkey") % customers + 1).alias("custkey"), next_priority.alias("priority")))
    lake.merge(path, picked, "t.o_orderkey = s.o_orderkey",
               "WHEN MATCHED THEN UPDATE SET o_custkey = s.custkey, o_orderpriority = s.priority")


CHANGES = {"lineitem": change_lineitem, "orders": change_orders}


def _random_rows(frame, rows: int, seed: int):
    """About ``rows`` random rows of ``frame`` (a seeded sample with room to spare, cut to ``rows``)."""
    fraction = min(1.0, 3.0 * rows / max(frame.count(), 1))
    return frame.sample(fraction=fraction, seed=seed).limit(rows)


def stored_rows(lake, spec) -> int:
    """Rows of every state table of the view (result and auxiliary views)."""
    from lakeivm.run.engine import prepare

    ctx, maintainer = prepare(lake, spec)
    return sum(lake.read(path).count() for path in maintainer.state_tables(ctx).values() if lake.is_delta(path))


def run_fivm_bench(settings: Settings, scales: list[float], batches: list[int], views: list[str], repeats: int,
                   out: str, audit_views: bool = True, approaches: list[str] | tuple[str, ...] = APPROACHES,
                   changes: str = "lineitem") -> dict:
    """Run the benchmark; returns (and writes) the results. Recomputation always runs (the first_order view's SQL)."""
    from lakeivm.api import Views
    from lakeivm.run.audit import recompute
    from lakeivm.bench.duckdb_baseline import recompute_duckdb
    from lakeivm.datagen.tpch import generate_tpch
    from lakeivm.store.lake import Lake
    from lakeivm.spark import get_spark

    spark = get_spark(settings)
    results = {"machine": machine(), "repeats": repeats, "changes": changes, "runs": []}
    for scale in scales:
        root = f"{out}/lake-fivm-sf{scale}"
        Lake(spark, root).delete(Lake(spark, root).root)
        every_spec = {name: workload_specs(name) for name in views}  # first_order's SQL is also the recomputation
        workloads = {name: {a: s for a, s in specs.items() if a in approaches} for name, specs in every_spec.items()}
        maintained = Views.open(spark, lake=root, settings=settings, specs=[s for specs in workloads.values() for s in specs.values()])
        lake = maintained.lake
        counts = generate_tpch(lake, scale, tables=TABLES)
        for name, specs in workloads.items():
            for approach, spec in specs.items():
                t0 = time.perf_counter()
                maintained[spec.name].refresh()
                print(f"SF {scale} {name}: {approach} bootstrap {time.perf_counter() - t0:.1f}s", flush=True)
        seed = 0
        for size in batches:
            timings = {name: {**{a: [] for a in specs}, "recompute": []} for name, specs in workloads.items()}
            for _ in range(repeats):
                seed += 1
                CHANGES[changes](lake, size, seed)
                for name, specs in workloads.items():
                    for approach, spec in specs.items():
                        row = maintained[spec.name].refresh()
                        timings[name][approach].append(row.seconds)
                    t0 = time.perf_counter()
                    recompute(lake, every_spec[name]["first_order"], row.pins).write.format("delta").mode("overwrite").save(
                        f"{root}/recomputed_{name}")
                    timings[name]["recompute"].append(time.perf_counter() - t0)
                    duck = recompute_duckdb(lake, every_spec[name]["first_order"].sql, row.pins)
                    for key, value in (("duckdb", duck.seconds), ("duckdb_read", duck.read_s), ("duckdb_compute", duck.compute_s)):
                        timings[name].setdefault(key, []).append(value)
            for name, specs in workloads.items():
                medians = {a: statistics.median(t) for a, t in timings[name].items()}
                ratios = _ratios(medians)
                entry = {
                    "scale": scale, "batch_rows": size, "changed_table": changes, "workload": name, "lineitem_rows": counts["lineitem"],
                    "seconds": timings[name], "median_s": medians, **ratios,
                    "stored_rows": {**{a: stored_rows(lake, s) for a, s in specs.items()},
                                    "recompute": lake.read(f"{root}/recomputed_{name}").count()},
                    "audit_ok": {a: maintained[s.name].audit().ok for a, s in specs.items()} if audit_views else None,
                }
                results["runs"].append(entry)
                print(f"SF {scale} {name} batch of {size} {changes} changes: " + ", ".join(f"{a} {s:.2f}s" for a, s in medians.items()) + " -> "
                      + ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items())
                      + f"; stored rows {entry['stored_rows']}; "
                      f"audit {entry['audit_ok']}", flush=True)
    save(out, "fivm", results, _plot)
    print(f"wrote {out}/fivm.json and {out}/fivm.png")
    return results


def _ratios(medians: dict[str, float]) -> dict[str, float]:
    """Speed-ups of each F-IVM variant that ran over recomputation and over first-order IVM (when it ran)."""
    return {f"{a}_vs_{b}": medians[b] / medians[a]
            for a in ("fivm", "fivm_u", "first_order") if a in medians
            for b in ("recompute", "duckdb", "first_order") if b in medians and b != a}


def _plot(results: dict, path: Path) -> None:
    use_agg()
    import matplotlib.pyplot as plt

    runs = results["runs"]
    labels = [f"{r['workload']}\nSF {r['scale']}, {r['batch_rows']}" for r in runs]
    x = range(len(runs))
    fig, ax = plt.subplots(figsize=(max(6, 1.5 * len(runs)), 4.5))
    bars = (("fivm", "F-IVM (all updatable)"), ("fivm_u", "F-IVM (updatable: lineitem)"),
            ("first_order", "first-order IVM"), ("recompute", "Spark recomputation"), ("duckdb", "DuckDB recomputation"))
    for k, (approach, label) in enumerate(bars):
        ax.bar([i + (k - 2) * 0.16 for i in x], [r["median_s"].get(approach, 0.0) for r in runs], 0.16, label=label)
    ax.set_xticks(list(x), labels, fontsize=8)
    ax.set_ylabel("seconds per batch (median)")
    ax.set_title(f"F-IVM vs first-order IVM vs recomputation ({results['machine']['cores']} cores)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)

