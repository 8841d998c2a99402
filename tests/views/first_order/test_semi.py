"""EXISTS, NOT EXISTS, IN and NOT IN subqueries over one table, maintained by the first-order kind as
semi- and anti-joins (issue 18, item 2): an outer row enters and leaves the view as the subquery's
matching rows come and go, NOT IN with SQL's NULL rule. Each view is audited against its SQL after
random insert/update/delete streams on every table, with asymmetric plans."""
from __future__ import annotations

import random

import pytest

from lakeivm.limits import Limits
from lakeivm.views.first_order import maintainer
from tests.helpers import audited_rounds, bootstrap_incremental

VIEWS = {  # IN and EXISTS are one semi-join once parsed (tests/test_sql.py); projections over outer joins: test_outer.py
    "exists_join": "SELECT u.c, COUNT(*) AS n, MIN(r.a) AS ma FROM r JOIN u ON r.x = u.x "
                   "WHERE EXISTS (SELECT * FROM s WHERE s.a = r.a AND s.g > 2) GROUP BY u.c",
    "not_exists_self": "SELECT r.a, COUNT(*) AS c, MAX(r.x) AS mx FROM r "
                       "WHERE NOT EXISTS (SELECT 1 FROM r AS r2 WHERE r2.a = r.a AND r2.x > r.x) GROUP BY r.a",
    "not_in": "SELECT r.a, COUNT(*) AS n, COUNT(r.x) AS nx FROM r WHERE r.x NOT IN (SELECT s.g FROM s WHERE s.a = 3) GROUP BY r.a",
}
# NOT IN's NULL rule, forced by the stream: a NULL in the subquery empties the view; with no row left
# in the subquery, r's rows with a NULL x come in.
NOT_IN_STEPS = ("INSERT INTO {t} VALUES (3, NULL)", "DELETE FROM {t} WHERE a = 3 AND g IS NULL", "DELETE FROM {t} WHERE a = 3")


@pytest.mark.heavy(83)
def test_semi_and_anti_joins_match_sql_under_random_streams_and_asymmetric_plans(lake, spark, monkeypatch):
    rng = random.Random(8)
    lake.create_table("r", spark.createDataFrame([(0, 1), (1, None), (2, 5), (2, 5), (3, 2), (1, 4)], "a int, x int"))
    lake.create_table("s", spark.createDataFrame([(0, 3), (1, 4), (2, 5), (3, 7)], "a int, g int"))
    lake.create_table("u", spark.createDataFrame([(x, x % 2) for x in range(10)], "x int, c int"))
    specs = bootstrap_incremental(lake, VIEWS, "first_order")
    # every table counting as large, so each term's other tables are reduced to the rows that can join
    # it (``_reduced``), by Spark (scan_rows 0: touched keys read by Spark too), then the lake's own
    # limits (nothing reduced), then by delta-rs
    paths = (Limits(snapshot_rows=0), Limits(snapshot_rows=0, scan_rows=0), lake.limits)

    def turn(i: int) -> str:
        monkeypatch.setattr(lake, "limits", paths[i % 3])
        return ("reduced by delta-rs", "reduced by Spark", "unreduced")[i % 3]
    local_reads, reduced = [], []
    read_locally, reduce = maintainer._touched_locally, maintainer._reduced
    monkeypatch.setattr(maintainer, "_touched_locally", lambda *args: local_reads.append(read_locally(*args)) or local_reads[-1])
    monkeypatch.setattr(maintainer, "_reduced", lambda *args, **kw: reduced.append(reduce(*args, **kw)) or reduced[-1])
    seen = {name: set() for name in VIEWS}
    for _ in audited_rounds(lake, rng, specs, NOT_IN_STEPS, turn):
        for name, results in seen.items():
            results.add(frozenset(map(tuple, lake.read(lake.view_path(name)).collect())))
    assert all(len(results) > 1 for results in seen.values()), f"the stream left a view unchanged: {seen}"
    assert any(read is not None for read in local_reads) and any(read is None for read in local_reads), local_reads
    assert any(reduced), "no term was reduced"
