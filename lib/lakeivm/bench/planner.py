"""``lakeivm bench planner``: asymmetric (LGM) vs symmetric (NAIVE) batch maintenance under a deadline.

(a) Simulation (paper §1/§5): linear costs fitted to the paper's example (``PAPER_COSTS``,
    docs/design/planner.md#choices-the-paper-leaves-open) and its C, on the constant stream and the
    Figure 7 streams; cost per change of NAIVE, ONLINE, ADAPT and the A* optimum OPT^LGM, with every
    plan checked valid.
(b) Real Spark runs: two copies of the paper-style TPC-H view (cheapest EUROPE supply cost per
    part), one planned by LGM ONLINE and one by NAIVE, each in its own copy of one lake (in one lake
    the second view to run read the tables' new versions warm and cheaper: each learned its own
    costs from that, and the comparison measured the order), fed the *same* seeded change
    stream (re-costed parts, moved suppliers) tick by tick, with an on-demand refresh every few
    ticks (``--view supply_value``: an F-IVM view with ``updatable: [partsupp]`` instead, where a
    supplier change rebuilds the view tree). Cost models are calibrated first (``lakeivm calibrate``: appended
    batches up to 2^N changes, ``--calibrate-max-exp``, N per table if so given; with N >= 16 two batches
    pass the in-process read path's 20k rows and the model is a line per path), then refitted from the runs.
    The deadline defaults to 1.2× (``--deadline-margin``) what ~3 ticks (``--deadline-ticks``) of arrivals
    cost, so ticks must act. Reported: total maintenance seconds per policy, and the share of refreshes that
    met the deadline. JSON + PNG under ``--out``.
"""
from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

from lakeivm.bench import machine, save, use_agg
from lakeivm.config import SHIPPED_VIEWS, Settings

BACKLOG_TICKS = 600  # ticks of backlog kept for the plot: several of NAIVE's and ONLINE's flushes on the paper's stream
STREAMS = {"constant": None, "SS": (0.5, 1.0), "SU": (0.5, 5.0), "FS": (0.9, 1.0), "FU": (0.9, 5.0)}


def main(argv: list[str], settings: Settings) -> int:
    parser = argparse.ArgumentParser(prog="lakeivm bench planner", description=__doc__.splitlines()[0])
    parser.add_argument("--horizon", type=int, default=1000, help="simulated ticks (default 1000)")
    parser.add_argument("--scale", type=float, default=0.1, help="TPC-H scale factor of the Spark part (default 0.1)")
    parser.add_argument("--ticks", type=int, default=12, help="Spark ticks (default 12)")
    parser.add_argument("--refresh-every", type=int, default=6, help="an on-demand refresh every N ticks (default 6)")
    parser.add_argument("--deadline", type=float, default=None,
                        help="the views' deadline in seconds (default: what --deadline-ticks ticks of arrivals cost, from the calibration)")
    parser.add_argument("--deadline-ticks", type=float, default=3.0,
                        help="without --deadline: the deadline is --deadline-margin × the calibrated cost of this many ticks of "
                             "arrivals (default 3)")
    parser.add_argument("--deadline-margin", type=float, default=1.2, help="see --deadline-ticks (default 1.2)")
    parser.add_argument("--headroom", type=float, default=0.0,
                        help="both views' spec option headroom: seconds kept free below the deadline (default 0)")
    parser.add_argument("--calibrate-max-exp", type=_exponents, default=9,
                        help="calibrate with batches up to 2^N changes: N, or one per table (partsupp=16,supplier=10)")
    parser.add_argument("--parts", type=int, default=50, help="parts re-costed per tick (default 50)")
    parser.add_argument("--suppliers", type=int, default=2, help="suppliers moved per tick (default 2)")
    parser.add_argument("--view", choices=("cheapest", "supply_value"), default="cheapest",
                        help="Spark part's view: cheapest (first-order MIN, default) or supply_value (F-IVM, updatable: partsupp)")
    parser.add_argument("--skip-spark", action="store_true", help="only the simulation")
    parser.add_argument("--out", default="bench-results")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = {"machine": machine(), "simulation": simulate(args.horizon)}
    if not args.skip_spark:
        results["spark"] = spark_runs(settings, args, out)
    save(out, "planner", results, _plot)
    print(f"wrote {out / 'planner.json'} and {out / 'planner.png'}")
    return 0


def _exponents(text: str) -> int | dict[str, int]:
    """``N`` or ``table=N,table=N``."""
    if "=" not in text:
        return int(text)
    return {table.strip(): int(n) for table, n in (part.split("=", 1) for part in text.split(","))}


def simulate(horizon: int) -> dict:
    """Part (a): the four planners on the paper's example, per stream."""
    from lakeivm.planning.paper_example import paper_arrivals, simulate_paper_example

    report = {}
    for name, shape in STREAMS.items():
        arrivals = None if shape is None else paper_arrivals(horizon, *shape, seed=1)
        t0 = time.perf_counter()
        comparison = simulate_paper_example(horizon=horizon, estimated_horizon=horizon // 2, arrivals=arrivals)
        comparison.check_invariants()
        per_change = comparison.per_change()
        report[name] = {
            "ms_per_change": {k: round(v * 1000, 4) for k, v in per_change.items()},
            "saving_vs_naive": {k: round(1 - v / per_change["NAIVE"], 4) for k, v in per_change.items()},
            "ratio_to_astar": {k: round(v / per_change["A*"], 4) for k, v in per_change.items()},
            "backlog": {k: comparison.backlog(k)[:BACKLOG_TICKS] for k in ("NAIVE", "ONLINE")},
            "seconds": round(time.perf_counter() - t0, 2),
        }
        print(f"simulation {name:>8}: ms/change " + ", ".join(f"{k} {v:.3f}" for k, v in report[name]["ms_per_change"].items())
              + f"; ONLINE/NAIVE {1 - report[name]['saving_vs_naive']['ONLINE']:.3f}, ONLINE/A* {report[name]['ratio_to_astar']['ONLINE']:.3f}",
              flush=True)
    return report


# The Spark part's views: (spec file, spec overrides). ``cheapest``: the paper's MIN view (first-order
# with per-part multisets). ``supply_value``: an F-IVM view with ``updatable: [partsupp]``, so a
# partsupp change is a cheap delta and a supplier change rebuilds the view tree (a large fixed cost).
SPARK_VIEWS = {
    "cheapest": ("cheapest_supplier_cost.yaml", {"kind": "first_order"}),
    "supply_value": ("supply_value_by_nation.yaml", {"kind": "fivm", "updatable": ["partsupp"]}),
}


def spark_runs(settings: Settings, args: argparse.Namespace, out: Path) -> dict:
    """Part (b): LGM and NAIVE copies of one view, same stream, measured side by side."""
    from lakeivm.store import commit
    from lakeivm.api import View, Views
    from lakeivm.run.calibrate import calibrate, describe
    from lakeivm.datagen.tpch import TpchChangeStream, generate_tpch
    from lakeivm.store.lake import Lake
    from lakeivm.catalog.registry import load_spec, spec_from_dict
    from lakeivm.spark import get_spark

    spark = get_spark(settings)
    root = out / f"lake-planner-sf{args.scale}"
    Lake(spark, str(root)).delete(str(root))
    file, extra = SPARK_VIEWS[args.view]
    base = load_spec(SHIPPED_VIEWS / file)
    extra = {**extra, "headroom": args.headroom}
    specs = {policy: spec_from_dict({"name": f"{args.view}_{policy}", "sql": base.sql, "deadline": args.deadline or 3600,
                                     "planner": policy, **extra}) for policy in ("lgm", "naive")}

    def opened(policy: str) -> View:  # the policy's view, in its own copy of the lake
        return Views.open(spark, lake=str(root / policy), settings=settings, specs=[specs[policy]])[specs[policy].name]

    views = {"lgm": opened("lgm")}
    generate_tpch(views["lgm"].lake, args.scale, tables=("partsupp", "supplier", "nation", "region"))
    shutil.copytree(root / "lgm" / "tables", root / "naive" / "tables")  # the same files: the same seeded stream
    views["naive"] = opened("naive")
    for view in views.values():
        view.refresh()
    print("calibrating the cost models (2^j-change batches per table on a scratch copy)", flush=True)
    models = calibrate(views["lgm"].lake, specs["lgm"], args.calibrate_max_exp, tables=("partsupp", "supplier"),
                       progress=lambda m: print(f"  {m}", flush=True))
    commit.record_costs(views["naive"].lake, specs["naive"].name, models)  # same SQL, same costs
    deadline = args.deadline
    if deadline is None:  # the backlog of a few ticks of arrivals fills it: ticks must act between refreshes
        arrivals = {"partsupp": 8 * args.parts, "supplier": 2 * args.suppliers}  # CDF rows: pre+post images
        backlog = sum(m.cost()(args.deadline_ticks * arrivals[t]) if t in arrivals else m.b for t, m in models.items())
        deadline = round(backlog * args.deadline_margin, 1)
        specs = {p: spec_from_dict({"name": s.name, "sql": s.sql, "deadline": deadline, "planner": p, **extra})
                 for p, s in specs.items()}
        views = {policy: opened(policy) for policy in views}
    print(f"deadline {deadline}s; models " + ", ".join(f"{t}: {describe(m)}" for t, m in models.items()), flush=True)
    streams = {policy: TpchChangeStream(view.lake, seed=5) for policy, view in views.items()}
    runs: dict[str, list] = {policy: [] for policy in views}  # the committed log row of every run in the loop
    for tick in range(1, args.ticks + 1):
        for stream in streams.values():
            stream.update_supplycost(args.parts)
            stream.update_supplier_nation(args.suppliers)
        refresh = tick % args.refresh_every == 0
        turn = tick // args.refresh_every if refresh else tick  # alternate who runs first, among ticks and among refreshes
        for policy in (("lgm", "naive") if turn % 2 else ("naive", "lgm")):
            spec = specs[policy]
            row = views[policy].refresh(mode="refresh" if refresh else "tick")
            runs[policy] += [row] if row is not None else []
            print(f"tick {tick:>3} {spec.name:<16} {'refresh' if refresh else 'tick   '} applied {list(row.applied) if row else []} "
                  f"{row.seconds if row else 0:.1f}s" + (f" (predicted {row.predicted_seconds:.1f}s)" if row and row.predicted_seconds
                                                          is not None else "")
                  + (f" deadline met: {row.deadline_met}" if refresh else ""), flush=True)
    report = {"view": args.view, "scale": args.scale, "deadline_s": deadline, "headroom_s": args.headroom,
              "ticks": args.ticks, "refresh_every": args.refresh_every,
              "parts_per_tick": args.parts, "suppliers_per_tick": args.suppliers,
              "cost_models": {t: m._asdict() for t, m in models.items()}}
    for policy in specs:
        rows = [r for r in runs[policy] if r.mode in ("tick", "refresh")]
        refreshes = [r for r in rows if r.mode == "refresh"]
        report[policy] = {
            "total_seconds": round(sum(r.seconds for r in rows), 2),
            "tick_seconds": round(sum(r.seconds for r in rows if r.mode == "tick"), 2),
            "refresh_seconds": [round(r.seconds, 2) for r in refreshes],
            "refresh_predicted_seconds": [None if r.predicted_seconds is None else round(r.predicted_seconds, 2) for r in refreshes],
            "refreshes_met": sum(bool(r.deadline_met) for r in refreshes), "refreshes": len(refreshes),
            "actions": [list(r.applied) for r in rows],
            "run_seconds": [round(r.seconds, 3) for r in rows],
            "audit_ok": views[policy].audit().ok,
        }
    report["lgm_over_naive"] = round(report["lgm"]["total_seconds"] / report["naive"]["total_seconds"], 3)
    print(f"spark: LGM {report['lgm']['total_seconds']}s vs NAIVE {report['naive']['total_seconds']}s "
          f"(ratio {report['lgm_over_naive']}); refreshes within the deadline: LGM {report['lgm']['refreshes_met']}/"
          f"{report['lgm']['refreshes']}, NAIVE {report['naive']['refreshes_met']}/{report['naive']['refreshes']}", flush=True)
    return report


def _plot(results: dict, path: Path) -> None:
    use_agg()
    import matplotlib.pyplot as plt

    from lakeivm.planning.paper_example import PAPER_DEADLINE

    spark = results.get("spark")
    fig, axes = plt.subplots(1, 3 if spark else 2, figsize=(18 if spark else 12, 4))
    backlog = results["simulation"]["constant"]["backlog"]
    for name, series in backlog.items():
        axes[0].plot(series, label=name, linestyle="--" if name == "ONLINE" else "-")
    axes[0].axhline(PAPER_DEADLINE, color="red", linestyle="--", label="deadline C")
    axes[0].set(title="simulation: refresh cost of the backlog after each tick", xlabel="tick", ylabel="seconds")
    axes[0].legend()
    names = list(results["simulation"])
    for i, planner in enumerate(("NAIVE", "ONLINE", "ADAPT", "A*")):
        axes[1].bar([j + i * 0.2 for j in range(len(names))],
                    [results["simulation"][n]["ms_per_change"][planner] for n in names], width=0.2, label=planner)
    axes[1].set_xticks([j + 0.3 for j in range(len(names))], names)
    axes[1].set(title="simulation: ms per change", ylabel="ms")
    axes[1].legend()
    if spark:  # every tick/refresh run in order; a refresh must stay under the deadline
        for policy in ("naive", "lgm"):
            seconds = spark[policy]["run_seconds"]
            axes[2].plot(range(1, len(seconds) + 1), seconds, marker="o",
                         label=f"{policy.upper()} (total {spark[policy]['total_seconds']:.0f} s)")
        axes[2].axhline(spark["deadline_s"], color="red", linestyle="--", label="deadline C")
        axes[2].set(title=f"Spark, TPC-H SF {spark['scale']} ({spark['view']}): seconds per run",
                    xlabel=f"run (a refresh every {spark['refresh_every']} ticks)", ylabel="seconds")
        axes[2].legend()
    fig.tight_layout()
    fig.savefig(path)
