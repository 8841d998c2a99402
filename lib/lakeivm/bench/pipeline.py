"""``lakeivm bench pipeline``: the TPC-DI-style pipeline (``schemas/views-tpcdi``) kept fresh batch
after batch, against recomputing the whole pipeline with Spark and with DuckDB.

Workload: ``lakeivm.datagen.tpcdi`` at each ``--customers`` scale: the initial load, every view
built, then ``--batches`` incremental batches (a market day each: mostly appends, some updates and
deletes). Per batch, side by side in one run:

- lakeivm: every view refreshed as ``lakeivm refresh`` refreshes the folder (``Views.refresh``: each
  view once, upstreams first, a change range that several views read is read once); each run's own seconds
  from its log row, and the wall time of the whole pipeline;
- Spark: every declared view's SQL (as written: not the views lakeivm splits off it) recomputed
  from its inputs and written over a Delta table, in the same order (what a nightly rebuild does:
  each view from the base tables' snapshots and the views it reads);
- DuckDB: the same, in one process over the base tables' snapshots read by delta-rs (the SQL
  transpiled by sqlglot; a view DuckDB cannot run is named, with the tables it feeds).

After each batch every view is audited against its SQL recomputed by Spark. Each view's kind and,
when it is recomputed in full, the reason. Results: JSON + PNG under ``--out``.
"""
from __future__ import annotations

import statistics
import time
from pathlib import Path

from lakeivm.bench import machine, save, use_agg
from lakeivm.config import SCHEMAS, Settings

VIEWS = SCHEMAS / "views-tpcdi"


def main(argv: list[str], settings: Settings) -> int:
    """``lakeivm bench pipeline [--customers 500 5000] [--batches 3] [--out DIR]``."""
    import argparse

    parser = argparse.ArgumentParser(prog="lakeivm bench pipeline", description=__doc__.splitlines()[0])
    parser.add_argument("--customers", type=int, nargs="+", default=[500, 5000], help="scales: customers in the initial load")
    parser.add_argument("--batches", type=int, default=3, help="incremental batches per scale")
    parser.add_argument("--no-duckdb", action="store_true", help="leave DuckDB's recompute out")
    parser.add_argument("--out", default="bench-results")
    args = parser.parse_args(argv)
    results = run_pipeline_bench(settings, args.customers, args.batches, args.out, duckdb=not args.no_duckdb)
    return 0 if all(scale["audits_ok"] for scale in results["scales"]) else 1


def topological(specs) -> list[str]:
    """The views of ``specs``, each after every view it reads."""
    from lakeivm.run.chains import chain_of

    order = dict.fromkeys(one.name for spec in specs.values() for one in chain_of(spec))
    return [name for name in order if name in specs]


def run_pipeline_bench(settings: Settings, scales: list[int], batches: int, out: str, duckdb: bool = True,
                       progress=print) -> dict:
    """Run the benchmark at each scale; returns (and writes) the results."""
    from lakeivm.spark import get_spark

    spark = get_spark(settings)
    results = {"machine": machine(), "batches": batches, "scales": []}
    for customers in scales:
        results["scales"].append(_one_scale(spark, settings, customers, batches, out, duckdb, progress))
    results["tables"] = tables(results)
    save(out, "pipeline", results, _plot)
    progress(f"wrote {out}/pipeline.json and {out}/pipeline.png")
    return results


def _one_scale(spark, settings: Settings, customers: int, batches: int, out: str, duckdb: bool, progress) -> dict:
    from lakeivm.api import Views
    from lakeivm.catalog.registry import load_specs
    from lakeivm.datagen.tpcdi import generate_tpcdi
    from lakeivm.store import commit
    from lakeivm.store.lake import Lake

    root = f"{out}/lake-tpcdi-{customers}"
    Lake(spark, root).delete(Lake(spark, root).root)
    lake = Lake(spark, root)
    stream = generate_tpcdi(lake, customers=customers, progress=lambda line: None)
    specs = load_specs(VIEWS, root)
    if specs.broken:
        raise RuntimeError("the pipeline's specs do not load: " + "; ".join(b.summary for b in specs.broken))
    views = Views.open(spark, lake=root, settings=settings, specs=specs.values())
    order = topological(views.specs)
    progress(f"TPC-DI-style pipeline, {customers} customers: {len(order)} views; building them")
    t0 = time.perf_counter()
    views.refresh(order)
    build_s = time.perf_counter() - t0
    kinds = {name: commit.last_committed(lake, name).kind for name in order}
    reasons = {name: views[name].status().why_full for name in order if kinds[name] == "full"}
    incremental = sum(kind != "full" for kind in kinds.values())
    progress(f"  built in {build_s:.1f}s: {incremental} of {len(order)} incremental"
             + "".join(f"\n    {name}: full: {reason}" for name, reason in reasons.items()))
    per_view: dict[str, dict[str, list]] = {name: {"lakeivm_s": [], "spark_s": [], "duckdb_s": [], "ran": []} for name in order}
    runs: list[dict[str, int]] = []  # per batch: how many runs were incremental, recomputed (auto's choice), had nothing to do
    totals: dict[str, list[float]] = {"lakeivm_s": [], "spark_s": [], "duckdb_s": []}
    duckdb_failed: dict[str, str] = {}
    audits_ok = True
    for batch in range(batches):
        described = stream.batch()
        t0 = time.perf_counter()
        rows = views.refresh(order)
        totals["lakeivm_s"].append(time.perf_counter() - t0)
        pins = {name: (row or commit.last_committed(lake, name)).pins for name, row in rows.items()}
        for name in order:
            row = rows[name]
            per_view[name]["lakeivm_s"].append(row.seconds if row else 0.0)
            per_view[name]["ran"].append("nothing to do" if row is None else "full" if row.kind == "full" else "incremental")
        runs.append({ran: sum(v["ran"][-1] == ran for v in per_view.values()) for ran in ("incremental", "full", "nothing to do")})
        totals["spark_s"].append(_spark_recompute(lake, views.specs, order, pins, root, per_view))
        if duckdb:
            totals["duckdb_s"].append(_duckdb_recompute(lake, views.specs, order, pins, per_view, duckdb_failed))
        differ = [name for name in order if not views[name].audit().ok]
        audits_ok = audits_ok and not differ
        progress(f"  batch {batch + 1} ({described}): runs {', '.join(f'{n} {ran}' for ran, n in runs[-1].items())}")
        progress(f"    lakeivm {totals['lakeivm_s'][-1]:.1f}s, Spark recompute "
                 f"{totals['spark_s'][-1]:.1f}s" + (f", DuckDB {totals['duckdb_s'][-1]:.1f}s" if duckdb else "")
                 + (f"; audit DIFFERS: {', '.join(differ)}" if differ else "; every view equals its SQL"))
    median = {key: statistics.median(values) if values else None for key, values in totals.items()}
    return {"customers": customers, "views": len(order), "incremental": incremental, "build_s": build_s,
            "kinds": kinds, "full_reasons": reasons, "audits_ok": audits_ok, "duckdb_failed": duckdb_failed,
            **totals, "runs": runs, "per_view": per_view,
            "spark_over_lakeivm": median["spark_s"] / median["lakeivm_s"],
            "duckdb_over_lakeivm": median["duckdb_s"] / median["lakeivm_s"] if median["duckdb_s"] else None}


def tables(results: dict) -> list[dict]:
    """The record's tables (``lakeivm bench render``): per batch, then per view at each scale."""
    def s(x) -> str:
        return f"{x:.2f}"

    batches = {"columns": ["customers", "batch", "runs: incremental / full / nothing to do", "lakeivm s", "Spark s",
                           "DuckDB s", "Spark / lakeivm"], "rows": []}
    views = []
    for scale in results["scales"]:
        for i, runs in enumerate(scale["runs"]):
            lake_s, spark_s = scale["lakeivm_s"][i], scale["spark_s"][i]
            duck = scale["duckdb_s"][i] if scale["duckdb_s"] else None
            batches["rows"].append([scale["customers"], i + 1, " / ".join(str(n) for n in runs.values()), s(lake_s), s(spark_s),
                                    s(duck) if duck is not None else "", f"{spark_s / lake_s:.2f}"])
        views.append({"columns": [f"view ({scale['customers']} customers)", "kind", "lakeivm s per batch (run)", "Spark s per batch"],
                      "rows": [[name, scale["kinds"][name],
                                ", ".join(f"{s(x)} ({ran})" for x, ran in zip(v["lakeivm_s"], v["ran"])),
                                ", ".join(s(x) for x in v["spark_s"])] for name, v in scale["per_view"].items()]})
    return [batches, *views]


def _declared(specs, order: list[str], pins):
    """(name, the view as declared, its inputs' versions) for each view the pipeline declares, in order:
    a view lakeivm split is recomputed as written, at the versions its split-off views read."""
    for name in order:
        if specs[name].derived_from is None:
            split = {one.name for one in specs[name].split_off}
            read = {t: v for one in (name, *split) for t, v in pins[one].items() if t not in split}
            yield name, specs[name].whole or specs[name], read


def _spark_recompute(lake, specs, order: list[str], pins, root: str, per_view) -> float:
    """Every declared view's SQL recomputed by Spark from its inputs at the runs' pins, written over a Delta table."""
    from lakeivm.run.audit import recompute

    total = 0.0
    for name, spec, versions in _declared(specs, order, pins):
        t0 = time.perf_counter()
        recompute(lake, spec, versions).write.format("delta").mode("overwrite").option(
            "overwriteSchema", "true").save(f"{root}/recomputed/{name}")
        seconds = time.perf_counter() - t0
        per_view[name]["spark_s"].append(seconds)
        total += seconds
    return total


def _duckdb_recompute(lake, specs, order: list[str], pins, per_view, failed: dict[str, str]) -> float:
    """Every declared view's SQL run by DuckDB in one process, over the base tables' snapshots (delta-rs)
    and the views computed before it; a view DuckDB cannot run is noted in ``failed`` and read from lakeivm's result."""
    import duckdb
    import sqlglot
    from deltalake import DeltaTable

    from lakeivm.sql import named_outputs

    con = duckdb.connect()
    t0 = time.perf_counter()
    tables = {table: version for name in order for table, version in pins[name].items() if table not in specs}
    for table, version in tables.items():
        con.register(table, DeltaTable(lake.table_path(table), version=version).to_pyarrow_table())
    total = time.perf_counter() - t0
    for name, spec, _ in _declared(specs, order, pins):
        t0 = time.perf_counter()
        try:
            tree = named_outputs(sqlglot.parse_one(spec.sql, dialect="spark"))
            result = con.sql(tree.sql(dialect="duckdb")).to_arrow_table()
        except Exception as err:  # noqa: BLE001 -- a construct DuckDB lacks: named, and lakeivm's result read instead
            failed.setdefault(name, str(err).splitlines()[0][:200])
            result = DeltaTable(lake.view_path(name)).to_pyarrow_table()
        con.register(name, result)
        seconds = time.perf_counter() - t0
        per_view[name]["duckdb_s"].append(seconds)
        total += seconds
    con.close()
    return total


def _plot(results: dict, path: Path) -> None:
    use_agg()
    import matplotlib.pyplot as plt

    scales = results["scales"]
    labels = [f"{scale['customers']} customers" for scale in scales]
    series = {"lakeivm (incremental)": "lakeivm_s", "Spark recompute": "spark_s", "DuckDB recompute": "duckdb_s"}
    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.8 / len(series)
    for i, (label, key) in enumerate(series.items()):
        values = [statistics.median(scale[key]) if scale[key] else 0 for scale in scales]
        ax.bar([x + i * width for x in range(len(scales))], values, width, label=label)
    ax.set_xticks([x + width for x in range(len(scales))], labels)
    ax.set_ylabel("seconds per batch, whole pipeline (median)")
    ax.set_title(f"TPC-DI-style pipeline, {scales[0]['views'] if scales else 0} views ({results['machine']['cores']} cores)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
