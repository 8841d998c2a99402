"""A kill -9 of the Spark Connect server in the middle of a refresh: restart, rerun, audit.

A server of the test's own (killing the suite's shared one would break every other Connect test),
a lake with the views ``fo`` (first-order) and ``fv`` (F-IVM) over tables r and s, bootstrapped
through it. Then changes to r and s, a real ``lakeivm refresh`` process per view
(forked, as in tests/test_faults.py), the server's whole process group SIGKILLed at a seeded random
moment of their runs, the server restarted at the same URL, each view refreshed again (allowing the
``late write`` refusal of tests/test_faults.py) and audited: equal to its SQL computed from scratch
at the run's watermarks, each committed run logged once.

What a refresh client does when its server dies, asserted as it is:

- Restarted at once (as an operator or a supervisor would): the client's next retry meets a server
  that does not know its session, and it ends: exit 2, one line naming the server and the fix
  (``lakeivm.errors.known_failure``), no traceback -- also none from a thread of the run.
- Left dead: the client ends too, with the same one line, within ``CLIENT_END`` seconds: lakeivm's
  sessions give up on an unreachable server after about 25 s per call (``spark._bounded_retries``;
  pyspark's own policy retried for 10 minutes per call, and a failing run makes a few calls after
  the first -- by hand, a client was still running 15 minutes on, as a DAG task would hang).
"""
from __future__ import annotations

import os
import random
import signal
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from lakeivm.store import commit
from lakeivm.infra import server
from lakeivm.config import Settings
from lakeivm.run.audit import audit
from lakeivm.store.lake import open_lake
from lakeivm.store.lake import Lake
from lakeivm.processes import alive
from lakeivm.catalog.registry import load_specs
from lakeivm.spark import connect, listening, release_connect_session
from tests.forked_refresh import Forked
from tests.helpers import TEST_JVM, random_batch

pytestmark = [pytest.mark.connect, pytest.mark.faults]

VIEWS = {  # tests/test_faults.py's views over r and s
    "fo": {"sql": "SELECT g, SUM(x) AS sx, COUNT(*) AS c, MIN(x) AS mx FROM r JOIN s ON r.a = s.a GROUP BY g",
           "kind": "first_order"},
    "fv": {"sql": "SELECT g, SUM(x) AS sx, COUNT(*) AS c FROM r JOIN s ON r.a = s.a GROUP BY g"},
}
LATE_WRITE = "the late write of a killed or paused run"  # a rerun may refuse once (tests/test_faults.py)
SERVER_LOST = "went away mid-run"  # lakeivm.errors' line for a Connect server killed or restarted under a run
CLIENT_END = 150.0  # seconds a refresh client gets to end after its server died (a few calls of ~25 s of retries)


def _free_url() -> str:
    with socket.socket() as probe:  # a free port, so a developer's own server is left alone
        probe.bind(("127.0.0.1", 0))
        return f"sc://127.0.0.1:{probe.getsockname()[1]}"


def _start_server(url: str) -> server.ServerInfo:
    return server.start(Settings(shuffle_partitions=2, spark_conf=TEST_JVM), master="local[2]", remote=url)


@pytest.fixture
def own_server(tmp_path, monkeypatch) -> Iterator[str]:
    """The URL of a Connect server of this test's own, its pid file and log under a home of its own;
    stopped at the end by its pid (whichever server the test started last), also when it fails."""
    monkeypatch.setenv("LAKEIVM_HOME", str(tmp_path / "home"))
    url = _free_url()
    first = _start_server(url)
    try:
        yield url
    finally:
        last = server.status(url) or first
        if last.alive:
            server.stop(url)
        else:
            _kill_group(last)
        assert not alive(last.pid)


@pytest.mark.parametrize("restart_at_once", [False, pytest.param(True, marks=pytest.mark.slow)],
                         ids=["left-dead", "restarted-at-once"])
def test_server_killed_mid_refresh_restart_rerun_audit(own_server, tmp_path, restart_at_once):
    """The server killed early in the runs and left dead until its clients ended, or (``slow``: the
    default suite's Connect clients already take most of its time) killed after the first progress
    line and restarted at once; see the module docstring."""
    url, rng = own_server, random.Random(31 + restart_at_once)
    settings, env = _lake_settings(tmp_path, url)
    with _session(url, settings) as lake:
        _tables(lake, rng)
    for view in VIEWS:
        _refreshed(env, tmp_path, view)  # the bootstrap
    started: list[Forked] = []
    try:
        _changed(url, settings, rng)
        clients = _killed_mid_refresh(url, env, tmp_path, rng, after_first_line=restart_at_once)
        started += clients
        if restart_at_once:
            _start_server(url)
        for proc in clients:
            _ended_with_one_line(proc, url)
        if not restart_at_once:
            _start_server(url)
        for view in VIEWS:
            _refreshed(env, tmp_path, view)
        with _session(url, settings) as lake:
            for view in VIEWS:
                _audited(lake, settings, view)
    finally:  # a client left running would keep pytest from exiting (multiprocessing joins its children)
        for proc in started:
            if proc.returncode is None:
                proc.kill_group()


def _changed(url: str, settings: Settings, rng: random.Random) -> None:
    """One random commit (insert, delete or update) on each of r and s."""
    with _session(url, settings) as lake:
        for table, key, value in (("r", "a", "x"), ("s", "a", "g")):
            random_batch(lake, rng, table, key, value)


def _killed_mid_refresh(url: str, env: dict[str, str], folder: Path, rng: random.Random,
                        after_first_line: bool) -> list[Forked]:
    """A refresh of each view started at once, and the server's process group SIGKILLed at a random
    moment of their runs (checked: none had ended); the refresh processes, still running or not."""
    clients = [Forked(env, folder, "refresh", view) for view in VIEWS]
    if after_first_line:  # a moment of the run proper: reading the changes, applying, committing
        clients[0].readline(timeout=120)
        time.sleep(rng.uniform(0.0, 1.5))
    else:  # any moment: connecting, claiming, reading the changes, applying
        time.sleep(rng.uniform(0.3, 3.0))
    assert all(proc.returncode is None for proc in clients), "a refresh ended before its server was killed"
    _kill_group(server.status(url))
    return clients


def _ended_with_one_line(proc: Forked, url: str) -> None:
    """The client of a server killed under it ends by itself, whether the server is restarted or left
    dead: exit 2 with one line naming the server (or exit 0: its run had committed before the kill
    took effect), never a traceback."""
    out, err = proc.communicate(timeout=CLIENT_END)
    assert "Traceback" not in out + err, f"a traceback instead of a message:\n{out}\n{err}"
    ended = proc.returncode == 2 and err.count("\n") == 1 and SERVER_LOST in err and url in err
    assert ended or (proc.returncode == 0 and "run #" in out), (proc.returncode, out, err)


def _kill_group(info: server.ServerInfo) -> None:
    """SIGKILL the server's process group (spark-submit's JVM and its Python workers); wait until it
    is gone and its port closed: the JVM's main thread turns zombie before the threads holding the
    port have exited, and a restart meanwhile finds the port taken."""
    try:
        os.killpg(info.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + 30
    while (alive(info.pid) or listening(info.remote)) and time.monotonic() < deadline:
        time.sleep(0.1)


def _lake_settings(folder: Path, url: str) -> tuple[Settings, dict[str, str]]:
    """The lake's settings (views written as YAML) and the environment of the refresh processes."""
    views = folder / "views"
    views.mkdir()
    for name, spec in VIEWS.items():
        (views / f"{name}.yaml").write_text(yaml.safe_dump({"name": name, "deadline": "60s", **spec}))
    settings = Settings(lake=str(folder / "lake"), views=str(views), shuffle_partitions=2)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAKEIVM_SPARK", "PYSPARK", "SPARK_"))}
    env.update(LAKEIVM_SPARK_REMOTE=url, LAKEIVM_LAKE=settings.lake, LAKEIVM_VIEWS=str(views),
               LAKEIVM_HOME=os.environ["LAKEIVM_HOME"])  # the server's home: a known failure's whole trace is kept there
    return settings, env


@contextmanager
def _session(url: str, settings: Settings) -> Iterator[Lake]:
    """A Connect session of this process as a Lake, released at the end: its server may be killed
    next, and a session left open would retry its release against the dead server for minutes."""
    try:
        yield open_lake(connect(url, settings), settings)
    finally:
        release_connect_session()


def _tables(lake: Lake, rng: random.Random) -> None:
    spark = lake.spark
    lake.create_table("r", spark.createDataFrame([(rng.randrange(6), rng.randrange(50)) for _ in range(20)], "a int, x int"))
    lake.create_table("s", spark.createDataFrame([(a, rng.randrange(3)) for a in range(6)], "a int, g int"))


def _refreshed(env: dict[str, str], folder: Path, view: str, attempts: int = 3) -> str:
    """A refresh run to exit 0; an exit 2 refusing a killed run's late write is rerun."""
    for _ in range(attempts):
        proc = Forked(env, folder, "refresh", view)
        out, err = proc.communicate(timeout=300)
        assert "Traceback" not in out + err, f"a traceback instead of a message:\n{out}\n{err}"
        if proc.returncode == 0:
            return out
        assert proc.returncode == 2 and LATE_WRITE in err, (proc.returncode, out, err)
        time.sleep(1)
    pytest.fail(f"{view}: no successful refresh in {attempts} attempts: {out}{err}")


def _audited(lake: Lake, settings: Settings, view: str) -> None:
    report = audit(lake, load_specs(settings.views)[view])
    assert report.ok, f"{report} missing={report.missing} unexpected={report.unexpected}"
    runs = [r.run_id for r in commit.log_rows(lake, view)]
    assert len(runs) == len(set(runs)), "a committed run was logged twice"
