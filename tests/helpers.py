"""Helpers for Spark tests: small tables, random change batches committed as Delta writes."""
from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from lakeivm.store.lake import Lake

# The suite's JVMs run small queries, CPU-bound on 2 cores (3 workers and a Connect server): the
# serial collector and interpreted expressions (no Janino compile per query) save a third of the CPU.
# TPC-H q12-q22 stream alone: JVM CPU 199 s -> 167 s (serial GC) -> 135 s (and interpreted); wall
# 127 s -> 94 s. The JIT is most of what is left early on (one first_order stream test alone: 66 s of
# its JVM's 96 s CPU compiling 30k methods, JFR's CompilerStatistics), but C1 alone (no C2,
# -XX:TieredStopAtLevel=1), though it cut that test's CPU to 63 s at the same wall time, made the
# whole suite slower: `.ci/run` 2330 s -> 2930 s (a worker's JVM lives 40 min; C2's code pays back).
# Adaptive execution off: with one shuffle partition it has nothing to coalesce or skew-split, and its
# re-planning of each query stage cost ~7 % of a test JVM's CPU (tests/views/first_order/test_semi.py
# and fivm's chain streams: 289-295 -> 271-276 CPU-s over two runs each). Lakeivm's own sessions keep it.
TEST_JVM = {"spark.driver.extraJavaOptions": "-XX:+UseSerialGC",
            "spark.sql.codegen.factoryMode": "NO_CODEGEN", "spark.sql.codegen.wholeStage": "false",
            "spark.sql.adaptive.enabled": "false"}


def sql(lake: Lake, statement: str, table: str) -> None:
    lake.spark.sql(statement.replace("{t}", f"delta.`{lake.table_path(table)}`"))


def random_batch(lake: Lake, rng: random.Random, table: str, key: str, value: str, keys: int = 4) -> None:
    """One Delta commit on ``table``: an insert, a delete or an update, chosen at random."""
    op = rng.choice(["insert", "insert", "delete", "update"])
    k = rng.randrange(keys)
    if op == "insert":
        rows = ", ".join(f"({rng.randrange(keys)}, {rng.choice(['NULL', rng.randrange(10)])})" for _ in range(rng.randint(1, 3)))
        sql(lake, f"INSERT INTO {{t}} ({key}, {value}) VALUES {rows}", table)
    elif op == "delete":
        sql(lake, f"DELETE FROM {{t}} WHERE {key} = {k}", table)
    else:
        sql(lake, f"UPDATE {{t}} SET {value} = COALESCE({value}, 0) + 1 WHERE {key} = {k}", table)


def bootstrap_incremental(lake: Lake, views: dict[str, str], kind: str) -> list:
    """Specs of ``views`` ({name: SQL}) under ``refresh_policy: incremental``, each built and checked to
    get ``kind``."""
    from lakeivm.run.engine import run_view
    from lakeivm.catalog.registry import spec_from_dict

    specs = [spec_from_dict({"name": name, "deadline": 60, "refresh_policy": "incremental", "sql": sql}) for name, sql in views.items()]
    for spec in specs:
        assert run_view(lake, spec).kind == kind, spec.name
    return specs


def refresh_and_audit(lake: Lake, specs: list, tables: tuple[str, ...] | None) -> None:
    """Refresh every view applying only ``tables`` (None: all), and check each equals its SQL at its watermarks."""
    from lakeivm.run.audit import audit
    from lakeivm.run.engine import run_view

    for spec in specs:
        row = run_view(lake, spec, tables=tables)
        assert tables is None or set(row.applied) <= set(tables), (spec.name, row.applied)
        report = audit(lake, spec)
        assert report.ok, (f"{spec.name} after applying {tables or 'all'} ({row.plan}): {report}; "
                           f"missing {report.missing[:5]}, unexpected {report.unexpected[:5]}")


def alternate_paths(lake: Lake, monkeypatch, on_spark, *more) -> Callable[[int], str]:
    """A stream's runs taking turns between the ways state is kept: turn 0 runs with the lake's own
    limits (its tiny state read and written in this process by delta-rs and DuckDB), turn 1 with
    ``on_spark`` (a ``Limits`` under which nothing counts as small: every step a Spark job, state
    MERGEd), turn 2, 3, ... with each of ``more``, then round again. One stream then covers every
    path, each reading the state the others wrote. Returns ``turn(i)``, which sets the path for
    what runs next and names it ("local", "spark", "more 1", ...)."""
    paths = [("local", lake.limits), ("spark", on_spark), *((f"more {i}", m) for i, m in enumerate(more, 1))]

    def turn(i: int) -> str:
        name, limits = paths[i % len(paths)]
        monkeypatch.setattr(lake, "limits", limits)
        return name
    return turn


def audited_rounds(lake: Lake, rng: random.Random, specs: list, steps: tuple[str, str, str],
                   turn: Callable[[int], str] | None = None) -> Iterator[None]:
    """Three rounds over r(a, x), s(a, g), u(x, c): a random commit on each table and ``steps[i]`` on s
    (and a second random commit of s in the first round: netted), then every view refreshed and audited
    (``refresh_and_audit``) applying s alone, s and u (r behind: an asymmetric plan), then all. Yields
    after each round. ``turn`` (``alternate_paths``): round i runs on path ``turn(i + 1)``, the first
    and the last on Spark."""
    for i, (tables, step) in enumerate(zip((("s",), ("s", "u"), None), steps)):
        for table, key, value in (("r", "a", "x"), ("s", "a", "g"), ("u", "x", "c")):
            random_batch(lake, rng, table, key, value)
        sql(lake, step, "s")
        if tables == ("s",):
            random_batch(lake, rng, "s", "a", "g")
        if turn is not None:
            turn(i + 1)
        refresh_and_audit(lake, specs, tables)
        yield


def claim_from_elsewhere(lake: Lake, view: str, ahead: float = 0.0, lease: float = 120.0, age: float = 0.0):
    """A claim on ``view`` as a run on another host (``elsewhere:1``) appends it, its clock ``ahead``
    seconds ahead and its lease ``lease`` seconds, as the log's next version; that commit is then
    made ``age`` seconds old by the store's clock (``age_log_commit``). Returns the claim row."""
    from datetime import datetime, timedelta, timezone

    from lakeivm.store import commit

    now = datetime.now(timezone.utc) + timedelta(seconds=ahead)
    row = commit.LogRow(view=view, seq=commit.next_seq(commit.log_rows(lake, view, status=None)), status=commit.RUNNING,
                        mode="refresh", kind="", pins={}, watermarks={}, state_versions={}, consistent=False,
                        holder="elsewhere:1", started_at=now, finished_at=now, lease_expires=now + timedelta(seconds=lease),
                        log_version=lake.head_version(lake.log_path) + 1)
    commit.append_log(lake, row)
    assert lake.head_version(lake.log_path) == row.log_version  # nothing else appended meanwhile
    age_log_commit(lake, row.log_version, age)
    return row


def age_log_commit(lake: Lake, version: int, age: float) -> None:
    """Set the modification time of ``_system/log``'s commit ``version`` ``age`` seconds back."""
    written = time.time() - age
    os.utime(f"{lake.log_path}/_delta_log/{version:020d}.json", (written, written))


@contextmanager
def moto_s3(bucket: str) -> Iterator[dict[str, str]]:
    """An S3 bucket on loopback: moto's S3 server (a real HTTP S3 API, with conditional PUTs) started
    as a process of its own and stopped by its pid. Yields the AWS_* variables through which
    delta-rs, pyarrow and obstore reach it, as a deployment's would reach S3.

    The server answers one request at a time. moto checks ``If-None-Match: *`` and then stores the
    object as two steps. Under ``python -m moto.server``'s threaded server, two racing PUTs can both
    pass the check; that happened in CI, with 2 of 6 creators winning. S3 itself makes a conditional
    PUT atomic. Serving requests in turn is what gives moto that atomicity too."""
    import boto3

    from lakeivm.infra.deploy import free_port

    port = free_port()
    serve = ("import sys; from werkzeug.serving import run_simple; "
             "from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app; "
             "run_simple('127.0.0.1', int(sys.argv[1]), DomainDispatcherApplication(create_backend_app), threaded=False)")
    server = subprocess.Popen([sys.executable, "-c", serve, str(port)], env={**os.environ, "MOTO_PORT": str(port)},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    env = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "lakeivm", "AWS_SECRET_ACCESS_KEY": "lakeivm",
           "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"}
    try:
        client = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], aws_access_key_id="lakeivm",
                              aws_secret_access_key="lakeivm", region_name="us-east-1")
        deadline = time.monotonic() + 60
        while True:
            try:
                client.create_bucket(Bucket=bucket)
                break
            except Exception:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise
                time.sleep(0.3)
        yield env
    finally:
        server.terminate()
        server.wait(30)
