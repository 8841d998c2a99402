"""A view that compares its rows with a one-row aggregate (TPC-H Q11's share of the total, Q22's average
balance; issue 53): the aggregate, split off as a view of its own, moves every batch, and only the rows
between its old and new value can enter or leave (``lakeivm.sql.thresholds``). Each view is audited
against its SQL after random insert/update/delete streams on every table, with an asymmetric plan
(the threshold's change applied alone), the rows between the thresholds read by delta-rs, by Spark,
and filtered inline by Spark."""
from __future__ import annotations

import random

import pytest

from lakeivm.catalog.registry import load_specs
from lakeivm.limits import Limits
from lakeivm.run.audit import audit
from lakeivm.run.engine import run_view
from lakeivm.sql import parse_query, thresholds
from lakeivm.views.first_order import maintainer
from tests.helpers import random_batch

VIEWS = {
    # Q22's shape: rows above an average, without a match in a large table (their rows read here, then u's)
    "above_average": "SELECT r.a, COUNT(*) AS n, SUM(r.x) AS sx FROM r WHERE r.x > (SELECT AVG(s.g) FROM s) "
                     "AND NOT EXISTS (SELECT 1 FROM u WHERE u.x = r.a) GROUP BY r.a",
    # Q11's: groups whose sum beats a share of the total (both views; the groups filtered inline)
    "large_groups": "SELECT s.a, SUM(s.g) AS total FROM s GROUP BY s.a HAVING SUM(s.g) > (SELECT 0.3 * SUM(s.g) FROM s)",
    # two thresholds of one relation, joined with a large table
    "within_band": "SELECT u.c, COUNT(*) AS n, MIN(r.x) AS lowest FROM r, u, (SELECT MIN(g) AS lo, MAX(g) AS hi FROM s) AS band "
                   "WHERE u.x = r.a AND r.x >= band.lo AND r.x <= band.hi - 2 GROUP BY u.c",
}


def test_thresholds_are_found_only_where_every_column_of_the_relation_is_one():
    schemas = {"r": {"a": "int", "x": "int"}, "t": {"m": "double", "k": "int"}}
    query = parse_query("SELECT r.a, COUNT(*) AS n FROM r, t WHERE r.x + 1 > t.m AND t.m >= r.a GROUP BY r.a", schemas)
    assert thresholds(query, "t") == ("r", [("r.x + 1", "m"), ("r.a", "m")])
    assert thresholds(query, "r") is None  # r's columns are compared with t's, but also output
    for sql in ("SELECT r.a, t.m, COUNT(*) AS n FROM r, t WHERE r.x > t.m GROUP BY r.a, t.m",  # output too
                "SELECT r.a, COUNT(*) AS n FROM r, t WHERE r.x > t.m OR r.a < 0 GROUP BY r.a",  # not an AND term
                "SELECT r.a, COUNT(*) AS n FROM r, t WHERE r.x = t.k GROUP BY r.a",  # an equality: a join key
                "SELECT r.a, COUNT(*) AS n FROM r, t, r AS w WHERE r.x > t.m AND w.x < t.m AND w.a = r.a GROUP BY r.a",  # two relations
                "SELECT r.a, COUNT(*) AS n FROM r, t WHERE r.x > t.m + t.k GROUP BY r.a"):  # not a column of t alone
        assert thresholds(parse_query(sql, schemas), "t") is None, sql


@pytest.mark.heavy(110)
def test_views_over_moving_thresholds_match_sql_under_random_streams(lake, spark, tmp_path, monkeypatch):
    rng = random.Random(53)
    lake.create_table("r", spark.createDataFrame([(0, 1), (1, None), (2, 5), (2, 5), (3, 2), (1, 4), (0, 7)], "a int, x int"))
    lake.create_table("s", spark.createDataFrame([(0, 3), (1, 4), (2, 5), (3, 7), (3, 1)], "a int, g int"))
    lake.create_table("u", spark.createDataFrame([(x, x % 2) for x in range(1, 10)], "x int, c int"))
    for name, sql in VIEWS.items():
        (tmp_path / f"{name}.yaml").write_text(f"name: {name}\ndeadline: 60s\nrefresh_policy: incremental\nsql: |\n  {sql}\n")
    specs = load_specs(tmp_path)
    assert not specs.broken, [b.summary for b in specs.broken]
    mains = [specs[name] for name in VIEWS]
    for spec in mains:
        assert run_view(lake, spec).kind == "first_order", spec.name
    crossed = []  # (path, {R: (view, brought here)})
    cross = maintainer._crossed
    monkeypatch.setattr(maintainer, "_crossed", lambda *args: crossed.append((path, cross(*args))) or crossed[-1][1])
    # every table large (the rows between thresholds brought here, by delta-rs), then read by Spark, then the lake's own
    paths = (Limits(snapshot_rows=0), Limits(snapshot_rows=0, scan_rows=0), lake.limits)
    for i in range(6):
        path = i % 3
        for table, key, value in (("r", "a", "x"), ("s", "a", "g"), ("u", "x", "c")):
            random_batch(lake, rng, table, key, value)
        monkeypatch.setattr(lake, "limits", paths[path])
        for spec in mains:
            thresholds_only = tuple(spec.upstreams) if i == 1 else None  # r, u (and s under the groups) behind
            run_view(lake, spec, tables=thresholds_only)
        for spec in [*mains, *(u for m in mains for u in m.upstreams.values())]:
            report = audit(lake, spec)
            assert report.ok, f"round {i}, {spec.name}: {report}; missing {report.missing[:5]}, unexpected {report.unexpected[:5]}"
    taken = {(path, here) for path, c in crossed for _, here in c.values()}
    assert {(0, True), (1, True), (2, False)} <= taken, crossed  # by delta-rs, by Spark, a Spark filter in the term
