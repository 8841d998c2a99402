"""The deployment users run, started for real on loopback (``lakeivm.infra.deploy``): PostgreSQL, a Spark
standalone master and worker, the Spark Connect server, Airflow's api-server, scheduler,
dag-processor and triggerer with LocalExecutor (issue 20, item 2).

One view, revenue_by_nation, with its deadline cut to 1 s (a spec in a temp views folder) so the
on-demand run outlives it, and its tick raised to 1 h so no second scheduled run queues ahead of the
on-demand one (on a loaded CI machine the first build outlived the 1 min tick): Airflow deletes a run's deadline row when the run finishes in time, and
keeps it, marked missed, when the DeadlineAlert fires (its callback then runs in the triggerer).
Unpausing the DAG starts its first scheduled run at once (catchup off: the tick that just ended),
which builds the view; so one scheduled run happens without waiting a tick. Then a TPC-H change
batch is committed and an on-demand refresh (``{"refresh": true}``) triggered through the REST API.
Every process of the stack is stopped by its pid at the end, also when the test fails.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psycopg2
import pytest
import yaml

from lakeivm.config import SHIPPED_VIEWS, load_settings
from lakeivm.infra.deploy import postgres_binary, start_stack
from lakeivm.errors import LakeIVMError
from tests.helpers import TEST_JVM

pytestmark = [pytest.mark.deployment, pytest.mark.timeout(900)]  # 5–7 min here; up to 11 min seen on a loaded CI machine

VIEW = "revenue_by_nation"
DAG = f"lakeivm__{VIEW}"
TABLES = ("nation", "customer", "orders", "lineitem")


def test_scheduled_and_on_demand_runs_of_a_view(tmp_path, monkeypatch):
    from lakeivm.datagen.tpch import TpchChangeStream, generate_tpch
    from lakeivm.store.lake import open_lake
    from lakeivm.spark import connect

    # The views folder does not change during the test: parse the DAG files once, not every 30 s (each
    # parse is a process importing Airflow and lakeivm, CPU the 2-core CI machine's other tests need).
    monkeypatch.setenv("AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL", "3600")
    # An idle scheduler loops every second (Airflow's default; the stack's 0.1 s buys latency, which
    # this test does not measure, with CPU the other tests need).
    monkeypatch.setenv("AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME", "1")

    started = time.monotonic()

    def step(what: str) -> None:  # progress with elapsed time: a failure's captured output shows where time went
        print(f"[{time.monotonic() - started:6.1f} s] {what}", flush=True)

    views = _views_with_short_deadline(tmp_path / "views")
    # the suite's JVM settings (tests/helpers.py: C1 only, serial GC, interpreted) for the server and its executor
    settings = load_settings().with_(spark_conf={**TEST_JVM, "spark.executor.extraJavaOptions": TEST_JVM["spark.driver.extraJavaOptions"]})
    stack = start_stack(tmp_path / "stack", lake=str(tmp_path / "lake"), views=str(views), settings=settings)
    with stack:
        spark = connect(stack.settings.spark_remote, stack.settings)
        try:
            lake = open_lake(spark, stack.settings)
            step("stack up")
            with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(f"{stack.spark_ui}/json/", timeout=10) as answer:
                apps = json.load(answer)["activeapps"]  # the real master's account of who holds its cores
            assert [app["cores"] for app in apps if app["name"] == "lakeivm-connect"] == [1], apps  # half its worker's 2
            generate_tpch(lake, 0.01, tables=TABLES)
            step("TPC-H written")
            api = stack.api
            api.wait_for_dag(DAG)
            api.unpause(DAG)
            scheduled = _first_scheduled_run(stack)
            step(f"scheduled run {scheduled['state']}: {api.task_durations(DAG, scheduled['dag_run_id'])}")
            assert scheduled["state"] == "success", _logs(stack, scheduled["dag_run_id"])
            stream = TpchChangeStream(lake, seed=3)
            stream.rf1(20), stream.rf2(20)
            manual = api.wait_for_run(DAG, api.trigger(DAG, {"refresh": True}))
            step(f"on-demand run {manual['state']}: {api.task_durations(DAG, manual['dag_run_id'])}")
            assert manual["state"] == "success", _logs(stack, manual["dag_run_id"])
        finally:
            spark.stop()
        # From an operator's shell: the environment the stack wrote out, nothing else of this process's.
        shell = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root")}
        audit = subprocess.run(["bash", "-c", f"source {stack.root}/stack.env && lakeivm audit {VIEW}"], env=shell,
                               capture_output=True, text=True, timeout=300)
        assert audit.returncode == 0 and "no difference" in audit.stdout, audit.stdout + audit.stderr
        emitted = {event["source_run_id"] for event in api.asset_events(DAG)}
        assert {scheduled["dag_run_id"], manual["dag_run_id"]} <= emitted
        alerts = _deadline_alerts(stack.postgres_url, manual["dag_run_id"])
        assert alerts == [(True, "success")], f"deadline rows of the on-demand run (missed, callback state): {alerts}"
    assert stack.alive() == [], "processes left running"


def test_a_missing_postgresql_program_is_named():
    with pytest.raises(LakeIVMError, match=r"`initdb-missing` was not found.*apt-get install -y postgresql"):
        postgres_binary("initdb-missing")


def _views_with_short_deadline(folder: Path) -> Path:
    spec = yaml.safe_load((SHIPPED_VIEWS / f"{VIEW}.yaml").read_text())
    folder.mkdir()
    (folder / f"{VIEW}.yaml").write_text(yaml.safe_dump({**spec, "deadline": "1s", "tick": "1h"}))
    return folder


def _first_scheduled_run(stack, timeout: float = 180.0) -> dict:
    deadline = time.time() + timeout
    while time.time() < deadline:
        runs = [run for run in stack.api.runs(DAG) if run["run_type"] == "scheduled"]
        if runs:
            return stack.api.wait_for_run(DAG, runs[0]["dag_run_id"])
        time.sleep(1.0)
    raise AssertionError(f"no scheduled run of {DAG} within {timeout:.0f} s of unpausing it")


def _deadline_alerts(url: str, run_id: str) -> list[tuple[bool, str]]:
    """(missed, state of its callback) per deadline row of the run, once the scheduler has marked the
    deadline missed and the triggerer has run ``lakeivm.infra.scheduling.deadline_missed``."""
    query = ("SELECT d.missed, c.state FROM deadline d JOIN dag_run r ON r.id = d.dagrun_id "
             "LEFT JOIN callback c ON c.id = d.callback_id WHERE r.dag_id = %s AND r.run_id = %s")
    with psycopg2.connect(url.replace("postgresql+psycopg2", "postgresql")) as db, db.cursor() as cursor:
        for _ in range(60):
            cursor.execute(query, (DAG, run_id))
            rows = cursor.fetchall()
            if rows and all(missed and state in ("success", "failed") for missed, state in rows):
                return rows
            time.sleep(1.0)
    return rows


def _logs(stack, run_id: str) -> str:
    """The tail of each task log of a run, for a failure message."""
    logs = sorted((stack.root / "airflow" / "logs").glob(f"dag_id={DAG}/run_id={run_id}/task_id=*/*.log"))
    return "\n".join(f"== {log}\n" + "\n".join(log.read_text(errors="replace").splitlines()[-30:]) for log in logs)
