"""One writer per view for real (commit.Lease): claims in the log, fenced appends, heartbeats, takeover.

No Spark here: claims are log rows appended with delta-rs, so these run in milliseconds and race
threads and processes for real.
"""
from __future__ import annotations

import multiprocessing
import os
import socket
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone

import pytest

from lakeivm.store import commit, system_tables
from lakeivm.errors import LeaseHeld, LeaseLost
from lakeivm.store.lake import Lake
from tests.helpers import age_log_commit, claim_from_elsewhere, moto_s3


def _lake(root) -> Lake:
    lake = Lake(None, str(root))  # type: ignore[arg-type] -- the lease never touches Spark
    system_tables.ensure(lake.log_path, "log.json")
    return lake


def _race(root, views: list[str], barrier) -> list[str]:
    """For each view: all racers try to claim it at once; the winner holds it until every racer tried."""
    results = []
    for view in views:
        barrier.wait()
        try:
            with commit.lease(_lake(root), view):
                results.append("won")
                barrier.wait()
        except LeaseHeld:
            results.append("refused")
            barrier.wait()
    return results


def _tally(outcomes: list[list[str]]) -> list[list[str]]:
    return [sorted(trial) for trial in zip(*outcomes)]


def _race_threads(root, views: list[str], racers: int) -> list[list[str]]:
    """``_race`` in ``racers`` threads at once; the outcomes per view, sorted."""
    barrier, outcomes = threading.Barrier(racers), []
    threads = [threading.Thread(target=lambda: outcomes.append(_race(root, views, barrier))) for _ in range(racers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return _tally(outcomes)


def test_racing_threads_exactly_one_wins_every_time(tmp_path):
    views, racers = [f"v{i}" for i in range(20)], 6
    assert _race_threads(tmp_path, views, racers) == [["refused"] * (racers - 1) + ["won"]] * len(views)


def _process(root, views, barrier, queue):
    queue.put(_race(root, views, barrier))


def test_racing_processes_exactly_one_wins_every_time(tmp_path):
    context, views, racers = multiprocessing.get_context("spawn"), [f"v{i}" for i in range(10)], 4
    _lake(tmp_path)
    barrier, queue = context.Barrier(racers), context.Queue()
    procs = [context.Process(target=_process, args=(str(tmp_path), views, barrier, queue)) for _ in range(racers)]
    for p in procs:
        p.start()
    outcomes = [queue.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(60)
    assert _tally(outcomes) == [["refused"] * (racers - 1) + ["won"]] * len(views)


def test_a_paused_run_past_its_lease_cannot_commit(tmp_path):
    lake = _lake(tmp_path)
    paused = commit.Lease(lake, "v", "refresh", seconds=0.4)
    paused.acquire()
    paused.stop()  # its heartbeat stops, as when the process is paused (SIGSTOP, a GC pause, a lost VM)
    time.sleep(0.5)
    with commit.lease(_lake(tmp_path), "v", seconds=5) as taker:
        assert taker.seq == paused.seq + 1
        row = commit.LogRow(view="v", seq=paused.seq, status="committed", mode="refresh", kind="x", pins={},
                            watermarks={}, state_versions={}, consistent=True, run_id=paused.run_id)
        with pytest.raises(LeaseLost, match="took the view over; this run commits nothing"):
            paused.commit(row)
        taker.commit(commit.LogRow(view="v", seq=taker.seq, status="committed", mode="refresh", kind="x", pins={},
                                   watermarks={}, state_versions={}, consistent=True, run_id=taker.run_id))
    committed = commit.log_rows(_lake(tmp_path), "v")
    assert [r.run_id for r in committed] == [taker.run_id]  # the paused run left no committed row


def test_the_heartbeat_keeps_a_long_run_s_claim(tmp_path):
    with commit.lease(_lake(tmp_path), "v", seconds=0.4) as claim:
        time.sleep(1.2)  # three lease lengths: only the heartbeats keep it
        with pytest.raises(LeaseHeld, match="being maintained by another run"):
            with commit.lease(_lake(tmp_path), "v", seconds=0.4):
                pass
        claim.check()  # still ours
    beats = [r for r in commit.log_rows(_lake(tmp_path), "v", status=None) if r.status == commit.RUNNING]
    assert len(beats) >= 3  # the claim and its renewals
    with commit.lease(_lake(tmp_path), "v"):  # released at the end of the run
        pass


def test_a_claim_whose_process_died_on_this_host_is_taken_over_at_once(tmp_path):
    lake = _lake(tmp_path)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    expires = datetime.now(timezone.utc) + timedelta(hours=1)
    commit.append_log(lake, commit.LogRow(
        view="v", seq=1, status=commit.RUNNING, mode="refresh", kind="", pins={}, watermarks={}, state_versions={},
        consistent=False, holder=f"{socket.gethostname()}:{int(dead.stdout)}", lease_expires=expires))
    with commit.lease(_lake(tmp_path), "v") as claim:
        assert claim.seq == 2
    # a live claim of another host is respected until its heartbeat lapses
    commit.append_log(lake, commit.LogRow(
        view="w", seq=1, status=commit.RUNNING, mode="refresh", kind="", pins={}, watermarks={}, state_versions={},
        consistent=False, holder="elsewhere:1", lease_expires=expires))
    with pytest.raises(LeaseHeld, match="elsewhere:1"):
        with commit.lease(_lake(tmp_path), "w"):
            pass


def test_an_error_releases_the_claim_as_failed(tmp_path):
    with pytest.raises(RuntimeError):
        with commit.lease(_lake(tmp_path), "v"):
            raise RuntimeError("boom")
    rows = commit.log_rows(_lake(tmp_path), "v", status=None)
    assert [r.status for r in rows] == [commit.RUNNING, "failed"] and "boom" in rows[-1].message
    assert commit.holder(rows) is None


@pytest.fixture(scope="module")
def s3_lake_root():
    """A bucket of moto's S3 server (``helpers.moto_s3``), reached through the AWS_* variables."""
    with moto_s3("lakeivm-lease") as env, pytest.MonkeyPatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)
        yield "s3://lakeivm-lease"


@pytest.mark.xdist_group("s3")  # one moto server (make test: --dist loadgroup)
def test_on_s3_racing_creators_exactly_one_creates(s3_lake_root):
    from lakeivm.store import storage

    racers = 6
    for trial in range(5):  # a file, then the log table's first commit, each raced for
        barrier, won, versions = threading.Barrier(racers), [], []
        marker, log = f"{s3_lake_root}/first{trial}/marker", f"{s3_lake_root}/first{trial}/_system/log"

        def create(i):
            barrier.wait()
            if storage.create_exclusive(marker, f"racer {i}"):
                won.append(i)
            barrier.wait()
            system_tables.ensure(log, "log.json")
            versions.append(storage.head_version(log))

        threads = [threading.Thread(target=create, args=(i,)) for i in range(racers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(won) == 1 and storage.read_text(marker) == f"racer {won[0]}"
        assert versions == [0] * racers  # one version 0, no creator committing after another


@pytest.mark.xdist_group("s3")  # one moto server (make test: --dist loadgroup)
def test_on_s3_racing_threads_exactly_one_wins_every_time(s3_lake_root):
    root, views, racers = f"{s3_lake_root}/race", [f"v{i}" for i in range(6)], 5
    _lake(root)
    assert _race_threads(root, views, racers) == [["refused"] * (racers - 1) + ["won"]] * len(views)


def test_a_claim_just_appended_is_held_before_its_acquire_returns(tmp_path, monkeypatch):
    """The claim is this process's from the moment it is in the log: a racing thread that reads it while the
    append is still returning (e.g. compacting the log after it) must not take it for a dead run's."""
    lake, seen = _lake(tmp_path), []
    append_row = commit._append_row

    def append_then_race(lake_, row, after=None):
        appended = append_row(lake_, row, after)
        if appended and row.status == "running" and not seen:
            seen.append(row.run_id)
            try:
                with commit.lease(_lake(tmp_path), row.view):
                    seen.append("taken over")
            except LeaseHeld:
                seen.append("held")
        return appended

    monkeypatch.setattr(commit, "_append_row", append_then_race)
    with commit.lease(lake, "v"):
        pass
    assert seen[1:] == ["held"]


def test_a_claim_from_a_clock_a_day_ahead_lapses_by_its_log_commit_s_age(tmp_path):
    """Its lease_expires says tomorrow; the store's time of its commit decides."""
    lake = _lake(tmp_path)
    skewed = claim_from_elsewhere(lake, "v", ahead=86_400)
    with pytest.raises(LeaseHeld, match=r"elsewhere:1, since .*; its last heartbeat \d s ago\). .* once its heartbeat is "
                                        r"120 s old .* `lakeivm unlock v --force`"):
        with commit.lease(_lake(tmp_path), "v"):
            pass
    age_log_commit(lake, skewed.log_version, 121)
    age, lapses = commit.heartbeat(lake, commit.holder(commit.log_rows(lake, "v", status=None)))
    assert 121 <= age < 180 and lapses == 120
    with commit.lease(_lake(tmp_path), "v") as claim:
        assert claim.seq == 2


def test_the_lease_is_the_longer_of_the_observer_s_and_the_claimant_s(tmp_path):
    lake = _lake(tmp_path)
    claim_from_elsewhere(lake, "v", lease=30, age=60)
    with pytest.raises(LeaseHeld, match="once its heartbeat is 90 s old"):  # the observer's setting
        with commit.lease(_lake(tmp_path), "v", seconds=90):
            pass
    with commit.lease(_lake(tmp_path), "v", seconds=45) as claim:
        assert claim.seq == 2
    claim_from_elsewhere(lake, "w", lease=300, age=60)
    with pytest.raises(LeaseHeld, match="once its heartbeat is 300 s old"):  # a claimant beating every 75 s is alive
        with commit.lease(_lake(tmp_path), "w", seconds=45):
            pass


def test_the_lease_setting_is_read_from_the_environment_and_lakeivm_toml(tmp_path, monkeypatch):
    from lakeivm.config import load_settings

    monkeypatch.delenv("LAKEIVM_LEASE_SECONDS", raising=False)
    assert load_settings(tmp_path / "none.toml").lease_seconds == 120
    (tmp_path / "lakeivm.toml").write_text("lease_seconds = 300\n")
    assert load_settings(tmp_path / "lakeivm.toml").lease_seconds == 300
    monkeypatch.setenv("LAKEIVM_LEASE_SECONDS", "45")
    assert load_settings(tmp_path / "lakeivm.toml").lease_seconds == 45.0
    monkeypatch.setenv("LAKEIVM_LEASE_SECONDS", "2m")
    with pytest.raises(ValueError, match="lease_seconds .* must be a positive number of seconds, got '2m'"):
        load_settings(tmp_path / "lakeivm.toml")


def test_unlock_refuses_a_fresh_claim_and_force_fences_its_run(tmp_path):
    assert commit.unlock(_lake(tmp_path), "v") is None  # nothing held: nothing appended
    running = commit.Lease(_lake(tmp_path), "v", "refresh", seconds=0.4)
    running.acquire()
    with pytest.raises(LeaseHeld, match=rf"held by run {running.run_id[:8]} \(#1 refresh\) on {running.holder}, whose last "
                                        r"heartbeat was \d s ago .* `lakeivm unlock v --force`"):
        commit.unlock(_lake(tmp_path), "v", seconds=0.4)  # it is alive: it beats every 0.1 s
    ended, age = commit.unlock(_lake(tmp_path), "v", force=True, seconds=0.4)
    assert ended.run_id == running.run_id and age < 0.4
    rows = commit.log_rows(_lake(tmp_path), "v", status=None)
    assert commit.holder(rows) is None and rows[-1].status == commit.BROKEN and "lakeivm unlock --force" in rows[-1].message
    time.sleep(0.3)  # its heartbeat finds the claim gone
    with pytest.raises(LeaseLost, match=r"claim \(run .*, #1\) was broken by .* \(`lakeivm unlock`\); this run commits nothing"):
        running.check()
    with pytest.raises(LeaseLost, match="was broken by"):
        running.commit(commit.LogRow(view="v", seq=1, status="committed", mode="refresh", kind="x", pins={}, watermarks={},
                                     state_versions={}, consistent=True, run_id=running.run_id))
    running.release()
    assert commit.log_rows(_lake(tmp_path), "v") == []  # nothing of the fenced run committed
    with commit.lease(_lake(tmp_path), "v") as claim:  # the view is free
        assert claim.seq == 2
