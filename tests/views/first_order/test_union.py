"""UNION ALL (and a top-level UNION) maintained by the first-order kind (issue 18, item 2): each
branch by the delta rule, their states added per group. Audited against the SQL after random
insert/update/delete streams on every table, with asymmetric plans."""
from __future__ import annotations

import random

import pytest

from tests.helpers import bootstrap_incremental, random_batch, refresh_and_audit

VIEWS = {
    # aggregates over a UNION ALL whose branches read different tables, one of them a join
    "sums_over_union": "SELECT k, SUM(v) AS sv, COUNT(*) AS n, AVG(v) AS av, MAX(v) AS mv "
                       "FROM (SELECT a AS k, x AS v FROM r UNION ALL SELECT s.a, s.g + r.x FROM s JOIN r ON r.a = s.a) AS u "
                       "WHERE k < 3 GROUP BY k",
    # rows of a UNION ALL that reads r twice (its multiplicities), and a UNION (distinct rows)
    "rows_union_all": "SELECT a, x FROM r WHERE x > 2 UNION ALL SELECT a, g FROM s UNION ALL SELECT a, x FROM r",
    "rows_union": "SELECT a FROM r UNION SELECT a FROM s WHERE g IS NOT NULL",
}


@pytest.mark.heavy(39)
def test_union_all_views_match_sql_under_random_streams_and_asymmetric_plans(lake, spark):
    rng = random.Random(8)
    lake.create_table("r", spark.createDataFrame([(0, 1), (1, None), (2, 5), (2, 5), (3, 2)], "a int, x int"))
    lake.create_table("s", spark.createDataFrame([(0, 0), (1, 4), (2, 7), (5, 3)], "a int, g int"))
    specs = bootstrap_incremental(lake, VIEWS, "first_order")
    for tables in (("s",), ("r",), None):  # each table alone (the other behind), then both
        for table, value in (("r", "x"), ("s", "g")):
            random_batch(lake, rng, table, "a", value)
            random_batch(lake, rng, table, "a", value)
        refresh_and_audit(lake, specs, tables)


REPEATED = {
    # an expression selected twice, padded with NULLs in the other branch (issue 52, item 4)
    "padded": "SELECT a AS k, x AS b, x AS c FROM r UNION ALL SELECT a, CAST(NULL AS INT), CAST(NULL AS INT) FROM s",
    # the repeat in one branch only, and aggregated over: each SUM keeps its own state in both branches
    "one_side": "SELECT a AS k, x AS b, x AS c FROM r UNION ALL SELECT a, g, CAST(NULL AS INT) FROM s",
    "summed": "SELECT k, SUM(b) AS sb, SUM(c) AS sc, COUNT(c) AS nc, MAX(b) AS mb FROM (SELECT a AS k, x AS b, x AS c FROM r "
              "UNION ALL SELECT a, g, CAST(NULL AS INT) FROM s) AS u GROUP BY k",
}


def test_a_repeated_output_expression_keeps_one_column_per_name():
    from lakeivm.catalog.registry import choose, spec_from_dict

    schemas = {"r": {"a": "int", "x": "int"}, "s": {"a": "int", "g": "int"}}
    for name, sql in REPEATED.items():
        choice = choose(spec_from_dict({"name": name, "deadline": 60, "sql": sql}), schemas)
        assert choice.kind == "first_order" and choice.why_full is None, (name, choice.why_full)
    padded = choose(spec_from_dict({"name": "padded", "deadline": 60, "sql": REPEATED["padded"]}), schemas).query
    assert [(k.name, k.sql) for k in padded.branches[0].group_keys] == [("k", "r__u0.a"), ("b", "r__u0.x"), ("c", "r__u0.x")]
    assert [(o.name, o.finalize_sql) for o in padded.outputs] == [("k", "k"), ("b", "b"), ("c", "c")]


@pytest.mark.heavy(100)
def test_a_repeated_output_expression_matches_sql_under_random_streams(lake, spark):
    rng = random.Random(52)
    lake.create_table("r", spark.createDataFrame([(0, 1), (1, None), (2, 5), (2, 5), (3, 2)], "a int, x int"))
    lake.create_table("s", spark.createDataFrame([(0, 0), (1, 4), (2, 7), (5, 3)], "a int, g int"))
    specs = bootstrap_incremental(lake, REPEATED, "first_order")
    for tables in (("r",), None):
        for table, value in (("r", "x"), ("s", "g")):
            random_batch(lake, rng, table, "a", value)
            random_batch(lake, rng, table, "a", value)
        refresh_and_audit(lake, specs, tables)
