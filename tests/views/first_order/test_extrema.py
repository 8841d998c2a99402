"""MIN/MAX and COUNT(DISTINCT) under inserts, updates and deletes: the per-group multisets keep them exact.

Deleting a group's current minimum must expose the next smallest value; a group whose values are
all NULL or gone has NULL; the view equals its SQL at the watermarks after every run, including
asymmetric runs and a crash between the multiset flush and the result MERGE.
"""
from __future__ import annotations

import random

import pytest
from deltalake import DeltaTable

from lakeivm.run.audit import audit
from lakeivm.run.engine import InjectedFailure, run_view
from lakeivm.limits import Limits
from lakeivm.catalog.registry import spec_from_dict
from tests.helpers import alternate_paths, random_batch, sql

SPEC = spec_from_dict({
    "name": "cheapest",
    "sql": "SELECT g, MIN(x) AS lo, MAX(x * 2) AS hi, COUNT(*) AS c FROM r JOIN s ON r.a = s.a GROUP BY g",
    "deadline": 60,
    "kind": "first_order",
})
GLOBAL = spec_from_dict({"name": "lowest", "sql": "SELECT MIN(x) AS lo FROM r", "deadline": 60, "kind": "first_order"})
DISTINCT = spec_from_dict({"name": "distinct_x", "sql": "SELECT a, COUNT(DISTINCT x % 3) AS dx FROM r GROUP BY a", "deadline": 60,
                           "refresh_policy": "incremental"})  # first_order: F-IVM keeps no multisets


@pytest.mark.heavy(100)
def test_min_max_match_sql_under_random_streams_and_asymmetric_runs(lake, spark, monkeypatch):
    """The runs take turns (``alternate_paths``): on the local path the lake is tiny, so a run's state
    deltas are split and merged in this process (DuckDB) and written by delta-rs; on the Spark path
    nothing counts as small, so they are summed by Spark and MERGEd, as for a large view; on the
    third, nothing is small but everything is within ``local_merge_rows``: the changed groups' rows
    are read by key and MERGEd by delta-rs, multisets too; on the fourth, the change is summed by
    Spark too, and the multisets' deltas are collected and MERGEd by delta-rs."""
    turn = alternate_paths(lake, monkeypatch, Limits(rewrite_rows=0, local_merge_rows=0), Limits(rewrite_rows=0),
                           Limits(rewrite_rows=0, small_delta_rows=0))
    turn(2)  # built with nothing small but within local_merge_rows: its tables get no deletion vectors
    rng = random.Random(11)
    lake.create_table("r", spark.createDataFrame([(0, 5), (0, 1), (1, None), (2, 7), (3, 2)], "a int, x int"))
    lake.create_table("s", spark.createDataFrame([(0, 0), (1, 1), (2, 0), (3, 1)], "a int, g int"))
    run_view(lake, SPEC)
    run_view(lake, GLOBAL)
    assert run_view(lake, DISTINCT).kind == "first_order"
    sql(lake, "DELETE FROM {t} WHERE x = 1", "r")  # the minimum of group 0 goes: 5 must come back
    run_view(lake, SPEC)
    assert {r["g"]: r["lo"] for r in lake.read(lake.view_path("cheapest")).collect()}[0] == 5
    for step in range(4):
        random_batch(lake, rng, "r", "a", "x")
        random_batch(lake, rng, "s", "a", "g", keys=3)
        path = turn(step)
        if path == "more 2":  # values new to their groups: the multiset changes
            sql(lake, "INSERT INTO {t} VALUES (1, 19), (2, 13)", "r")
        before = DeltaTable(lake.view_path("cheapest", "aux/extremum_0")).version()
        run_view(lake, SPEC, tables=("r",) if step % 2 else None)
        assert audit(lake, SPEC).ok, str(audit(lake, SPEC))
        if path == "more 1":  # the view and its multisets MERGEd by delta-rs, none rewritten whole
            writers = {part: DeltaTable(lake.view_path("cheapest", part)).history(1)[0] for part in ("result", "aux/extremum_0")}
            assert all(w["operation"] == "MERGE" and w.get("clientVersion", "").startswith("delta-rs") for w in writers.values()), writers
        if path == "more 2":  # the multiset's Spark delta collected and MERGEd by delta-rs
            writer = DeltaTable(lake.view_path("cheapest", "aux/extremum_0")).history(1)[0]
            assert writer["version"] > before and writer["operation"] == "MERGE", writer
            assert writer.get("clientVersion", "").startswith("delta-rs"), writer
    for view in (GLOBAL, DISTINCT):  # COUNT(DISTINCT): the number of live values in each group's multiset
        run_view(lake, view)
        assert audit(lake, view).ok
    turn(1)
    sql(lake, "UPDATE {t} SET x = NULL WHERE a = 0", "r")
    run_view(lake, DISTINCT)  # only NULLs left in group 0: COUNT(DISTINCT) 0
    assert {r["a"]: r["dx"] for r in lake.read(lake.view_path("distinct_x")).collect()}.get(0, 0) == 0 and audit(lake, DISTINCT).ok
    sql(lake, "DELETE FROM {t}", "r")
    run_view(lake, GLOBAL)
    assert lake.read(lake.view_path("lowest")).first()["lo"] is None and audit(lake, GLOBAL).ok


@pytest.mark.heavy(100)
def test_a_crash_after_the_multiset_flush_reruns_to_the_same_view(lake, spark):
    lake.create_table("r", spark.createDataFrame([(0, 5), (0, 1), (1, 3)], "a int, x int"))
    lake.create_table("s", spark.createDataFrame([(0, 0), (1, 1)], "a int, g int"))
    run_view(lake, SPEC)
    sql(lake, "DELETE FROM {t} WHERE x = 1", "r")
    with pytest.raises(InjectedFailure):
        run_view(lake, SPEC, fail_at="flush:extremum_0")
    run_view(lake, SPEC)
    assert audit(lake, SPEC).ok
    assert sorted((r["g"], r["lo"], r["hi"]) for r in lake.read(lake.view_path("cheapest")).collect()) == [(0, 5, 10), (1, 3, 6)]
