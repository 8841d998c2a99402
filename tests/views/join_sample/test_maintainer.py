"""The join-sample maintainer on Spark against the view's SQL at the run's watermarks.

After every run: each sampled row is a row of the SQL's result (as a bag), there are exactly
min(k, |join|) of them (``audit``), and each row's source row ids name rows that exist at the
watermarks and carry its values. Random insert streams with asymmetric plans, deletes and updates
(exact re-bootstrap), self-joins, and crashes at every write followed by a rerun (same sample as
no crash). Uniformity over seeds is tested on the same pure layer in test_view.py (a Spark run per
seed would not fit the suite's time budget).
"""
from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from lakeivm.store import commit
from lakeivm.run.audit import audit
from lakeivm.run.engine import InjectedFailure, run_view
from lakeivm.catalog.registry import classify, spec_from_dict
from lakeivm.views.join_sample.plan import plan_sample, row_id
from tests.helpers import sql

LINE = ("SELECT r.a, s.x, t.d FROM r JOIN s ON r.b = s.b JOIN t ON s.c = t.c WHERE s.x >= 2")
TABLES = {"r": ("a", "b"), "s": ("b", "c", "x"), "t": ("c", "d")}


def random_rows(rng: random.Random, columns: tuple[str, ...], n: int) -> list[tuple]:
    """Small values; the join column c is sometimes NULL (joins nothing in SQL)."""
    return [tuple(None if c == "c" and rng.random() < 0.1 else rng.randrange(4) for c in columns) for _ in range(n)]


def insert(lake, table: str, rows: list[tuple]) -> None:
    values = ", ".join("(" + ", ".join("NULL" if v is None else str(v) for v in r) + ")" for r in rows)
    sql(lake, f"INSERT INTO {{t}} VALUES {values}", table)


def make_tables(lake, spark, rng: random.Random, n: int = 6) -> None:
    for table, columns in TABLES.items():
        lake.create_table(table, spark.createDataFrame(random_rows(rng, columns, n), ", ".join(f"{c} int" for c in columns)))


def sample(lake, view: str) -> list[tuple]:
    return [tuple(r) for r in lake.read(lake.view_path(view, "sample")).orderBy("_lakeivm_slot").collect()]


def event(lake, view: str) -> str:
    return lake.read(lake.view_path(view, "aux/sampler")).first()["event"]


def assert_valid(lake, spec) -> None:
    """audit (rows ⊆ SQL result as bags, min(k, |join|) rows) and row ids that exist and carry the values."""
    report = audit(lake, spec)
    assert report.ok, str(report)
    watermarks = commit.last_committed(lake, spec.name).watermarks
    plan = plan_sample(classify(spec, lake.table_schemas())[1], spec.options)
    ids = {}
    for table, columns in plan.columns.items():
        copies: Counter = Counter()
        for r in lake.read(lake.table_path(table), watermarks[table]).select(*columns).collect():
            ids[row_id(tuple(r), copies[tuple(r)])] = tuple(r)
            copies[tuple(r)] += 1
    tables = {s.alias: s.table for s in plan.slots}
    for rec in lake.read(lake.view_path(spec.name, "sample")).collect():
        for o in plan.outputs:
            rid = rec[f"{o.alias}_row_id"]
            assert rid in ids, f"{o.alias}_row_id {rid} is not a row of {tables[o.alias]} at the watermarks"
            assert ids[rid][o.position] == rec[o.name]


@pytest.mark.heavy(139)
def test_random_inserts_asymmetric_plans_then_deletes_rebootstrap(lake, spark):
    rng = random.Random(11)
    make_tables(lake, spark, rng)
    spec = spec_from_dict({"name": "line", "sql": LINE, "deadline": 60, "sample_size": 5, "seed": 4})
    merged = spec_from_dict({"name": "line_fk", "sql": LINE, "deadline": 60, "sample_size": 5, "seed": 4,
                             "foreign_keys": ["s -> t"]})  # rows of s wait for their t row, and t's join them
    for view in (spec, merged):
        assert run_view(lake, view).kind == "join_sample"
        assert_valid(lake, view)
    for tables in (("r",), ("s", "t")):
        for table, columns in TABLES.items():
            insert(lake, table, random_rows(rng, columns, rng.randint(1, 4)))
        for view in (spec, merged):
            run_view(lake, view, tables=tables)
            assert_valid(lake, view)
            assert event(lake, view.name).startswith("inserted")
    sql(lake, "DELETE FROM {t} WHERE b = 1", "r")
    sql(lake, "UPDATE {t} SET x = x + 1 WHERE c = 2", "s")
    insert(lake, "t", random_rows(rng, TABLES["t"], 3))
    said = []
    run_view(lake, spec, progress=said.append)
    assert any("re-bootstrapping the join sample exactly" in line for line in said), said  # a progress line of the run
    assert_valid(lake, spec)
    assert event(lake, spec.name).startswith("re-bootstrap") and "deleted or updated rows of r" in event(lake, spec.name)
    insert(lake, "r", [(9, 1), (9, 1)])  # a duplicate row: two copies, two row ids
    run_view(lake, spec)
    assert_valid(lake, spec)


def test_line3_and_star_self_joins_over_an_edge_table(lake, spark):
    rng = random.Random(5)
    edges = lambda n: [(rng.randrange(5), rng.randrange(5)) for _ in range(n)]  # noqa: E731
    lake.create_table("edges", spark.createDataFrame(edges(8), "src int, dst int"))
    line3 = spec_from_dict({"name": "line3", "deadline": 60, "sample_size": 6, "sql":
                            "SELECT g1.src AS a, g2.src AS b, g3.src AS c, g3.dst AS d FROM edges g1 "
                            "JOIN edges g2 ON g1.dst = g2.src JOIN edges g3 ON g2.dst = g3.src"})
    star = spec_from_dict({"name": "star", "deadline": 60, "sample_size": 200, "sql":
                           "SELECT g1.src AS hub, g1.dst AS x, g2.dst AS y, g3.dst AS z FROM edges g1 "
                           "JOIN edges g2 ON g1.src = g2.src JOIN edges g3 ON g1.src = g3.src"})
    for spec in (line3, star):
        run_view(lake, spec)
        assert_valid(lake, spec)
    insert(lake, "edges", edges(6))
    for spec in (line3, star):
        run_view(lake, spec)
        assert_valid(lake, spec)
    star_join = spark.sql(f"SELECT COUNT(*) FROM delta.`{lake.table_path('edges')}` a JOIN delta.`{lake.table_path('edges')}` b "
                          f"ON a.src = b.src JOIN delta.`{lake.table_path('edges')}` c ON a.src = c.src").first()[0]
    assert len(sample(lake, "star")) == min(200, star_join) > 6


@pytest.mark.heavy(116)
def test_crash_at_any_write_then_rerun_draws_the_crash_free_sample(lake, spark):
    """A reference view and a crashing twin (same SQL and seed) over the same tables stay identical.

    Crashes: after the bootstrap's writes, after applying s, between the two writes of a
    re-bootstrap (a delete), and after both writes before the log row (the commit point)."""
    rng = random.Random(2)
    make_tables(lake, spark, rng)
    raw = {"sql": LINE, "deadline": 60, "sample_size": 4, "seed": 9}
    ref, twin = spec_from_dict({**raw, "name": "ref"}), spec_from_dict({**raw, "name": "twin"})
    with pytest.raises(InjectedFailure):
        run_view(lake, twin, fail_at="flush:sampler")  # during the bootstrap
    for spec in (ref, twin):
        run_view(lake, spec)
    batches = [("apply:s", False), ("flush:sample", True), ("before_log", False)]
    for point, with_delete in batches:
        for table, columns in TABLES.items():
            insert(lake, table, random_rows(rng, columns, 3))
        if with_delete:
            sql(lake, "DELETE FROM {t} WHERE a = 0", "r")
        run_view(lake, ref)
        with pytest.raises(InjectedFailure):
            run_view(lake, twin, fail_at=point)
        row = run_view(lake, twin)
        assert row.applied == ("r", "s", "t")
        assert sample(lake, "twin") == sample(lake, "ref"), point
        assert json.loads(lake.read(lake.view_path("twin", "aux/sampler")).first()["state"]) == \
            json.loads(lake.read(lake.view_path("ref", "aux/sampler")).first()["state"])
    assert event(lake, "twin") == event(lake, "ref")
    assert_valid(lake, twin)


def test_audit_names_a_row_that_is_no_join_result_and_a_missing_row(lake, spark):
    """The audit's bag comparison (``audit_sample`` on versions of the sample table): a sample row
    changed into a row the join does not produce is unexpected; a join row sampled more often than
    the join holds it is unexpected too; a sample short of min(k, |join|) rows names the missing."""
    from dataclasses import replace

    from lakeivm.run.audit import recompute
    from lakeivm.sources.upstream import reader
    from lakeivm.views.base import bag

    make_tables(lake, spark, random.Random(3), n=8)
    spec = spec_from_dict({"name": "line", "sql": LINE, "deadline": 60, "sample_size": 3, "seed": 1})
    run_view(lake, spec)
    row = commit.last_committed(lake, "line")
    ctx, maintainer = reader(lake, spec, row)
    ctx = replace(ctx, spark_reads_result=True)
    path = lake.view_path("line", "sample")

    def audited(version: int):
        return maintainer.audit_sample(ctx, bag(recompute(lake, spec, row.watermarks)), version)

    rows, missing, unexpected = audited(row.state_versions["result"])
    assert rows == 3 and missing == () and unexpected == ()
    join = Counter(tuple(r) for r in recompute(lake, spec, row.watermarks).collect())
    first, second = [tuple(r) for r in lake.read(path).orderBy("_lakeivm_slot").select("a", "x", "d").collect()[:2]]
    lake.spark.sql(f"UPDATE delta.`{path}` SET d = 99 WHERE _lakeivm_slot = 0")  # no row of t has d = 99
    assert audited(lake.head_version(path)) == (3, (), ((first[0], first[1], 99),))
    a, x, d = second
    lake.spark.sql(f"UPDATE delta.`{path}` SET a = {a}, x = {x}, d = {d} WHERE _lakeivm_slot = 0")  # the second row twice
    rows, missing, unexpected = audited(lake.head_version(path))
    assert rows == 3 and (unexpected == (second,)) == (join[second] < 2), (unexpected, join)
    lake.spark.sql(f"DELETE FROM delta.`{path}` WHERE _lakeivm_slot = 0")
    rows, missing, unexpected = audited(lake.head_version(path))
    assert rows == 2 and unexpected == () and len(missing) == 1 and join[missing[0]] > 0, (missing, join)
