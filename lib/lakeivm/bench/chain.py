"""``lakeivm bench chain``: gold views of the TPC-DI-style pipeline refreshed on demand within their
deadlines, their chains planned jointly against each view planning alone, refreshing every view
every tick and refreshing only on demand.

Workload: ``lakeivm.datagen.tpcdi`` at ``--customers``; the gold views named by ``--leaves``
(``VIEW=DEADLINE_S``, one deadline each) and every view they read, built once; then ``--ticks`` ticks
of a bursty stream (a market day per tick, a bulk load of ``--bulk`` days every ``--bulk-every``-th
tick). At each tick the policy acts, then, at the same seeded moments for every policy, an on-demand
refresh of a random gold view (the chain: it and the views it reads) is timed against its deadline:

- ``joint``: a tick of each gold view plans its chain under its deadline (``chain_planner: joint``);
- ``alone``: a tick of every view, each planning alone (``chain_planner: alone``) under its share of
  the tightest chain it is in (the gold view's deadline over the chain's views: each view meeting its
  own deadline, the chain meets the gold view's -- what planning per view needs to promise it);
- ``every-tick``: every view refreshed every tick;
- ``on-demand``: nothing between refreshes.

Each policy runs on a lake of its own (the same seeded data and stream). Cost is every second the
policy spent: its ticks and its refreshes. After the last tick every gold view is audited against its
SQL. Results: JSON + PNG under ``--out``.
"""
from __future__ import annotations

import random
import time
from dataclasses import replace
from pathlib import Path

from lakeivm.bench import machine, save, use_agg
from lakeivm.bench.pipeline import VIEWS, topological
from lakeivm.config import Settings

POLICIES = ("joint", "alone", "every-tick", "on-demand")
LEAVES = ("g_customer_360=10", "g_net_flows=30", "g_broker_leaderboard=60")


def main(argv: list[str], settings: Settings) -> int:
    """``lakeivm bench chain [--customers 500] [--ticks 16] [--leaves VIEW=S ...] [--policies ...] [--out DIR]``."""
    import argparse

    parser = argparse.ArgumentParser(prog="lakeivm bench chain", description=__doc__.splitlines()[0])
    parser.add_argument("--customers", type=int, default=500, help="customers in the initial load")
    parser.add_argument("--ticks", type=int, default=16, help="ticks per policy")
    parser.add_argument("--leaves", nargs="+", default=list(LEAVES), help="gold views and their deadlines, VIEW=SECONDS")
    parser.add_argument("--policies", nargs="+", default=list(POLICIES), choices=POLICIES)
    parser.add_argument("--bulk", type=float, default=6.0, help="a bulk load's size, in market days")
    parser.add_argument("--bulk-every", type=int, default=5, help="a bulk load every this many ticks")
    parser.add_argument("--refresh-chance", type=float, default=0.5, help="the chance of an on-demand refresh after a tick")
    parser.add_argument("--out", default="bench-results")
    args = parser.parse_args(argv)
    leaves = {name: float(deadline) for name, deadline in (leaf.split("=") for leaf in args.leaves)}
    results = run_chain_bench(settings, args.customers, args.ticks, leaves, args.policies, args.bulk, args.bulk_every,
                              args.refresh_chance, args.out)
    return 0 if all(p["audits_ok"] for p in results["policies"].values()) else 1


def run_chain_bench(settings: Settings, customers: int, ticks: int, leaves: dict[str, float], policies: list[str],
                    bulk: float, bulk_every: int, chance: float, out: str, progress=print) -> dict:
    """Run every policy on a lake of its own; returns (and writes) the results."""
    from lakeivm.spark import get_spark

    spark = get_spark(settings)
    rng = random.Random(5)
    moments = [(rng.random() < chance, rng.choice(sorted(leaves))) for _ in range(ticks)]  # the same for every policy
    results = {"machine": machine(), "customers": customers, "ticks": ticks, "leaves": leaves, "bulk": bulk,
               "bulk_every": bulk_every, "policies": {}}
    for policy in policies:
        results["policies"][policy] = _one_policy(spark, settings, policy, customers, leaves, moments, bulk, bulk_every, out, progress)
    results["tables"] = tables(results)
    save(out, "chain", results, _plot)
    progress(f"wrote {out}/chain.json and {out}/chain.png")
    return results


def _one_policy(spark, settings: Settings, policy: str, customers: int, leaves: dict[str, float], moments, bulk: float, bulk_every: int,
                out: str, progress) -> dict:
    from lakeivm.catalog.registry import load_specs
    from lakeivm.datagen.tpcdi import generate_tpcdi
    from lakeivm.run.audit import audit
    from lakeivm.run.engine import run_view
    from lakeivm.store.lake import Lake

    root = f"{out}/lake-chain-{policy}"
    Lake(spark, root).delete(Lake(spark, root).root)
    lake = Lake(spark, root, limits=settings.limits)
    lake.ensure_system_tables()
    stream = generate_tpcdi(lake, customers=customers, progress=lambda line: None)
    specs, order = _declared(load_specs(VIEWS, root), leaves, policy)
    progress(f"chain bench, policy {policy}: {len(order)} views under {', '.join(f'{v} ({s:g} s)' for v, s in leaves.items())}")
    for leaf in leaves:
        run_view(lake, specs[leaf])
    spent: list[float] = []
    refreshes: list[dict] = []
    for tick, (asked, leaf) in enumerate(moments):
        stream.batch(bulk if (tick + 1) % bulk_every == 0 else 1.0)
        t0 = time.perf_counter()
        if policy == "joint":
            for name in leaves:
                run_view(lake, specs[name], mode="tick")
        elif policy == "alone":
            for name in order:
                run_view(lake, specs[name], mode="tick")
        elif policy == "every-tick":
            for name in order:
                run_view(lake, specs[name])
        spent.append(time.perf_counter() - t0)
        if asked:
            t0 = time.perf_counter()
            row = run_view(lake, specs[leaf])
            seconds = time.perf_counter() - t0
            spent[-1] += seconds
            predicted = row.chain_predicted_seconds if row is not None else None
            refreshes.append({"tick": tick + 1, "view": leaf, "deadline_s": leaves[leaf], "seconds": seconds,
                              "predicted_s": predicted, "met": seconds <= leaves[leaf]})
            progress(f"  tick {tick + 1}: refresh {leaf} {seconds:.1f} s (predicted "
                     f"{'-' if predicted is None else f'{predicted:.1f}'} s, deadline {leaves[leaf]:g} s)")
    differ = [name for name in leaves if not audit(lake, specs[name]).ok]
    seconds = [r["seconds"] for r in refreshes]
    progress(f"  {policy}: {sum(r['met'] for r in refreshes)}/{len(refreshes)} refreshes within their deadline, "
             f"{sum(spent):.1f} s spent" + (f"; audit DIFFERS: {', '.join(differ)}" if differ else "; every gold view equals its SQL"))
    return {"views": order, "spent_s": spent, "total_s": sum(spent), "refreshes": refreshes,
            "met": sum(r["met"] for r in refreshes), "p50_s": _quantile(seconds, 0.5), "p95_s": _quantile(seconds, 0.95),
            "per_deadline": {f"{d:g}": {"met": sum(r["met"] for r in refreshes if r["deadline_s"] == d),
                                        "refreshes": sum(r["deadline_s"] == d for r in refreshes)} for d in sorted(set(leaves.values()))},
            "audits_ok": not differ}


def _declared(loaded, leaves: dict[str, float], policy: str):
    """The pipeline's specs as ``policy`` declares them (deadlines, ``chain_planner``), and the views of
    the gold views' chains in topological order."""
    from lakeivm.catalog.registry import link_upstreams
    from lakeivm.run.chains import chain_of

    if loaded.broken:
        raise RuntimeError("the pipeline's specs do not load: " + "; ".join(b.summary for b in loaded.broken))
    linked, _ = link_upstreams(dict(loaded.items()))
    chains = {leaf: [one.name for one in chain_of(linked[leaf])] for leaf in leaves}
    used = {one for views in chains.values() for one in views}
    if policy == "alone":  # each view its share of the tightest chain it is in: the chain fits if every view meets its own
        deadline = {name: min(leaves[leaf] / len(views) for leaf, views in chains.items() if name in views) for name in used}
    else:
        deadline = leaves
    planner = "alone" if policy == "alone" else "joint"
    specs, _ = link_upstreams({name: replace(spec, deadline_s=deadline.get(name, spec.deadline_s),
                                             options={**spec.options, "chain_planner": planner}) for name, spec in loaded.items()})
    return specs, [name for name in topological(specs) if name in used]


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def tables(results: dict) -> list[dict]:
    """The record's tables (``lakeivm bench render``): per policy, then each on-demand refresh."""
    def s(x) -> str:
        return "" if x is None else f"{x:.2f}"

    policies = results["policies"]
    deadlines = sorted({float(d) for p in policies.values() for d in p["per_deadline"]})
    summary = {"columns": ["policy", "refreshes within deadline",
                           *[f"within {d:g} s" for d in deadlines], "p50 refresh s", "p95 refresh s", "total s spent",
                           "total / joint"], "rows": []}
    joint = policies.get("joint", {}).get("total_s")
    for name, p in policies.items():
        per = [p["per_deadline"].get(f"{d:g}", {"met": 0, "refreshes": 0}) for d in deadlines]
        summary["rows"].append([name, f"{p['met']}/{len(p['refreshes'])}", *[f"{x['met']}/{x['refreshes']}" for x in per],
                                s(p["p50_s"]), s(p["p95_s"]), s(p["total_s"]), f"{p['total_s'] / joint:.2f}" if joint else ""])
    refreshes = {"columns": ["tick", "view (deadline s)", *[f"{name} s (predicted)" for name in policies]], "rows": []}
    first = next(iter(policies.values()), {"refreshes": []})
    for i, r in enumerate(first["refreshes"]):
        refreshes["rows"].append([r["tick"], f"{r['view']} ({r['deadline_s']:g})",
                                  *[f"{s(p['refreshes'][i]['seconds'])} ({s(p['refreshes'][i]['predicted_s'])})"
                                    + ("" if p["refreshes"][i]["met"] else " MISSED") for p in policies.values()]])
    return [summary, refreshes]


def _plot(results: dict, path: Path) -> None:
    use_agg()
    import matplotlib.pyplot as plt

    policies = results["policies"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    names = list(policies)
    left.bar(names, [p["total_s"] for p in policies.values()], color="tab:blue")
    left.set_ylabel("seconds spent (ticks + refreshes)")
    left.set_title("total cost")
    for name, p in policies.items():
        right.plot([r["tick"] for r in p["refreshes"]], [r["seconds"] for r in p["refreshes"]], marker="o", label=name)
    for deadline in sorted(set(results["leaves"].values())):
        right.axhline(deadline, color="grey", linestyle=":", linewidth=1)
    right.set_xlabel("tick")
    right.set_ylabel("on-demand chain refresh, s")
    right.set_title("refreshes against their deadlines (dotted)")
    right.legend()
    fig.suptitle(f"chain planning, TPC-DI-style pipeline, {results['customers']} customers ({results['machine']['cores']} cores)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
