"""``lakeivm bench first-order``: per-batch seconds of first-order IVM vs full recomputation.

Workload: the revenue_by_nation view (customer ⋈ orders ⋈ lineitem ⋈ nation), or the view of
``--view SPEC`` over the same four tables (e.g. ``bench/views/segments_left_join.yaml``), over TPC-H at each
scale factor; batches of RF1 inserts + RF2 deletes sized as a fraction of lineitem. For every batch
both are measured side by side in one run on the same snapshots: the incremental run
(``View.refresh``: read CDF, delta join, MERGE, log) and recomputation (the view's SQL over the
snapshots, written as a Delta table). Results: JSON + PNG under ``--out``.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import replace
from pathlib import Path

from lakeivm.bench import machine, save, use_agg
from lakeivm.config import SHIPPED_VIEWS, Settings

REPEATS = 3


def main(argv: list[str], settings: Settings) -> int:
    """``lakeivm bench first-order [--scales 0.1,1] [--fractions 0.001,0.01] [--view SPEC] [--out DIR]``."""
    import argparse

    parser = argparse.ArgumentParser(prog="lakeivm bench first-order", description=__doc__.splitlines()[0])
    parser.add_argument("--scales", default="0.1,1", help="TPC-H scale factors, comma-separated")
    parser.add_argument("--fractions", default="0.001,0.01", help="batch sizes as fractions of lineitem")
    parser.add_argument("--view", default=str(SHIPPED_VIEWS / "revenue_by_nation.yaml"),
                        help="a view spec over nation, customer, orders and lineitem (its kind as the classifier picks it)")
    parser.add_argument("--out", default="bench-results")
    args = parser.parse_args(argv)
    run_first_order_bench(settings, [float(s) for s in args.scales.split(",")],
                          [float(f) for f in args.fractions.split(",")], args.out, Path(args.view))
    return 0


def run_first_order_bench(settings: Settings, scales: list[float], fractions: list[float], out: str,
                          view: Path = SHIPPED_VIEWS / "revenue_by_nation.yaml") -> dict:
    """Run the benchmark; returns (and writes) the results."""
    from lakeivm.api import Views
    from lakeivm.run.audit import recompute
    from lakeivm.datagen.tpch import TpchChangeStream, generate_tpch
    from lakeivm.store.lake import Lake
    from lakeivm.catalog.registry import load_spec
    from lakeivm.spark import get_spark

    spark = get_spark(settings)
    spec = replace(load_spec(view), refresh_policy="incremental")  # measured, never recomputed by auto
    results = {"machine": machine(), "view": spec.name, "repeats": REPEATS, "runs": []}
    for scale in scales:
        root = f"{out}/lake-sf{scale}"
        Lake(spark, root).delete(Lake(spark, root).root)
        maintained = Views.open(spark, lake=root, settings=settings, specs=[spec])
        lake, measured = maintained.lake, maintained[spec.name]
        counts = generate_tpch(lake, scale, tables=("nation", "customer", "orders", "lineitem"))
        measured.refresh()
        stream = TpchChangeStream(lake, seed=11)
        for fraction in fractions:
            target = max(1, int(counts["lineitem"] * fraction))
            incremental, full, rows = [], [], []
            for _ in range(REPEATS):
                orders = max(1, target // 8)  # ~4 lineitems an order; half inserted, half deleted
                stream.rf1(orders)
                stream.rf2(orders)
                row = measured.refresh()
                incremental.append(row.seconds)
                rows.append(sum(row.delta_rows.values()))
                t0 = time.perf_counter()
                recompute(lake, spec, row.pins).write.format("delta").mode("overwrite").save(f"{root}/recomputed")
                full.append(time.perf_counter() - t0)
            report = measured.audit()
            entry = {"scale": scale, "fraction": fraction, "lineitem_rows": counts["lineitem"], "delta_rows": rows,
                     "incremental_s": incremental, "recompute_s": full,
                     "speedup_median": statistics.median(full) / statistics.median(incremental), "audit_ok": report.ok}
            results["runs"].append(entry)
            print(f"SF {scale} batch {fraction:.1%} (~{statistics.median(rows):.0f} netted rows): incremental "
                  f"{statistics.median(incremental):.2f}s vs recompute {statistics.median(full):.2f}s "
                  f"-> {entry['speedup_median']:.2f}x; audit {'ok' if report.ok else 'DIFFERS'}")
    save(out, "first_order", results, _plot)
    print(f"wrote {out}/first_order.json and {out}/first_order.png")
    return results


def _plot(results: dict, path: Path) -> None:
    use_agg()
    import matplotlib.pyplot as plt

    runs = results["runs"]
    labels = [f"SF {r['scale']}\n{r['fraction']:.1%}" for r in runs]
    x = range(len(runs))
    fig, ax = plt.subplots(figsize=(max(5, 1.6 * len(runs)), 4))
    ax.bar([i - 0.2 for i in x], [statistics.median(r["incremental_s"]) for r in runs], 0.4, label="first-order IVM")
    ax.bar([i + 0.2 for i in x], [statistics.median(r["recompute_s"]) for r in runs], 0.4, label="recomputation")
    ax.set_xticks(list(x), labels)
    ax.set_ylabel("seconds per batch (median)")
    ax.set_title(f"{results['view']}: first-order IVM vs recomputation ({results['machine']['cores']} cores)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)

