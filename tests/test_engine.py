"""The engine against the view's SQL: random streams, asymmetric plans, crashes, leases, policies.

After every run the maintained view must equal its SQL evaluated by Spark on the snapshots at the
run's watermarks -- mixed versions when a run applied only some tables.
"""
from __future__ import annotations

import random
from pathlib import Path

import pytest

from lakeivm.store import commit
from lakeivm.run.audit import audit
from lakeivm.run.engine import InjectedFailure, run_view
from lakeivm.run.reading import view_snapshot
from lakeivm.store.lake import Lake
from lakeivm.errors import ChangeRangeError, LeaseHeld, StateError
from lakeivm.catalog.registry import spec_from_dict
from tests.helpers import random_batch, sql

JOIN_VIEW = spec_from_dict({"refresh_policy": "incremental",
    "name": "by_g",
    "sql": "SELECT g, SUM(x) AS sx, COUNT(*) AS c, AVG(x) AS ax, COUNT(x) AS nx FROM r JOIN s ON r.a = s.a GROUP BY g",
    "deadline": "1m",
})


def make_tables(lake, spark):
    lake.create_table("r", spark.createDataFrame([(0, 1), (1, None), (2, 5), (2, 5)], "a int, x int"))
    lake.create_table("s", spark.createDataFrame([(0, 0), (1, 1), (2, 0), (3, None)], "a int, g int"))


def assert_matches_sql(lake, spec):
    report = audit(lake, spec)
    assert report.ok, str(report) + f" missing={report.missing} unexpected={report.unexpected}"
    return report


@pytest.mark.heavy(120)
@pytest.mark.parametrize("seed", [327, pytest.param(1, marks=pytest.mark.slow), pytest.param(2, marks=pytest.mark.slow)])
def test_random_streams_and_asymmetric_plans_match_sql(lake, spark, seed):
    """Per seed, one random stream on r and s whose ticks apply r only, s only, both, and what the
    planner picks (None), in a seeded order; then an on-demand refresh. (This was two derandomized
    Hypothesis examples of three ticks, and the first was always [r, r, r]: never both tables, never the planner.)"""
    rng = random.Random(seed)
    plans = rng.sample([("r",), ("s",), ("r", "s"), None], 4)
    make_tables(lake, spark)
    run_view(lake, JOIN_VIEW)
    for tables in plans:
        for _ in range(2):
            table = rng.choice(["r", "s"])
            random_batch(lake, rng, table, "a", "x" if table == "r" else "g")
        row = run_view(lake, JOIN_VIEW, mode="tick", tables=tables)
        if row is not None:
            assert set(row.applied) <= set(tables or ("r", "s"))
            assert row.consistent == all(row.watermarks[t] == row.pins[t] for t in ("r", "s"))
        assert_matches_sql(lake, JOIN_VIEW)
    refreshed = run_view(lake, JOIN_VIEW, mode="refresh")  # None when the last tick left nothing pending
    final = commit.last_committed(lake, "by_g")
    assert final.consistent and (refreshed is None or refreshed.deadline_met is not None)
    assert_matches_sql(lake, JOIN_VIEW)


def test_self_join_and_scalar_aggregate(lake, spark):
    lake.create_table("e", spark.createDataFrame([(1, 2), (2, 3), (3, 1), (2, 4)], "src int, dst int"))
    spec = spec_from_dict({"refresh_policy": "incremental", "name": "paths", "deadline": 60,
                           "sql": "SELECT COUNT(*) AS paths, SUM(e2.dst) AS s FROM e AS e1 JOIN e AS e2 ON e1.dst = e2.src"})
    run_view(lake, spec)
    sql(lake, "INSERT INTO {t} VALUES (4, 2), (3, 2)", "e")
    sql(lake, "DELETE FROM {t} WHERE src = 1", "e")
    run_view(lake, spec)
    assert_matches_sql(lake, spec)
    sql(lake, "DELETE FROM {t}", "e")
    run_view(lake, spec)
    assert [tuple(r) for r in view_snapshot(lake, spec).collect()] == [(0, None)]  # SQL: COUNT 0, SUM NULL
    assert_matches_sql(lake, spec)


@pytest.mark.parametrize("point", [pytest.param("apply:r", marks=pytest.mark.slow), pytest.param("apply:s", marks=pytest.mark.slow),
                                   "flush", "before_log"])  # the apply points write no state yet: slow only (CI budget)
@pytest.mark.heavy(125)
def test_crash_at_any_write_then_rerun_equals_crash_free_run(lake, spark, point):
    make_tables(lake, spark)
    run_view(lake, JOIN_VIEW)
    sql(lake, "INSERT INTO {t} VALUES (0, 7), (3, 1)", "r")
    sql(lake, "UPDATE {t} SET g = 1 WHERE a = 0", "s")
    with pytest.raises(InjectedFailure):
        run_view(lake, JOIN_VIEW, fail_at=point)
    assert len(commit.log_rows(lake, "by_g")) == 1  # the crashed run committed nothing
    crashed = commit.log_rows(lake, "by_g", status="failed")  # and released its claim, saying why
    assert [r.seq for r in crashed] == [2] and "injected failure" in crashed[0].message
    row = run_view(lake, JOIN_VIEW)
    assert row.applied == ("r", "s") and row.seq == 3 and row.consistent
    assert_matches_sql(lake, JOIN_VIEW)
    assert len(commit.log_rows(lake, "by_g")) == 2


def test_a_read_broken_by_a_late_write_is_reported_as_the_late_write(lake, spark, monkeypatch):
    """A late write can break the run before its commit check: e.g. a killed first run's Spark
    Connect write committing into the state folder that the rerun's recovery had just removed,
    naming data files that are gone. The run's failure then names the late write (refresh again),
    not the missing file; a failure with no foreign commit is left as it is."""
    from lakeivm.store.lake import WRITER_TAG

    make_tables(lake, spark)
    run_view(lake, JOIN_VIEW)
    sql(lake, "INSERT INTO {t} VALUES (0, 7), (3, 1)", "r")
    result, check = lake.view_path("by_g"), commit.Lease.check
    broken = RuntimeError("[FAILED_READ_FILE.NO_HINT] Encountered error while reading file file:/lake/views/by_g/part-0.parquet")

    def failing_read(self, stray: bool):
        if stray:
            own = spark.conf.get(WRITER_TAG)
            spark.conf.set(WRITER_TAG, "lakeivm:by_g:a-killed-run")
            spark.sql(f"INSERT INTO delta.`{result}` SELECT * FROM delta.`{result}`")
            spark.conf.set(WRITER_TAG, own)
        raise broken

    monkeypatch.setattr(commit.Lease, "check", lambda self: failing_read(self, stray=False))
    with pytest.raises(RuntimeError, match="FAILED_READ_FILE"):
        run_view(lake, JOIN_VIEW)
    monkeypatch.setattr(commit.Lease, "check", lambda self: failing_read(self, stray=True))
    with pytest.raises(StateError, match="written by lakeivm:by_g:a-killed-run .* the late write of a killed or paused run") as raised:
        run_view(lake, JOIN_VIEW)
    assert raised.value.__cause__ is broken
    monkeypatch.setattr(commit.Lease, "check", check)
    assert run_view(lake, JOIN_VIEW).applied == ("r",)
    assert_matches_sql(lake, JOIN_VIEW)


def test_crash_during_bootstrap_then_rerun(lake, spark):
    make_tables(lake, spark)
    with pytest.raises(InjectedFailure):
        run_view(lake, JOIN_VIEW, fail_at="before_log")
    row = run_view(lake, JOIN_VIEW)
    assert row.mode == "bootstrap" and row.seq == 2
    assert_matches_sql(lake, JOIN_VIEW)


def test_a_run_with_nothing_to_apply_makes_no_spark_session(lake, spark):
    make_tables(lake, spark)
    run_view(lake, JOIN_VIEW)
    made = []
    lazy = Lake(lambda: made.append("session") or spark, lake.root)  # as open_lake makes it without a session
    assert run_view(lazy, JOIN_VIEW) is None and made == []
    sql(lake, "INSERT INTO {t} VALUES (0, 9)", "r")
    assert run_view(lazy, JOIN_VIEW).applied == ("r",) and made == ["session"]
    assert_matches_sql(lake, JOIN_VIEW)


def test_second_concurrent_run_is_refused(lake, spark):
    make_tables(lake, spark)
    with commit.lease(lake, "by_g"):
        with pytest.raises(LeaseHeld, match="is being maintained by another run"):
            run_view(lake, JOIN_VIEW)
    assert run_view(lake, JOIN_VIEW).mode == "bootstrap"  # released afterwards
    sql(lake, "INSERT INTO {t} VALUES (0, 9)", "r")
    with commit.lease(lake, "by_g"):  # a refresh with changes pending waits for the holder; a no-op does not
        with pytest.raises(LeaseHeld):
            run_view(lake, JOIN_VIEW)


def test_unreadable_changes_rebuild_or_fail_by_policy(lake, spark):
    make_tables(lake, spark)
    run_view(lake, JOIN_VIEW)
    sql(lake, "ALTER TABLE {t} SET TBLPROPERTIES (delta.enableChangeDataFeed = false)", "r")
    sql(lake, "INSERT INTO {t} VALUES (0, 100)", "r")
    failing = spec_from_dict({**_raw(JOIN_VIEW), "on_unreadable_changes": "fail"})
    with pytest.raises(ChangeRangeError, match="change data feed was turned off"):
        run_view(lake, failing)
    failed = commit.log_rows(lake, "by_g", status="failed")
    assert len(failed) == 1 and "turned off" in failed[0].message
    sql(lake, "ALTER TABLE {t} SET TBLPROPERTIES (delta.enableChangeDataFeed = true)", "r")
    row = run_view(lake, JOIN_VIEW)
    assert row.mode == "rebuild" and "unreadable changes" in row.plan
    assert_matches_sql(lake, JOIN_VIEW)


def test_reader_sees_last_consistent_snapshot(lake, spark):
    make_tables(lake, spark)
    run_view(lake, JOIN_VIEW)
    before = sorted(map(tuple, view_snapshot(lake, JOIN_VIEW).collect()))
    sql(lake, "INSERT INTO {t} VALUES (0, 50)", "r")
    sql(lake, "INSERT INTO {t} VALUES (0, 1)", "s")
    run_view(lake, JOIN_VIEW, tables=["r"])  # asymmetric: s stays pending
    assert sorted(map(tuple, view_snapshot(lake, JOIN_VIEW).collect())) == before
    assert sorted(map(tuple, view_snapshot(lake, JOIN_VIEW, latest=True).collect())) != before


def _raw(spec):
    return {"name": spec.name, "sql": spec.sql, "deadline": spec.deadline_s}


def test_cached_log_equals_a_fresh_read(lake, spark):
    """Runs of two views interleaved (each a claim and a committed row): each view's cached log rows equal what a fresh Lake reads."""
    make_tables(lake, spark)
    other = spec_from_dict({"refresh_policy": "incremental", "name": "by_a", "sql": "SELECT a, COUNT(*) AS c FROM r GROUP BY a", "deadline": "1m"})
    rng = random.Random(3)
    for _ in range(3):
        random_batch(lake, rng, "r", "a", "x")
        run_view(lake, JOIN_VIEW)
        run_view(lake, other)
    commit.append_log(lake, commit.LogRow(view="by_g", seq=99, status="failed", mode="tick", kind="x", pins={},
                                          watermarks={}, state_versions={}, consistent=False))
    read = lake.read
    lake.read = lambda path, version=None: pytest.fail(f"re-read {path}: the cached log rows should have been current")
    cached = {view: commit.log_rows(lake, view, status=None) for view in ("by_g", "by_a")}
    lake.read = read
    fresh = Lake(spark, lake.root)
    for view, rows in cached.items():
        assert len(rows) == {"by_g": 7, "by_a": 6}[view] and rows == commit.log_rows(fresh, view, status=None)
    assert cached["by_g"][-1].status == "failed"


def test_an_edited_definition_rebuilds_and_a_noop_writes_nothing(lake, spark):
    make_tables(lake, spark)
    run_view(lake, JOIN_VIEW)
    log_head = lake.head_version(lake.log_path)
    assert run_view(lake, JOIN_VIEW) is None and run_view(lake, JOIN_VIEW, mode="tick") is None
    assert lake.head_version(lake.log_path) == log_head  # nothing pending: no log row, no state write
    edited = spec_from_dict({"refresh_policy": "incremental", "name": "by_g", "deadline": "1m",  # same tables, another WHERE
                             "sql": JOIN_VIEW.sql.replace("GROUP BY", "WHERE x > 2 GROUP BY")})
    row = run_view(lake, edited)
    assert row.mode == "rebuild" and "definition changed" in row.plan
    assert_matches_sql(lake, edited)
    same = spec_from_dict({"refresh_policy": "incremental", "name": "by_g", "deadline": "2m", "tick": "5m",  # scheduling only: state kept
                           "sql": edited.sql.lower().replace("  ", " ")})
    assert run_view(lake, same) is None


def test_a_lost_log_commit_is_rolled_forward_never_rolled_back(lake, spark):
    """The newest commit file of _system/log deleted (or damaged, then moved aside by `lakeivm
    repair`): the committed run it held is read back from its data file, not undone."""
    from lakeivm.store import system_tables

    make_tables(lake, spark)
    run_view(lake, JOIN_VIEW)
    for damage in ("delete", "truncate"):
        sql(lake, "INSERT INTO {t} VALUES (0, 11), (3, 5)", "r")
        committed = run_view(lake, JOIN_VIEW)
        newest = Path(lake.log_path) / "_delta_log" / f"{lake.head_version(lake.log_path):020d}.json"
        if damage == "delete":
            newest.unlink()
        else:
            newest.write_text(newest.read_text()[:40])
            with pytest.raises(StateError, match="lakeivm repair"):
                run_view(Lake(spark, lake.root), JOIN_VIEW)
            assert any("moved it aside" in line for line in system_tables.repair(lake.log_path)[0])
        fresh = Lake(spark, lake.root)
        assert commit.last_committed(fresh, "by_g").run_id != committed.run_id  # the log lost the row
        sql(lake, "INSERT INTO {t} VALUES (1, 2)", "s")
        row = run_view(fresh, JOIN_VIEW, progress=print)
        assert row.watermarks["r"] == committed.watermarks["r"] and row.applied == ("s",)  # r's batch was not re-applied
        assert [r.run_id for r in commit.log_rows(fresh, "by_g")].count(committed.run_id) == 1
        assert_matches_sql(fresh, JOIN_VIEW)


def test_a_run_reads_no_log_file_a_compaction_removed(lake, spark, monkeypatch):
    """The log's files a compaction left unreferenced were added by commits: none holds a lost
    commit's rows, so a run's recovery reads none of them (it read every one, 0.4 s a run)."""
    import pyarrow.parquet as pq

    from lakeivm.store import system_tables

    make_tables(lake, spark)
    run_view(lake, JOIN_VIEW)
    other = spec_from_dict({"name": "sums", "sql": "SELECT a, SUM(x) AS sx FROM r GROUP BY a", "deadline": 60})
    for rows in ("(0, 11)", "(3, 5)"):  # another view's runs append to the log after JOIN_VIEW's last
        sql(lake, f"INSERT INTO {{t}} VALUES {rows}", "r")
        run_view(lake, other)
    system_tables.compact(lake.log_path)
    sql(lake, "INSERT INTO {t} VALUES (1, 2)", "s")
    with pytest.raises(InjectedFailure):  # its state written, its row not: the next run's recovery looks for a lost commit
        run_view(lake, JOIN_VIEW, fail_at="before_log")
    read, read_table = [], pq.read_table
    monkeypatch.setattr(pq, "read_table", lambda *a, **k: read.append(a[0]) or read_table(*a, **k))
    run_view(lake, JOIN_VIEW)
    assert not [f for f in read if "_system/log" in str(f)], read
    assert_matches_sql(lake, JOIN_VIEW)


def test_a_late_write_of_another_run_is_never_committed(lake, spark, monkeypatch):
    """A state write that is not the run's own (a killed client's Spark Connect operation landing
    late, a paused run's last write) lands mid-run: the run refuses to commit; the rerun undoes it."""
    from lakeivm.store.lake import WRITER_TAG

    make_tables(lake, spark)
    run_view(lake, JOIN_VIEW)
    sql(lake, "INSERT INTO {t} VALUES (0, 7), (3, 1)", "r")
    result = lake.view_path("by_g")
    check = commit.Lease.check

    def stray_write(self):
        own = spark.conf.get(WRITER_TAG)
        spark.conf.set(WRITER_TAG, "lakeivm:by_g:an-earlier-run")
        spark.sql(f"INSERT INTO delta.`{result}` SELECT * FROM delta.`{result}`")
        spark.conf.set(WRITER_TAG, own)
        check(self)

    monkeypatch.setattr(commit.Lease, "check", stray_write)
    with pytest.raises(StateError, match="was written by lakeivm:by_g:an-earlier-run .* This run commits nothing"):
        run_view(lake, JOIN_VIEW)
    monkeypatch.setattr(commit.Lease, "check", check)
    assert commit.log_rows(lake, "by_g", status=None)[-1].status == "failed"
    assert run_view(lake, JOIN_VIEW).applied == ("r",)
    assert_matches_sql(lake, JOIN_VIEW)


def test_restore_rolls_back_by_delta_rs_or_by_spark(lake, spark):
    """``Lake.restore`` (recovery's rollback): a table delta-rs writes is restored by delta-rs, one
    with deletion vectors by Spark's RESTORE; either way the commit carries the run's writer tag and
    Spark then reads the rows of the version restored to."""
    from lakeivm.store import storage
    from lakeivm.store.lake import WRITER_TAG

    engines = {}
    for name, vectors in (("plain", "false"), ("vectors", "true")):
        path = lake.create_table(name, spark.createDataFrame([(1, 10), (2, 20)], "a int, x int"))
        sql(lake, f"ALTER TABLE {{t}} SET TBLPROPERTIES ('delta.enableDeletionVectors' = '{vectors}')", name)
        logged = lake.head_version(path)
        sql(lake, "INSERT INTO {t} VALUES (3, 30)", name)
        sql(lake, "DELETE FROM {t} WHERE a = 1", name)
        spark.conf.set(WRITER_TAG, "run-7")
        try:
            lake.restore(path, logged)
        finally:
            spark.conf.unset(WRITER_TAG)
        head = lake.head_version(path)
        assert head == logged + 3
        info = next(a["commitInfo"] for a in storage.commit_actions(path, head) if "commitInfo" in a)
        assert info["operation"] == "RESTORE" and info["userMetadata"] == "run-7", info
        engines[name] = "spark" if "Apache-Spark" in info.get("engineInfo", "") else "delta-rs"
        assert sorted(map(tuple, lake.read(path).collect())) == [(1, 10), (2, 20)], name
    assert engines == {"plain": "delta-rs", "vectors": "spark"}, engines
