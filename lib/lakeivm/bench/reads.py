"""``lakeivm bench reads``: a refresh of every view of the TPC-DI-style pipeline per batch, its
change ranges read once for all the views that read them against read once per view.

Workload: ``lakeivm.datagen.tpcdi`` at ``--customers``, every view of ``schemas/views-tpcdi`` built,
then ``--batches`` incremental batches (``--scale`` market days each). Per batch, every view is
refreshed in one process, upstreams first (``engine.run_views``):

- ``shared``: a change range several views read over the same versions is read once and kept while
  they run (``changes.sharing``; the local delta-rs path keeps every range it reads);
- ``per-view``: each view reads its changes as if it ran alone (the process's kept reads forgotten
  before each view).

Both run on ``--paths``: ``local`` (the lake's limits: small changes read and netted by delta-rs) and
``spark`` (every limit 0: every step on Spark, the path of a large lake or a cluster). Each of the four
runs on a lake of its own (the same seeded data and stream), and the two lakes of a path alternate
which refreshes first in each batch. After the last batch every view is audited against its SQL.
Results: JSON + PNG under ``--out``.
"""
from __future__ import annotations

import statistics
import time
from pathlib import Path

from lakeivm.bench import machine, save, use_agg
from lakeivm.bench.pipeline import VIEWS, topological
from lakeivm.config import Settings

PATHS = ("local", "spark")
POLICIES = ("shared", "per-view")


def main(argv: list[str], settings: Settings) -> int:
    """``lakeivm bench reads [--customers 500] [--batches 4] [--scale 1] [--paths local spark] [--out DIR]``."""
    import argparse

    parser = argparse.ArgumentParser(prog="lakeivm bench reads", description=__doc__.splitlines()[0])
    parser.add_argument("--customers", type=int, default=500, help="customers in the initial load")
    parser.add_argument("--batches", type=int, default=4, help="batches, each refreshing every view")
    parser.add_argument("--scale", type=float, default=1.0, help="a batch's size, in market days")
    parser.add_argument("--paths", nargs="+", default=list(PATHS), choices=PATHS)
    parser.add_argument("--out", default="bench-results")
    args = parser.parse_args(argv)
    results = run_reads_bench(settings, args.customers, args.batches, args.scale, args.paths, args.out)
    return 0 if all(run["audits_ok"] for path in results["paths"].values() for run in path.values()) else 1


def run_reads_bench(settings: Settings, customers: int, batches: int, scale: float, paths: list[str], out: str,
                    progress=print) -> dict:
    """Both policies on each path, each on a lake of its own; returns (and writes) the results."""
    from lakeivm.catalog.registry import load_specs
    from lakeivm.limits import Limits
    from lakeivm.spark import get_spark

    spark = get_spark(settings)
    results = {"machine": machine(), "customers": customers, "batches": batches, "scale": scale, "paths": {}}
    for path in paths:
        limits = settings.limits if path == "local" else Limits.everything_on_spark()
        lakes = {policy: _built(spark, f"{out}/lake-reads-{path}-{policy}", limits, customers) for policy in POLICIES}
        specs = load_specs(VIEWS, lakes["shared"][0].root)
        if specs.broken:
            raise RuntimeError("the pipeline's specs do not load: " + "; ".join(b.summary for b in specs.broken))
        order = [specs[name] for name in topological(specs)]
        progress(f"reads bench, {path} path: {len(order)} views, {customers} customers")
        seconds: dict[str, list[float]] = {policy: [] for policy in POLICIES}
        for policy, (lake, _) in lakes.items():
            _refresh_all(lake, order, policy)  # the build: every view from snapshots
        for batch in range(batches):
            first = POLICIES if batch % 2 == 0 else POLICIES[::-1]
            for policy in first:
                lake, stream = lakes[policy]
                stream.batch(scale)
                seconds[policy].append(_refresh_all(lake, order, policy))
            progress(f"  batch {batch + 1}: " + ", ".join(f"{policy} {seconds[policy][-1]:.1f} s" for policy in POLICIES))
        results["paths"][path] = {policy: _summary(lakes[policy][0], order, seconds[policy], progress, f"{path}/{policy}")
                                  for policy in POLICIES}
    results["tables"] = tables(results)
    save(out, "reads", results, _plot)
    progress(f"wrote {out}/reads.json and {out}/reads.png")
    return results


def _built(spark, root: str, limits, customers: int):
    """A fresh lake at ``root`` with ``limits`` and the pipeline's initial load: (lake, its change stream)."""
    from lakeivm.datagen.tpcdi import generate_tpcdi
    from lakeivm.store.lake import Lake

    Lake(spark, root).delete(Lake(spark, root).root)
    lake = Lake(spark, root, limits=limits)
    lake.ensure_system_tables()
    return lake, generate_tpcdi(lake, customers=customers, progress=lambda line: None)


def _refresh_all(lake, order, policy: str) -> float:
    """Seconds to refresh every view of ``order`` under ``policy``."""
    from lakeivm.run.engine import run_views

    started = time.perf_counter()
    run_views(lake, order, share=policy == "shared")
    return time.perf_counter() - started


def _summary(lake, order, seconds: list[float], progress, label: str) -> dict:
    from lakeivm.run.audit import audit

    differ = [spec.name for spec in order if not audit(lake, spec).ok]
    progress(f"  {label}: median {statistics.median(seconds):.1f} s per batch"
             + (f"; audit DIFFERS: {', '.join(differ)}" if differ else "; every view equals its SQL"))
    return {"seconds": seconds, "median_s": statistics.median(seconds), "total_s": sum(seconds), "audits_ok": not differ,
            "differ": differ}


def tables(results: dict) -> list[dict]:
    """The record's table (``lakeivm bench render``): per path, each policy's seconds per batch and the ratio."""
    table = {"columns": ["path", "shared: median s per batch", "per-view: median s per batch", "per-view / shared",
                         "audits"], "rows": []}
    for path, runs in results["paths"].items():
        shared, alone = runs["shared"], runs["per-view"]
        table["rows"].append([path, f"{shared['median_s']:.2f}", f"{alone['median_s']:.2f}",
                              f"{alone['median_s'] / shared['median_s']:.2f}",
                              "ok" if shared["audits_ok"] and alone["audits_ok"] else "DIFFER"])
    return [table]


def _plot(results: dict, path: Path) -> None:
    use_agg()
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    names = list(results["paths"])
    width = 0.38
    for i, policy in enumerate(POLICIES):
        ax.bar([x + (i - 0.5) * width for x in range(len(names))],
               [results["paths"][name][policy]["median_s"] for name in names], width, label=policy)
    ax.set_xticks(range(len(names)), [f"{name} path" for name in names])
    ax.set_ylabel("median seconds per batch, every view refreshed")
    ax.legend()
    ax.set_title(f"shared reads, TPC-DI-style pipeline, {results['customers']} customers ({results['machine']['cores']} cores)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
