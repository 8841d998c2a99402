"""Shared fixtures: one local SparkSession with Delta for the whole run, a fresh lake per test."""
from __future__ import annotations

import itertools
import os

import pytest

_counter = itertools.count()


def pytest_configure(config):
    """A private temp root per pytest process: concurrent runs must not prune each other's lakes
    (pytest keeps only the 3 newest numbered dirs under one shared /tmp/pytest-of-<user>)."""
    import tempfile

    if not config.option.basetemp:
        config.option.basetemp = config._lakeivm_basetemp = tempfile.mkdtemp(prefix="lakeivm-pytest-")
    os.environ.setdefault("LAKEIVM_SPEC_CACHE", os.path.join(config.option.basetemp, "specs"))  # kept specs: not the user's


def pytest_sessionfinish(session, exitstatus):
    """Remove the temp root this process made (~0.5 GB of lakes per run) once every test passed;
    after a failure it is kept for a look, and its path printed."""
    import shutil

    made = getattr(session.config, "_lakeivm_basetemp", None)
    if made is None or hasattr(session.config, "workerinput"):  # xdist workers live under the controller's root
        return
    if exitstatus == 0:
        shutil.rmtree(made, ignore_errors=True)
    else:
        print(f"\nlakeivm: the failed run's lakes are kept under {made}")


from tests.helpers import TEST_JVM  # noqa: E402 -- the suite's JVM settings, also the deployment test's



@pytest.fixture(scope="session")
def spark():
    from lakeivm.config import Settings
    from lakeivm.spark import get_spark

    # One core, one partition: three test JVMs already share 2 cores, so parallelism inside one only adds
    # task overhead (tests/views/fivm + first_order with -n 3: 449 s -> 408 s).
    session = get_spark(Settings(spark_master="local[1]", shuffle_partitions=1,
                                 spark_conf={"spark.databricks.delta.snapshotPartitions": "1", "spark.default.parallelism": "1", **TEST_JVM}),
                        app_name="lakeivm-tests")
    yield session
    session.stop()


@pytest.fixture
def lake(spark, tmp_path):
    from lakeivm.store.lake import open_lake
    from lakeivm.config import Settings

    return open_lake(spark, Settings(lake=str(tmp_path / f"lake{next(_counter)}")))


def pytest_collection_modifyitems(items):
    """Anything using the spark fixture carries the spark marker. The Spark Connect clients (markers
    connect, deployment) run last: pyspark refuses a Connect session in a process that has a local
    one, so they stop it first. The tests marked heavy run first."""
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()) or "lake" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.spark)
    # stable: the order is kept otherwise. The heavy tests first, longest first (their marker's
    # seconds): `make test` runs xdist's loadgroup scheduling, which hands out one test (or
    # xdist_group) at a time as a worker runs low, so the long tests spread over the workers and the
    # short ones fill the end instead of the longest ending the run alone.
    items.sort(key=lambda item: (_connect_client(item), -_heavy_seconds(item)))


def _heavy_seconds(item) -> float:
    """The seconds a test marked ``heavy(seconds)`` took in CI (3 workers on 2 cores); 0 unmarked."""
    marker = item.get_closest_marker("heavy")
    return 0.0 if marker is None else float(marker.args[0] if marker.args else 60)


def _connect_client(item) -> bool:
    return any(item.get_closest_marker(name) for name in ("connect", "deployment"))


@pytest.fixture(autouse=True)
def _no_local_session_in_connect_clients(request):
    """A test that is a Spark Connect client stops the suite's local session (they run last)."""
    if _connect_client(request.node):
        from pyspark.sql import SparkSession

        if SparkSession._instantiatedSession is not None:
            SparkSession._instantiatedSession.stop()
    yield


@pytest.fixture(scope="session")
def remote(tmp_path_factory):
    """A Spark Connect server (``lakeivm spark start``, local[2]) on a free port for the Connect
    clients of the suite; stopped by its pid at the end, also when a test fails."""
    import socket

    from pyspark.sql import SparkSession

    from lakeivm.infra import server
    from lakeivm.config import Settings
    from lakeivm.processes import alive

    if SparkSession._instantiatedSession is not None:  # the local session of earlier tests (these run last)
        SparkSession._instantiatedSession.stop()
    home = tmp_path_factory.mktemp("lakeivm-home")
    with socket.socket() as probe:  # a free port, so a developer's own server is left alone
        probe.bind(("127.0.0.1", 0))
        url = f"sc://127.0.0.1:{probe.getsockname()[1]}"
    with pytest.MonkeyPatch.context() as patch:  # its pid file and log under a home of its own
        patch.setenv("LAKEIVM_HOME", str(home))
        info = server.start(Settings(shuffle_partitions=2, spark_conf=TEST_JVM), master="local[2]", remote=url)
    try:
        yield info.remote
    finally:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("LAKEIVM_HOME", str(home))
            server.stop(info.remote)
        assert not alive(info.pid)
