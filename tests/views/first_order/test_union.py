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
