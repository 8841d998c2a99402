"""The first-order kind (the baseline, chosen with ``kind: first_order``) against its SQL.

The engine tests run the classifier's default (fivm for these shapes); this keeps the classical
delta rule covered: random insert/update/delete streams, asymmetric plans, a self-join and a
scalar aggregate deleted down to SQL's COUNT 0 / SUM NULL.
"""
from __future__ import annotations

import random

import pytest

from lakeivm.run.audit import audit
from lakeivm.run.engine import run_view
from lakeivm.limits import Limits
from lakeivm.run.reading import view_snapshot
from lakeivm.catalog.registry import spec_from_dict
from tests.helpers import alternate_paths, random_batch, sql

VIEW = spec_from_dict({
    "name": "by_g_fo", "kind": "first_order", "deadline": 60,
    "sql": "SELECT g, SUM(x) AS sx, COUNT(*) AS c, AVG(x) AS ax, COUNT(x) AS nx FROM r JOIN s ON r.a = s.a GROUP BY g",
})


@pytest.mark.heavy(98)
def test_random_streams_and_asymmetric_plans_match_sql(lake, spark):
    rng = random.Random(5)
    lake.create_table("r", spark.createDataFrame([(0, 1), (1, None), (2, 5), (2, 5)], "a int, x int"))
    lake.create_table("s", spark.createDataFrame([(0, 0), (1, 1), (2, 0), (3, None)], "a int, g int"))
    assert run_view(lake, VIEW).kind == "first_order"
    for tables in (("r",), ("s",), None, ("r", "s")):
        for table in ("r", "s"):
            random_batch(lake, rng, table, "a", "x" if table == "r" else "g")
        run_view(lake, VIEW, tables=tables)
        report = audit(lake, VIEW)
        assert report.ok, str(report)


def test_self_join_and_scalar_aggregate_to_empty(lake, spark):
    lake.create_table("e", spark.createDataFrame([(1, 2), (2, 3), (3, 1), (2, 4)], "src int, dst int"))
    spec = spec_from_dict({"name": "paths_fo", "deadline": 60, "kind": "first_order",
                           "sql": "SELECT COUNT(*) AS paths, SUM(e2.dst) AS s FROM e AS e1 JOIN e AS e2 ON e1.dst = e2.src"})
    run_view(lake, spec)
    sql(lake, "INSERT INTO {t} VALUES (4, 2), (3, 2)", "e")
    sql(lake, "DELETE FROM {t} WHERE src = 1", "e")
    run_view(lake, spec)
    assert audit(lake, spec).ok
    sql(lake, "DELETE FROM {t}", "e")
    run_view(lake, spec)
    assert [tuple(r) for r in view_snapshot(lake, spec).collect()] == [(0, None)]
    assert audit(lake, spec).ok


@pytest.mark.heavy(100)
def test_distinct_and_projections_with_multiplicities_match_sql(lake, spark, monkeypatch):
    """SELECT DISTINCT is a GROUP BY of its columns; a projection without aggregates keeps each distinct
    row once with its multiplicity (read back as that many rows). NULLs and duplicates included.
    The runs take turns (``alternate_paths``): a small view rewritten whole; no view counting as
    small, so each run's rows are MERGEd into the stored view adding their counts in the MERGE
    (``merge_counts``, by delta-rs, checked to be taken); and the same with no MERGE in this process
    (Spark's MERGE of the touched rows summed with the stored ones)."""
    from lakeivm.views.first_order import maintainer

    merged = []
    turn = alternate_paths(lake, monkeypatch, Limits(rewrite_rows=0, merge_rows=0), Limits(rewrite_rows=0, local_merge_rows=0))
    merge_counts = maintainer.merge_counts
    monkeypatch.setattr(maintainer, "merge_counts", lambda *a, **k: merged.append(merge_counts(*a, **k)) or merged[-1])
    rng = random.Random(9)
    lake.create_table("r", spark.createDataFrame([(0, 1), (1, None), (2, 5), (2, 5)], "a int, x int"))
    lake.create_table("s", spark.createDataFrame([(0, 0), (1, 1), (2, 0), (3, None)], "a int, g int"))
    distinct = spec_from_dict({"refresh_policy": "incremental", "name": "pairs", "deadline": 60, "sql": "SELECT DISTINCT s.g, r.x FROM r JOIN s ON r.a = s.a"})
    rows = spec_from_dict({"refresh_policy": "incremental", "name": "rows_fo", "deadline": 60,
                           "sql": "SELECT r.a, r.x + 1 AS y, s.g FROM r JOIN s ON r.a = s.a WHERE r.a < 3"})
    for spec in (distinct, rows):
        assert run_view(lake, spec).kind == "first_order"
    for step, tables in enumerate((("r",), ("s",), None)):
        for table in ("r", "s"):
            random_batch(lake, rng, table, "a", "x" if table == "r" else "g")
        path = turn(step + 1)
        for spec in (distinct, rows):
            before = len(merged)
            run_view(lake, spec, tables=tables)
            report = audit(lake, spec)
            assert report.ok, f"{spec.name} ({path}): {report}"
            assert merged[before:] == {"local": [], "spark": [False], "more 1": [True]}[path], (spec.name, path, merged)
    stored = lake.read(lake.view_path("rows_fo")).collect()  # one row per distinct tuple, with its multiplicity
    assert len({(r["a"], r["y"], r["g"]) for r in stored}) == len(stored)
    assert sum(r["_lakeivm_count"] for r in stored) == view_snapshot(lake, rows).count()


@pytest.mark.heavy(101)
def test_top_k_and_having_views_keep_every_group_and_read_the_sqls_rows(lake, spark):
    """ORDER BY ... LIMIT k over result columns and HAVING over aggregates: every group maintained (fivm
    and first_order) with whether it passes HAVING; the reader filters, sorts and takes k. Each tie
    is decided by the ORDER BY, so the k rows are the SQL's."""
    rng = random.Random(13)
    lake.create_table("r", spark.createDataFrame([(a % 4, a) for a in range(8)] + [(1, None)], "a int, x int"))
    lake.create_table("s", spark.createDataFrame([(a, a % 3) for a in range(4)] + [(3, None)], "a int, g int"))
    top = ("SELECT g, SUM(x) AS sx, COUNT(*) AS c FROM r JOIN s ON r.a = s.a GROUP BY g HAVING COUNT(*) > 1 AND sx IS NOT NULL "
           "ORDER BY sx DESC NULLS LAST, g LIMIT 2")
    views = [spec_from_dict({"refresh_policy": "incremental", "name": "top_fivm", "deadline": 60, "sql": top}),
             spec_from_dict({"refresh_policy": "incremental", "name": "top_rows", "deadline": 60,
                             "sql": "SELECT r.a, r.x, s.g FROM r JOIN s ON r.a = s.a ORDER BY r.x DESC, r.a, s.g LIMIT 3"}),
             spec_from_dict({"refresh_policy": "incremental", "name": "having_top_fo", "deadline": 60,
                             "sql": "SELECT s.g, MIN(r.x) AS lo FROM r JOIN s ON r.a = s.a GROUP BY s.g HAVING MAX(r.x) > 2 "
                                    "ORDER BY lo, g LIMIT 2"})]
    assert [run_view(lake, v).kind for v in views] == ["fivm", "first_order", "first_order"]
    for tables in (("r",), None):
        for table in ("r", "s"):
            random_batch(lake, rng, table, "a", "x" if table == "r" else "g")
        for view in views:
            run_view(lake, view, tables=tables)
            report = audit(lake, view)
            assert report.ok and report.rows <= (3 if view.name == "top_rows" else 2), f"{view.name}: {report}"
    assert lake.read(lake.view_path("top_fivm")).count() >= 2  # the stored table holds every group


@pytest.mark.heavy(60)
def test_delta_terms_over_reduced_relations_match_sql(lake, spark, monkeypatch):
    """A change joined over the rows of each other relation that can join it (``_reduced``: a
    semi-join reduction along the join order, the rows brought here): TPC-H Q5's shape, with the
    link of two dimensions (c.cn = s.sn) beside the key joins, a filter, and a self-join. The runs take
    turns: every table counting as large, so every relation is reduced, by delta-rs with a key
    filter, or by a Spark semi join (``scan_rows`` 0: no delta-rs scan); or everything on Spark, so
    none is."""
    import lakeivm.views.first_order.maintainer as maintainer

    rng = random.Random(7)
    for table, columns, rows in (("c", "ck int, cn int", [(1, 0), (2, 1), (3, 0)]), ("o", "ok int, ck int", [(1, 1), (2, 2), (3, 3), (4, None)]),
                                 ("l", "ok int, sk int", [(1, 1), (1, 2), (2, 1), (3, 3), (4, 1)]), ("s", "sk int, sn int", [(1, 0), (2, 1), (3, 0)])):
        lake.create_table(table, spark.createDataFrame(rows, columns))
    views = {"local_volume": "SELECT s.sn AS sn, COUNT(*) AS n, SUM(c.ck) AS sc FROM c, o, l, s WHERE c.ck = o.ck AND l.ok = o.ok "
                             "AND l.sk = s.sk AND c.cn = s.sn AND o.ck > 0 GROUP BY s.sn",
             "line_pairs": "SELECT l1.sk AS sk, COUNT(*) AS n FROM l AS l1 JOIN l AS l2 ON l1.ok = l2.ok JOIN s ON s.sk = l2.sk GROUP BY l1.sk"}
    specs = [spec_from_dict({"name": name, "kind": "first_order", "deadline": 60, "sql": sql}) for name, sql in views.items()]
    paths = {"delta-rs": Limits(snapshot_rows=0), "spark semi join": Limits(snapshot_rows=0, scan_rows=0),
             "unreduced": Limits.everything_on_spark()}
    calls = {"delta-rs": [], "spark semi join": []}
    for name, function in (("delta-rs", "rows_with_keys"), ("spark semi join", "reduced_sql")):
        def spy(*a, real=getattr(maintainer, function), name=name):
            made = real(*a)
            if made is not None:  # (the delta-rs read declines under scan_rows 0)
                calls[name].append(a)
            return made
        monkeypatch.setattr(maintainer, function, spy)
    for spec in specs:
        run_view(lake, spec)
    for i, tables in enumerate((("o", "l"), None, ("c", "s"), None)):
        path = list(paths)[i % 3]
        monkeypatch.setattr(lake, "limits", paths[path])
        for made in calls.values():
            made.clear()
        for table, key, value in (("c", "ck", "cn"), ("o", "ok", "ck"), ("l", "ok", "sk"), ("s", "sk", "sn")):
            random_batch(lake, rng, table, key, value)
        for spec in specs:
            run_view(lake, spec, tables=tables)
            report = audit(lake, spec)
            assert report.ok, f"{spec.name} on {path} applying {tables or 'all'}: {report}"
        assert {name for name, made in calls.items() if made} == ({path} if path in calls else set()), (path, calls)


def test_a_run_reads_a_relations_rows_of_the_same_keys_once(lake, spark, monkeypatch):
    """Two aliases of r joined to s on the same key: a change of s reduces each by the same keys.
    delta-rs decodes r once for both (``by_key.rows_with_keys`` keeps a run's reads), and a run after
    it reads again: the view equals its SQL after every batch."""
    from lakeivm.views import by_key

    lake.create_table("r", spark.createDataFrame([(k % 5, k) for k in range(20)], "k int, v int"))
    lake.create_table("s", spark.createDataFrame([(0, 1), (1, 1), (2, 2)], "k int, g int"))
    spec = spec_from_dict({"name": "pairs", "kind": "first_order", "deadline": 60,
                           "sql": "SELECT s.g, COUNT(*) AS n, SUM(b.v) AS sv FROM s JOIN r AS a ON a.k = s.k "
                                  "JOIN r AS b ON b.k = s.k GROUP BY s.g"})
    run_view(lake, spec)
    monkeypatch.setattr(lake, "limits", Limits(snapshot_rows=0))  # every relation reduced, by delta-rs
    decoded = []
    real = by_key._rows_with_keys
    monkeypatch.setattr(by_key, "_rows_with_keys", lambda ctx, table, version, *a: decoded.append((table, version)) or real(ctx, table, version, *a))
    for change in ("INSERT INTO {t} VALUES (1, 2), (3, 1), (4, NULL)", "UPDATE {t} SET g = 3 WHERE k = 1", "DELETE FROM {t} WHERE k = 0"):
        decoded.clear()
        sql(lake, change, "s")
        run_view(lake, spec)
        assert decoded and len(decoded) == len(set(decoded)), decoded  # each (table, version) once a run ...
        assert ("r", lake.head_version(lake.table_path("r"))) in decoded  # ... and r read by key
        assert audit(lake, spec).ok
