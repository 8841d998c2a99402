"""``lakeivm bench tpch``: the 22 TPC-H queries as views (``schemas/views-tpch``) kept fresh under
the TPC-H refresh functions, each query side by side against recomputing it.

Workload at each ``--scale``: ``tpchgen-cli``'s tables, every query built, then ``--batches``
batches. A batch is the refresh pair as the specification defines it -- RF1 inserts ``--fraction``
(0.1 %) of the orders anew with their lineitems, RF2 deletes as many old orders with theirs -- plus
updates of the same fraction of the tables the queries read besides (supply costs, supplier
nations, customer balances, part prices; at least one row each), so that every table changes.

Per query and batch, side by side in one run:

- incremental: the query as a view with ``refresh_policy: incremental`` (the views split off its
  SQL refreshed first, as its refresh does), the refresh's wall seconds;
- auto: the same query as a second view with ``refresh_policy: auto``, and what that run did;
- Spark: the query's SQL recomputed by Spark on the same snapshots and written over a Delta table;
- DuckDB: the SQL (transpiled by sqlglot) over the same snapshots read by delta-rs, in this
  process (its read and compute timed apart; their sum compared).

Each lakeivm refresh starts without the table versions and change ranges the process kept from
the other views' runs (``Lake.forget_reads``): a query is timed as if it were the only view; the
two views of a query take turns running first. After each batch (``--audit last``: the last one)
both views of every query are audited against the SQL recomputed by Spark.
``--spark-only``: every local fast path off (``Limits.everything_on_spark``), the paths a view too
large for one machine takes. Results: JSON + PNG (speed-up per query, log scale) under ``--out``.
"""
from __future__ import annotations

import math
import resource
import statistics
import time
from dataclasses import asdict
from pathlib import Path

from lakeivm.bench import machine, save, use_agg
from lakeivm.config import SCHEMAS, Settings

QUERIES = SCHEMAS / "views-tpch"
POLICIES = ("incremental", "auto")
AUTO_SLACK = 1.10  # auto meets its target on a query when it costs at most this much more than the cheaper way


def main(argv: list[str], settings: Settings) -> int:
    """``lakeivm bench tpch [--scale 0.1 1] [--batches 3] [--queries 1 .. 22] [--fraction 0.001] [--spark-only] [--out DIR]``."""
    import argparse

    parser = argparse.ArgumentParser(prog="lakeivm bench tpch", description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, nargs="+", default=[1.0], help="TPC-H scale factors, one run each")
    parser.add_argument("--batches", type=int, default=3, help="refresh batches per scale")
    parser.add_argument("--queries", type=int, nargs="+", default=list(range(1, 23)), help="query numbers (1-22)")
    parser.add_argument("--fraction", type=float, default=0.001, help="orders per RF1/RF2 (and rows updated per table), as a fraction")
    parser.add_argument("--spark-only", action="store_true", help="every local fast path off: each step on Spark")
    parser.add_argument("--no-duckdb", action="store_true", help="leave DuckDB's recompute out")
    parser.add_argument("--audit", choices=["every", "last"], default="every",
                        help="audit both views of every query after every batch (default) or after the last one only")
    parser.add_argument("--out", default="bench-results")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.queries) - set(range(1, 23)))
    if unknown:
        parser.error(f"--queries: TPC-H has queries 1 to 22, not {unknown}")
    results = run_tpch_bench(settings, args.scale, args.batches, sorted(set(args.queries)), args.fraction, args.out,
                             spark_only=args.spark_only, duckdb=not args.no_duckdb, audit_every=args.audit == "every")
    return 0 if all(scale["audits_ok"] for scale in results["scales"]) else 1


def run_tpch_bench(settings: Settings, scales: list[float], batches: int, queries: list[int], fraction: float, out: str,
                   spark_only: bool = False, duckdb: bool = True, audit_every: bool = True, progress=print) -> dict:
    """Run the benchmark at each scale; returns (and writes) the results."""
    from lakeivm.limits import Limits
    from lakeivm.spark import get_spark

    if spark_only:
        settings = settings.with_(limits=Limits.everything_on_spark())
    spark = get_spark(settings)
    results = {"machine": machine(), "batches": batches, "fraction": fraction, "spark_only": spark_only, "audit_every": audit_every,
               "limits": asdict(settings.limits), "scales": []}
    for scale in scales:
        results["scales"].append(_one_scale(spark, settings, scale, batches, queries, fraction, out, duckdb, audit_every, progress))
    results["tables"] = tables(results)
    save(out, "tpch", results, _plot)
    progress(f"wrote {out}/tpch.json and {out}/tpch.png")
    return results


def view_name(query: int, policy: str) -> str:
    return f"tpch_q{query:02d}_{'inc' if policy == 'incremental' else policy}"


def write_views(folder: Path, queries: list[int]) -> dict[int, str]:
    """Each shipped query twice into ``folder``: as ``tpch_qNN_inc`` (refresh_policy incremental) and
    ``tpch_qNN_auto`` (auto). Returns each query's SQL as shipped."""
    import yaml

    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.yaml"):
        old.unlink()
    sql = {}
    for query in queries:
        shipped = yaml.safe_load((QUERIES / f"tpch_q{query:02d}.yaml").read_text())
        sql[query] = shipped["sql"]
        for policy in POLICIES:
            name = view_name(query, policy)
            (folder / f"{name}.yaml").write_text(yaml.safe_dump({**shipped, "name": name, "refresh_policy": policy}, sort_keys=False))
    return sql


def batch_sizes(counts: dict[str, int], fraction: float) -> dict[str, int]:
    """Rows per batch: ``fraction`` of the orders per RF1 and RF2, of the parts re-costed and repriced,
    of the suppliers moved and of the customers' balances changed; at least one each."""
    def of(table: str) -> int:
        return max(1, round(counts[table] * fraction))

    return {"orders": of("orders"), "parts": of("part"), "suppliers": of("supplier"), "customers": of("customer"), "prices": of("part")}


def _one_scale(spark, settings: Settings, scale: float, batches: int, queries: list[int], fraction: float, out: str,
               duckdb: bool, audit_every: bool, progress) -> dict:
    from lakeivm.api import Views
    from lakeivm.catalog.registry import load_specs
    from lakeivm.datagen.tpch import TpchChangeStream, generate_tpch
    from lakeivm.store.lake import Lake

    root = f"{out}/lake-tpch-{scale:g}"
    Lake(spark, root).delete(Lake(spark, root).root)
    lake = Lake(spark, root, limits=settings.limits)
    t0 = time.perf_counter()
    counts = generate_tpch(lake, scale, progress=lambda line: None)
    progress(f"TPC-H SF {scale:g}: {counts['lineitem']} lineitems, {counts['orders']} orders; generated in {time.perf_counter() - t0:.1f}s")
    folder = Path(out) / f"views-tpch-{scale:g}"
    shipped_sql = write_views(folder, queries)
    specs = load_specs(folder, root)
    if specs.broken:
        raise RuntimeError("the TPC-H views do not load: " + "; ".join(b.summary for b in specs.broken))
    views = Views.open(spark, lake=root, settings=settings, specs=specs.values())
    lake = views.lake
    per_query: dict[str, dict] = {}
    for query in queries:
        entry = per_query[f"q{query:02d}"] = {"build_s": {}, "incremental_s": [], "auto_s": [], "spark_s": [],
                                               "duckdb_s": [], "duckdb_read_s": [], "duckdb_failed": None}
        for policy in POLICIES:
            lake.forget_reads()
            t0 = time.perf_counter()
            row = views[view_name(query, policy)].refresh()
            entry["build_s"][policy] = time.perf_counter() - t0
            if policy == "incremental":
                entry["kind"] = row.kind
        progress(f"  q{query:02d} built ({entry['kind']}): incremental {entry['build_s']['incremental']:.1f}s, "
                 f"auto {entry['build_s']['auto']:.1f}s")
    stream = TpchChangeStream(lake, seed=53)
    sizes = batch_sizes(counts, fraction)
    audits_ok, differ = True, []
    for batch in range(batches):
        described = stream.batch(**sizes)
        progress(f"  batch {batch + 1}: {described}")
        for query in queries:
            entry = per_query[f"q{query:02d}"]
            if entry.get("error"):
                continue
            try:
                said = _time_query(lake, views, query, entry, batch, f"{root}/recomputed/q{query:02d}",
                                   shipped_sql[query] if duckdb else None)
            except Exception as err:  # noqa: BLE001 -- one query's failure is reported; the others are still timed
                entry["error"] = f"batch {batch + 1}: {type(err).__name__}: {str(err).splitlines()[0][:300] if str(err) else ''}"
                audits_ok = False
                differ.append(f"q{query:02d} failed")
                progress(f"    q{query:02d}: FAILED, {entry['error']}")
                continue
            for name in (view_name(query, policy) for policy in POLICIES) if audit_every or batch == batches - 1 else ():
                if not views[name].audit().ok:
                    audits_ok = False
                    differ.append(f"{name} (batch {batch + 1})")
                    said += f"; audit of {name} DIFFERS"
            progress(f"    q{query:02d}: {said}")
    summary = summarize(per_query)
    progress(f"  SF {scale:g}: {summary['faster_than_spark']} of {len(queries)} queries faster incremental than Spark recomputing; "
             f"geometric mean speed-up {summary['geomean_over_spark']:.2f}x over Spark"
             + (f", {summary['geomean_over_duckdb']:.2f}x over DuckDB" if summary["geomean_over_duckdb"] else "")
             + f"; auto within {AUTO_SLACK - 1:.0%} of the cheaper way on {summary['auto_on_target']} of {len(queries)}"
             + ("" if summary["auto_settled_on_target"] is None else f" ({summary['auto_settled_on_target']} after its probe)")
             + ("" if audits_ok else f"; audits DIFFER: {', '.join(differ)}"))
    return {"scale": scale, "rows": counts, "batch_rows": sizes, "queries": per_query, "summary": summary,
            "audits_ok": audits_ok, "differ": differ,
            "driver_max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def _time_query(lake, views, query: int, entry: dict, batch: int, recomputed: str, duckdb_sql: str | None) -> str:
    """One batch of one query: both views refreshed (each first in turn), Spark's and DuckDB's
    recomputes at the incremental view's snapshots; the seconds appended to ``entry``. Returns the
    progress line."""
    from lakeivm.datagen.tpch import TABLES
    from lakeivm.store import commit

    inc, auto = (view_name(query, policy) for policy in POLICIES)
    seconds = {}
    for policy, name in sorted(zip(POLICIES, (inc, auto)), reverse=batch % 2 == 1):
        lake.forget_reads()
        t0 = time.perf_counter()
        row = views[name].refresh()
        seconds[policy] = time.perf_counter() - t0
        entry[f"{policy}_s"].append(seconds[policy])
        entry.setdefault(f"{policy}_ran", []).append(ran(row))
    watermarks = commit.last_committed(lake, inc).watermarks
    base = {table: version for one in (views.specs[inc], *views.specs[inc].split_off)  # the split-off views' tables too
            for table, version in commit.last_committed(lake, one.name).watermarks.items() if table in TABLES}
    whole = views.specs[inc].whole  # a split query: Spark recomputes it as declared, from the base tables
    entry["spark_s"].append(_spark_recompute(lake, whole or views.specs[inc], base if whole else watermarks, recomputed))
    said = (f"incremental {seconds['incremental']:.2f}s, auto {seconds['auto']:.2f}s ({entry['auto_ran'][-1]}), "
            f"Spark {entry['spark_s'][-1]:.2f}s")
    if duckdb_sql is not None and entry["duckdb_failed"] is None:
        try:
            read_s, compute_s = _duckdb_recompute(lake, duckdb_sql, base)
        except Exception as err:  # noqa: BLE001 -- a construct DuckDB lacks, or a table it may not read: named
            entry["duckdb_failed"] = str(err).splitlines()[0][:200]
            return said + f", DuckDB failed: {entry['duckdb_failed']}"
        entry["duckdb_read_s"].append(read_s)
        entry["duckdb_s"].append(read_s + compute_s)
        said += f", DuckDB {read_s + compute_s:.2f}s (read {read_s:.2f}s)"
    return said


def ran(row) -> str:
    """What a refresh's log row says it did: a full recompute, a rebuild of the incremental state (auto
    switching back), an incremental run or nothing."""
    return "nothing to do" if row is None else "full" if row.kind == "full" else "rebuild" if row.mode == "rebuild" else "incremental"


def summarize(per_query: dict[str, dict]) -> dict:
    """Per query the median seconds per batch and the speed-ups (a recompute's seconds over the
    incremental run's); over the queries, how many beat Spark, the geometric means and on how many
    auto is on target (``auto_on_target``)."""
    medians, over_spark, over_duckdb, on_target, settled = {}, [], [], 0, 0
    for query, entry in per_query.items():
        m = {key: statistics.median(entry[key]) if entry[key] else None
             for key in ("incremental_s", "auto_s", "spark_s", "duckdb_s")}
        m["over_spark"] = m["spark_s"] / m["incremental_s"] if m["incremental_s"] and m["spark_s"] else None
        m["over_duckdb"] = m["duckdb_s"] / m["incremental_s"] if m["incremental_s"] and m["duckdb_s"] else None
        m["auto_on_target"] = auto_on_target(entry)
        m["auto_settled_on_target"] = auto_on_target(entry, after=2) if len(entry["auto_s"]) > 2 else None
        medians[query] = m
        settled += bool(m["auto_settled_on_target"])
        over_spark += [m["over_spark"]] if m["over_spark"] else []
        over_duckdb += [m["over_duckdb"]] if m["over_duckdb"] else []
        on_target += m["auto_on_target"]
    return {"medians": medians, "faster_than_spark": sum(x > 1 for x in over_spark),
            "geomean_over_spark": geomean(over_spark), "geomean_over_duckdb": geomean(over_duckdb) if over_duckdb else None,
            "auto_on_target": on_target,
            "auto_settled_on_target": settled if any(len(e["auto_s"]) > 2 for e in per_query.values()) else None}


def auto_on_target(entry: dict, after: int = 1) -> bool:
    """Whether auto cost at most ``AUTO_SLACK`` times the cheaper of the incremental run and Spark's
    recompute, by their medians over the batches after the first ``after`` (auto's first run has no
    history to choose by; its second probes a recompute once, ``planning.auto``: ``after=2`` judges
    it settled); with no batch after them, all of them."""
    judged = slice(after, None) if len(entry["auto_s"]) > after else slice(None)
    series = [entry[key][judged] for key in ("auto_s", "incremental_s", "spark_s")]
    if not all(series) or len({len(values) for values in series}) > 1:
        return False
    auto, incremental, spark = map(statistics.median, series)
    return auto <= AUTO_SLACK * min(incremental, spark)


def geomean(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else float("nan")


def tables(results: dict) -> list[dict]:
    """The record's tables (``lakeivm bench render``): per scale, one row per query."""
    def s(x) -> str:
        return "" if x is None else f"{x:.2f}"

    out = []
    for scale in results["scales"]:
        rows, settled = [], scale["summary"].get("auto_settled_on_target")
        for query, entry in scale["queries"].items():
            m = scale["summary"]["medians"][query]
            ran = ", ".join(sorted(set(entry.get("auto_ran", [])))) or "-"
            rows.append([query, entry["kind"] + (f" (failed {entry['error']})" if entry.get("error") else ""), s(m["incremental_s"]), f"{s(m['auto_s'])} ({ran})", s(m["spark_s"]),
                         s(m["duckdb_s"]) if m["duckdb_s"] is not None else f"failed: {entry['duckdb_failed']}",
                         s(m["over_spark"]), s(m["over_duckdb"]), "yes" if m["auto_on_target"] else "no"]
                        + ([] if settled is None else ["yes" if m.get("auto_settled_on_target") else "no"]))
        summary = scale["summary"]
        rows.append(["all", "", "", "", "", "", f"geo. mean {s(summary['geomean_over_spark'])}; faster on {summary['faster_than_spark']}",
                     f"geo. mean {s(summary['geomean_over_duckdb'])}", f"{summary['auto_on_target']} of {len(scale['queries'])}"]
                    + ([] if settled is None else [f"{settled} of {len(scale['queries'])}"]))
        out.append({"columns": [f"query (SF {scale['scale']:g}{', Spark only' if results.get('spark_only') else ''})", "kind",
                                "incremental s", "auto s (ran)", "Spark s", "DuckDB s", "Spark / incremental",
                                "DuckDB / incremental", f"auto within {AUTO_SLACK - 1:.0%} (batches 2+)"]
                    + ([] if settled is None else [f"auto within {AUTO_SLACK - 1:.0%} (batches 3+)"]), "rows": rows})
    return out


def _spark_recompute(lake, spec, watermarks, path: str) -> float:
    """The query's SQL recomputed by Spark at ``watermarks`` and written over a Delta table; its seconds."""
    from lakeivm.run.audit import recompute

    t0 = time.perf_counter()
    recompute(lake, spec, watermarks).write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(path)
    return time.perf_counter() - t0


def _duckdb_recompute(lake, sql: str, versions: dict[str, int]) -> tuple[float, float]:
    """(seconds reading the snapshots, seconds computing) of DuckDB recomputing ``sql``."""
    from lakeivm.bench.duckdb_baseline import recompute_duckdb
    from lakeivm.sql import named_outputs

    import sqlglot

    named = named_outputs(sqlglot.parse_one(sql, dialect="spark")).sql(dialect="spark")
    run = recompute_duckdb(lake, named, versions)
    return run.read_s, run.compute_s


def _plot(results: dict, path: Path) -> None:
    use_agg()
    import matplotlib.pyplot as plt

    scales = results["scales"]
    fig, axes = plt.subplots(len(scales), 1, figsize=(10, 3.6 * len(scales)), squeeze=False)
    for ax, scale in zip(axes[:, 0], scales):
        medians = scale["summary"]["medians"]
        names = list(medians)
        series = {"Spark recompute / incremental": "over_spark", "DuckDB recompute / incremental": "over_duckdb"}
        width = 0.8 / len(series)
        for i, (label, key) in enumerate(series.items()):
            ax.bar([x + i * width for x in range(len(names))], [medians[n][key] or 0 for n in names], width, label=label)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_yscale("log")
        ax.set_xticks([x + width / 2 for x in range(len(names))], names, rotation=90)
        ax.set_ylabel("speed-up (median per batch)")
        ax.set_title(f"TPC-H SF {scale['scale']:g}, {scale['batch_rows']['orders']} orders per RF"
                     f"{' (Spark only)' if results.get('spark_only') else ''}, {results['machine']['cores']} cores")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
