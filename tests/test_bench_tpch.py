"""``lakeivm bench tpch``'s arithmetic (the suite itself runs for hours: ``lakeivm bench tpch``): the
batch sizes of the refresh functions, and the summary of per-query seconds into speed-ups."""
from __future__ import annotations

import math

from lakeivm.bench.tpch import batch_sizes, ran, summarize, tables, write_views


def test_batch_sizes_are_the_fraction_of_each_table_and_at_least_one_row():
    counts = {"orders": 1_500_000, "part": 200_000, "supplier": 10_000, "customer": 150_000}
    assert batch_sizes(counts, 0.001) == {"orders": 1500, "parts": 200, "suppliers": 10, "customers": 150, "prices": 200}
    assert batch_sizes({table: 100 for table in counts}, 0.001) == {"orders": 1, "parts": 1, "suppliers": 1, "customers": 1, "prices": 1}


def _entry(incremental, auto, spark, duckdb):
    return {"kind": "fivm", "incremental_s": incremental, "auto_s": auto, "auto_ran": ["incremental"] * len(auto),
            "spark_s": spark, "duckdb_s": duckdb, "duckdb_failed": None}


def test_summary_takes_medians_and_geometric_means_and_judges_auto():
    per_query = {"q01": _entry([1.0, 3.0, 2.0], [9.0, 2.6, 2.6], [8.0, 8.0, 8.0], [1.0, 1.0, 1.0]),  # 4x Spark; auto 2.6 <= 1.1 * 2.5
                 "q02": _entry([4.0], [5.0], [2.0], [])}  # slower than Spark; auto 5.0 > 1.1 * 2; DuckDB not run
    summary = summarize(per_query)
    assert summary["medians"]["q01"]["over_spark"] == 4.0 and summary["medians"]["q01"]["over_duckdb"] == 0.5
    assert summary["medians"]["q02"]["over_duckdb"] is None
    assert summary["faster_than_spark"] == 1 and summary["auto_on_target"] == 1  # q01's auto judged after its first batch
    assert math.isclose(summary["geomean_over_spark"], math.sqrt(4.0 * 0.5))
    results = {"spark_only": False, "scales": [{"scale": 1.0, "queries": per_query, "summary": summary}]}
    table = tables(results)[0]
    assert table["columns"][0] == "query (SF 1)" and [row[0] for row in table["rows"]] == ["q01", "q02", "all"]
    assert table["rows"][0][6] == "4.00" and table["rows"][1][8] == "no"
    assert summary["medians"]["q01"]["auto_settled_on_target"] is False  # batch 3 alone: 2.6 > 1.1 * 2.0
    assert summary["auto_settled_on_target"] == 0 and summary["medians"]["q02"]["auto_settled_on_target"] is None
    assert len(table["columns"]) == 10 and table["rows"][0][9] == "no" and table["rows"][2][9] == "0 of 2"


def test_auto_settled_is_judged_after_the_batch_that_probes():
    """Auto's second run probes a recompute once (its seconds and the probe's): judged on batches 3+
    as well, where it has settled; batches 2+ stays the headline."""
    probe_batch = _entry([1.0, 1.0, 1.0], [1.0, 1.9, 1.05], [5.0] * 3, [])
    summary = summarize({"q01": probe_batch})
    assert not summary["medians"]["q01"]["auto_on_target"] and summary["medians"]["q01"]["auto_settled_on_target"]
    assert summarize({"q01": _entry([1.0, 1.0], [1.0, 1.9], [5.0] * 2, [])})["auto_settled_on_target"] is None


def test_each_query_is_written_twice_with_its_policy(tmp_path):
    from lakeivm.catalog.registry import load_specs

    shipped = write_views(tmp_path, [6, 13])
    specs = load_specs(tmp_path)
    assert not specs.broken
    assert {name: spec.refresh_policy for name, spec in specs.items() if not spec.derived_from} == {
        "tpch_q06_inc": "incremental", "tpch_q06_auto": "auto", "tpch_q13_inc": "incremental", "tpch_q13_auto": "auto"}
    assert "l_discount" in shipped[6] and "LEFT OUTER JOIN" in shipped[13].upper()


def test_a_refresh_is_named_by_what_its_log_row_says_it_did():
    from types import SimpleNamespace as Row

    assert [ran(None), ran(Row(kind="full", mode="refresh")), ran(Row(kind="first_order", mode="rebuild")),
            ran(Row(kind="first_order", mode="refresh"))] == ["nothing to do", "full", "rebuild", "incremental"]
