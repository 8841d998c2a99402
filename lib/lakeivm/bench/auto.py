"""``lakeivm bench auto``: refresh_policy auto against always-incremental and always-full, side by side.

For each workload and size, three copies of one view over the same lake -- ``refresh_policy:
incremental``, ``full`` and ``auto`` -- are built, then after each change batch all three are
refreshed (``View.refresh``, in a rotating order) and their results compared (the full copy is the
view's SQL recomputed). Reported per size: seconds per batch of each policy, what auto chose each
batch and why, and auto's total against the cheaper fixed policy (the aim: within 10 %, issue 18).

Workloads: ``triangle`` (the directed triangle count over an R-MAT ``edges`` table, ``--edges``
sizes, ``--batch`` edge inserts + deletes), ``q5`` (revenue by nation over TPC-H, ``--scales``,
TPC-H refresh functions changing about ``--batch`` lineitem rows) and ``--view FILE``: any spec's SQL
over TPC-H under the same stream (e.g. ``bench/views/segments_left_join.yaml``, a LEFT JOIN whose
padded side the stream changes). JSON under ``--out``.
"""
from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from lakeivm.bench import machine, save
from lakeivm.bench.triangle import SQL as TRIANGLES
from lakeivm.config import SHIPPED_VIEWS, Settings

POLICIES = ("incremental", "full", "auto")


def main(argv: list[str], settings: Settings) -> int:
    parser = argparse.ArgumentParser(prog="lakeivm bench auto", description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="triangle,q5", help="comma-separated: triangle, q5")
    parser.add_argument("--edges", default="100000,1000000", help="triangle: graph sizes in edges")
    parser.add_argument("--scales", default="0.01,0.1", help="q5: TPC-H scale factors")
    parser.add_argument("--batch", type=int, default=1000, help="changes per batch (default 1000)")
    parser.add_argument("--batches", type=int, default=8, help="batches per size (default 8)")
    parser.add_argument("--view", action="append", default=[],
                        help="a view spec (YAML) over TPC-H, run at --scales instead of --workloads (repeatable)")
    parser.add_argument("--out", default="bench-results")
    args = parser.parse_args(argv)
    from lakeivm.spark import get_spark

    spark = get_spark(settings)
    results = {"machine": machine(), "batch": args.batch, "batches": args.batches, "runs": []}
    from lakeivm.catalog.registry import load_spec

    views = {load_spec(Path(file)).name: file for file in args.view}  # --view replaces --workloads
    q5 = load_spec(SHIPPED_VIEWS / "revenue_by_nation.yaml")
    workloads = {name: _triangle if name == "triangle" else _tpch_workload(q5.sql)
                 for name in ([] if views else args.workloads.split(","))}
    # The SQL as the file has it: each policy's copy splits off its own aggregating subqueries (registry.with_derived_views).
    workloads.update({name: _tpch_workload(yaml.safe_load(Path(file).read_text())["sql"]) for name, file in views.items()})
    for workload, setup in workloads.items():
        sizes = args.edges if workload == "triangle" else args.scales
        for size in (float(x) for x in sizes.split(",")):
            root = str(Path(args.out) / f"lake-auto-{workload}-{size:g}")
            results["runs"].append(_compare(spark, settings, root, workload, size, setup, args.batch, args.batches))
            save(args.out, "auto", results)
    for line in _summary(results["runs"]):
        print(line)
    print(f"wrote {save(args.out, 'auto', results)}")
    return 0


def _triangle(lake, size: float, batch: int):
    """An R-MAT graph of ``size`` edges; returns (SQL, a function committing the next batch)."""
    from lakeivm.datagen.graph import apply_edge_batch, edge_stream, rmat_edges, write_graph

    scale = max(4, math.ceil(math.log2(max(2, int(size) // 8))))
    current = set(rmat_edges(scale, int(size), seed=int(size)))
    write_graph(lake, current)
    counter = iter(range(10**6))

    def next_batch() -> None:
        (changes,) = edge_stream(sorted(current), scale, 1, batch, seed=int(size) + next(counter))
        apply_edge_batch(lake, changes)
        current.difference_update(changes.deletes)
        current.update(changes.inserts)

    return TRIANGLES, next_batch


def _tpch_workload(sql: str) -> Callable:
    """A workload of ``sql`` over TPC-H at scale ``size``: a batch inserts and deletes orders with about
    ``batch`` lineitems in all (the refresh functions; the other tables are not changed)."""

    def setup(lake, size: float, batch: int):
        from lakeivm.datagen.tpch import TpchChangeStream, generate_tpch

        generate_tpch(lake, size, tables=("nation", "customer", "orders", "lineitem"))
        stream, orders = TpchChangeStream(lake, seed=11), max(1, batch // 8)  # ~4 lineitems an order, half in, half out

        def next_batch() -> None:
            stream.rf1(orders)
            stream.rf2(orders)

        return sql, next_batch

    return setup


def _compare(spark, settings: Settings, root: str, workload: str, size: float,
             setup: Callable, batch: int, batches: int) -> dict:
    from lakeivm.api import Views
    from lakeivm.store.lake import Lake, open_lake
    from lakeivm.catalog.registry import spec_from_dict
    from lakeivm.views.base import bag

    Lake(spark, root).delete(root)
    print(f"{workload} {size:g}: writing the lake", flush=True)
    sql, next_batch = setup(open_lake(spark, settings.with_(lake=root)), size, batch)
    specs = {p: spec_from_dict({"name": f"{workload}_{p}", "sql": sql, "deadline": 3600, "refresh_policy": p}) for p in POLICIES}
    opened = Views.open(spark, lake=root, settings=settings, specs=specs.values())
    views = {p: opened[spec.name] for p, spec in specs.items()}
    entry = {"workload": workload, "size": size, "build_s": {}, "seconds": {p: [] for p in POLICIES}, "auto": []}
    for policy, view in views.items():
        t0 = time.perf_counter()
        row = view.refresh()
        entry["build_s"][policy] = time.perf_counter() - t0
        entry.setdefault("kinds", {})[policy] = row.kind
    print("  built: " + ", ".join(f"{p} ({entry['kinds'][p]}) {s:.2f}s" for p, s in entry["build_s"].items()), flush=True)
    for number in range(batches):
        next_batch()
        order = POLICIES[number % 3:] + POLICIES[:number % 3]  # who reads the new snapshot first rotates
        rows = {}
        for policy in order:
            t0 = time.perf_counter()
            rows[policy] = views[policy].refresh()
            entry["seconds"][policy].append(time.perf_counter() - t0)
        chose = rows["auto"].kind
        entry["auto"].append({"kind": chose, "mode": rows["auto"].mode, "plan": rows["auto"].plan})
        expected = bag(views["full"].read())
        if any(bag(views[p].read()) != expected for p in ("incremental", "auto")):
            raise SystemExit(f"{workload} {size:g} batch {number}: a maintained result differs from the recomputation")
        print(f"  batch {number}: " + ", ".join(f"{p} {entry['seconds'][p][-1]:.2f}s" for p in POLICIES)
              + f"; auto ran {chose} ({rows['auto'].mode}): {rows['auto'].plan}", flush=True)
    totals = {p: sum(s) for p, s in entry["seconds"].items()}
    cheaper = min(("incremental", "full"), key=totals.get)
    half = {p: sum(s[len(s) // 2:]) for p, s in entry["seconds"].items()}  # once auto has learned both costs
    entry.update(total_s=totals, cheaper=cheaper, auto_vs_cheaper=totals["auto"] / totals[cheaper],
                 last_half_s=half, auto_vs_cheaper_last_half=half["auto"] / min(half["incremental"], half["full"]),
                 median_s={p: statistics.median(s) for p, s in entry["seconds"].items()})
    return entry


def _summary(runs: list[dict]) -> list[str]:
    lines = []
    for run in runs:
        t, m = run["total_s"], run["median_s"]
        choices = "".join("F" if a["kind"] == "full" else ("R" if a["mode"] == "rebuild" else "I") for a in run["auto"])
        lines.append(f"{run['workload']} {run['size']:g}: {len(run['auto'])} batches, total incremental {t['incremental']:.1f}s "
                     f"(median {m['incremental']:.2f}s), full {t['full']:.1f}s (median {m['full']:.2f}s), auto {t['auto']:.1f}s "
                     f"(median {m['auto']:.2f}s) = {run['auto_vs_cheaper']:.2f}x the cheaper ({run['cheaper']}), "
                     f"{run['auto_vs_cheaper_last_half']:.2f}x over the last half; "
                     f"auto chose {choices} (I incremental, F full, R rebuild)")
    return lines
