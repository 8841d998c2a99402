"""The Airflow DAGs: parsing is clean and Spark-free; dag.test() runs apply -> validate."""
from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
from importlib.resources import files
from pathlib import Path

import pytest

from lakeivm.config import SHIPPED_VIEWS, Settings

REPO = Path(__file__).resolve().parents[1]
DAGS = Path(str(files("lakeivm.dags")))  # the repository's dags/ under the editable install; lakeivm/dags/ installed
AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="airflow-home"))  # every process that collects this module makes one
atexit.register(shutil.rmtree, AIRFLOW_HOME, ignore_errors=True)
os.environ.update({"AIRFLOW_HOME": str(AIRFLOW_HOME), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                   "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS)})

VIEW = """name: by_g
sql: SELECT g, SUM(x) AS sx, COUNT(*) AS c FROM r JOIN s ON r.a = s.a GROUP BY g
deadline: 60s
tick: 5m
"""


def _parse(env=None) -> dict:
    """Parse the DAG folder with Airflow's DagBag in a fresh interpreter (importing Airflow costs
    seconds; the test process must not import the DAG files itself): {dags, errors, heavy}.
    The import timeout is lifted: a loaded CI machine must not turn a slow parse into an import error."""
    probe = (
        "import json, sys\n"
        "from airflow.dag_processing.dagbag import DagBag\n"
        f"bag = DagBag(dag_folder={str(DAGS)!r})\n"
        "heavy = [m for m in ('pyspark', 'great_expectations', 'delta') if m in sys.modules]\n"
        "print(json.dumps({'dags': sorted(bag.dag_ids), 'errors': bag.import_errors, 'heavy': heavy}))\n"
    )  # the JSON is the last line: Airflow logs to stdout too
    env = {**os.environ, **(env or {}), "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "600"}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_package_maps_the_one_copy_of_dags_and_jobs():
    assert DAGS == REPO / "dags"
    assert Path(str(files("lakeivm.jobs"))) == REPO / "jobs"


def test_dag_folder_parses_without_errors_spark_or_connections():
    from lakeivm.catalog.registry import load_specs

    expected = sorted(f"lakeivm__{name}" for name in load_specs(SHIPPED_VIEWS))
    assert "lakeivm__revenue_by_nation" in expected
    bag = _parse()
    assert not bag["errors"] and bag["dags"] == expected and not bag["heavy"], bag


@pytest.fixture
def views_with_a_broken_spec(tmp_path):
    views = tmp_path / "views"
    views.mkdir()
    (views / "by_g.yaml").write_text(VIEW)
    (views / "broken.yaml").write_text("name: broken\nsql: [\ndeadline: 60s\n")  # malformed YAML
    return views


def test_a_broken_spec_is_an_import_error_of_its_own_and_the_other_dags_load(views_with_a_broken_spec):
    bag = _parse({"LAKEIVM_VIEWS": str(views_with_a_broken_spec)})
    assert bag["dags"] == ["lakeivm__by_g"], bag
    # Not lakeivm_views.py: Airflow 3 marks every DAG of a file with an import error stale.
    ((path, error),) = bag["errors"].items()
    assert path.endswith("lakeivm_spec_errors.py")
    assert f"{views_with_a_broken_spec}/broken.yaml: line 2: malformed YAML" in error


def test_build_dags_skips_and_logs_a_broken_spec_check_specs_raises(views_with_a_broken_spec, caplog):
    from lakeivm.errors import SpecError
    from lakeivm.infra.scheduling import build_dags, check_specs

    settings = Settings(lake="/tmp/lake", views=str(views_with_a_broken_spec))
    assert list(build_dags(settings)) == ["lakeivm__by_g"]
    assert f"{views_with_a_broken_spec}/broken.yaml: line 2: malformed YAML" in caplog.text
    with pytest.raises(SpecError, match=r"1 view spec\(s\) do not load.*\n.*broken.yaml: line 2: malformed YAML"):
        check_specs(settings)
    (views_with_a_broken_spec / "broken.yaml").unlink()
    check_specs(settings)

def test_a_tasks_process_builds_only_its_own_dag(tmp_path, monkeypatch):
    from lakeivm.infra.scheduling import build_dags

    views = tmp_path / "views"
    views.mkdir()
    for name in ("a", "b"):
        (views / f"{name}.yaml").write_text(VIEW.replace("name: by_g", f"name: {name}"))
    settings = Settings(lake=str(tmp_path / "lake"), views=str(views))
    assert sorted(build_dags(settings)) == ["lakeivm__a", "lakeivm__b"]
    monkeypatch.setenv("_AIRFLOW_PARSING_CONTEXT_DAG_ID", "lakeivm__b")  # what Airflow sets for a task's parse
    assert list(build_dags(settings)) == ["lakeivm__b"]


def test_dag_shape_local_and_cluster(tmp_path):
    from lakeivm.catalog.registry import spec_from_dict
    from lakeivm.infra.scheduling import build_dag

    spec = spec_from_dict({"refresh_policy": "incremental", "name": "v", "sql": "SELECT COUNT(*) AS c FROM r", "deadline": 10, "tick": "2m"})
    local = build_dag(spec, Settings(lake=str(tmp_path), spark_master="local[2]"))
    assert local.dag_id == "lakeivm__v" and set(local.task_ids) == {"apply", "validate"}
    assert local.max_active_runs == 1 and local.catchup is False and "refresh" in local.params
    assert [a.uri for a in local.get_task("validate").outlets] == [f"file://{tmp_path}/views/v/result"]
    assert local.deadline  # every deployment gets the alert; only dag.test() callers opt out:
    assert not build_dag(spec, Settings(lake=str(tmp_path)), deadline_alert=False).deadline  # Airflow 3.3.2's dag.test() fails on one
    remote = build_dag(spec, Settings(lake=str(tmp_path), spark_master="spark://master:7077", spark_remote="sc://127.0.0.1:15002"))
    assert set(remote.task_ids) == {"apply", "validate"}  # a Connect server: TaskFlow tasks, no spark-submit
    cluster = build_dag(spec, Settings(lake="s3a://bucket/lake", spark_master="spark://master:7077"))
    submit = cluster.get_task("apply_and_validate")
    assert type(submit).__name__ == "SparkSubmitOperator" and submit.application == str(files("lakeivm.jobs") / "refresh.py")
    assert Path(submit.application).is_file()
    assert "--validate" in submit.application_args and set(cluster.task_ids) == {"apply_and_validate", "publish"}
    assert "--mode" in submit.application_args  # the job's default (refresh) is for people, not the DAG
    assert [a.uri for a in cluster.get_task("publish").outlets] == ["s3a://bucket/lake/views/v/result"]
    (alert,) = cluster.deadline if isinstance(cluster.deadline, list) else [cluster.deadline]
    assert alert.interval.total_seconds() == 10 and "deadline_missed" in str(alert.callback.path)


def test_a_missed_deadline_calls_the_notifier_the_settings_name_as_the_triggerer_runs_it(tmp_path):
    import asyncio

    from airflow.triggers.callback import CallbackTrigger

    from lakeivm.catalog.registry import spec_from_dict
    from lakeivm.infra.scheduling import build_dag

    spec = spec_from_dict({"name": "v", "sql": "SELECT COUNT(*) AS c FROM r", "deadline": 10})
    settings = Settings(lake=str(tmp_path), deadline_notifier="tests.notifier.FileNotifier",
                        deadline_notifier_kwargs={"path": str(tmp_path / "sent"), "text": "view {view} missed {deadline_s} s"})
    (alert,) = (lambda d: d if isinstance(d, list) else [d])(build_dag(spec, settings).deadline)
    assert alert.callback.path == "tests.notifier.FileNotifier"
    trigger = CallbackTrigger(alert.callback.path, dict(alert.callback.kwargs))

    async def events():
        return [event.payload async for event in trigger.run()]

    assert asyncio.run(events())[-1]["state"] == "success"
    assert (tmp_path / "sent").read_text() == "view v missed 10 s"
    plain = build_dag(spec, Settings(lake=str(tmp_path))).deadline
    assert "deadline_missed" in str((plain if not isinstance(plain, list) else plain[0]).callback.path)


def test_tasks_retry_by_default_and_a_spec_sets_how_often_and_how_long_apart(tmp_path):
    from datetime import timedelta

    from lakeivm.catalog.registry import spec_from_dict
    from lakeivm.infra.scheduling import RETRIES, RETRY_DELAY_S, build_dag

    base = {"name": "v", "sql": "SELECT COUNT(*) AS c FROM r", "deadline": 10}
    local = build_dag(spec_from_dict(base), Settings(lake=str(tmp_path), spark_master="local[2]"))
    assert {(t.retries, t.retry_delay) for t in local.tasks} == {(RETRIES, timedelta(seconds=RETRY_DELAY_S))} == {(2, timedelta(seconds=30))}
    spec = spec_from_dict({**base, "retries": 5, "retry_delay": "2m"})
    cluster = build_dag(spec, Settings(lake="s3a://bucket/lake", spark_master="spark://master:7077"))
    assert {(t.retries, t.retry_delay) for t in cluster.tasks} == {(5, timedelta(minutes=2))}
    with pytest.raises(Exception, match="retries: -1 is less than the minimum of 0"):
        spec_from_dict({**base, "retries": -1})


def test_the_job_refreshes_by_default_as_the_cli_does(monkeypatch, capsys):
    from lakeivm.jobs import refresh

    monkeypatch.setattr(refresh.tasks, "apply", lambda view, mode: {"view": view, "mode": mode})
    refresh.main(["v"])
    assert json.loads(capsys.readouterr().out) == {"view": "v", "mode": "refresh"}


@pytest.fixture(scope="module")
def airflow_db():
    subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"], check=True, capture_output=True, env=os.environ.copy())


@pytest.mark.airflow
@pytest.mark.heavy(330)
def test_dag_test_bootstraps_ticks_and_refreshes(lake, spark, tmp_path, airflow_db, monkeypatch):
    from lakeivm.store import commit
    from lakeivm.run.audit import audit
    from lakeivm.catalog.registry import load_specs
    from lakeivm.infra.scheduling import build_dags
    from tests.helpers import sql

    views = tmp_path / "views"
    views.mkdir()
    (views / "by_g.yaml").write_text(VIEW)
    for key, value in {"LAKEIVM_LAKE": lake.root, "LAKEIVM_VIEWS": str(views), "LAKEIVM_SPARK_MASTER": "local[2]"}.items():
        monkeypatch.setenv(key, value)
    lake.create_table("r", spark.createDataFrame([(0, 1), (1, 2)], "a int, x int"))
    lake.create_table("s", spark.createDataFrame([(0, 0), (1, 1)], "a int, g int"))
    dag = build_dags(deadline_alerts=False)["lakeivm__by_g"]  # dag.test() cannot run a DAG with a deadline alert
    assert str(dag.test().state) == "success"
    sql(lake, "INSERT INTO {t} VALUES (0, 5), (1, 7)", "r")
    sql(lake, "INSERT INTO {t} VALUES (2, NULL)", "s")  # a NULL group key the spec does not allow
    sql(lake, "INSERT INTO {t} VALUES (2, 1)", "r")
    # The on-demand run applies the batch (its log row commits), then validate fails the run. (A refresh
    # that succeeds through the scheduler is tests/test_deployment.py's.)
    run = dag.test(run_conf={"refresh": True})
    states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    assert str(run.state) == "failed" and states == {"apply": "success", "validate": "failed"}, states
    rows = commit.log_rows(lake, "by_g")
    assert [r.mode for r in rows] == ["bootstrap", "refresh"] and rows[-1].deadline_met is not None
    assert audit(lake, load_specs(views)["by_g"]).ok
    # Nothing pending now: apply short-circuits, validate is skipped, the run succeeds and logs nothing.
    run = dag.test(run_conf={"refresh": True})
    states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    assert str(run.state) == "success" and states == {"apply": "success", "validate": "skipped"}, states
    assert len(commit.log_rows(lake, "by_g")) == 2


def test_a_dags_runs_of_one_hour_share_one_connect_session():
    from datetime import datetime, timezone
    from types import SimpleNamespace

    from lakeivm.infra.scheduling import _session

    def run(run_id, hour, minute):
        return SimpleNamespace(dag_id="lakeivm__v", run_id=run_id, run_after=datetime(2026, 11, 29, hour, minute, tzinfo=timezone.utc))

    assert _session(run("scheduled__a", 5, 1)) == _session(run("manual__b", 5, 59)) != _session(run("scheduled__c", 6, 0))
    assert _session(SimpleNamespace(dag_id="lakeivm__w", run_id="manual__a", run_after=datetime(2026, 11, 29, 5, 1))) \
        != _session(run("scheduled__a", 5, 1))  # one per view
    assert _session(SimpleNamespace(dag_id="lakeivm__v", run_id="r1")) != _session(SimpleNamespace(dag_id="lakeivm__v", run_id="r2"))
    assert _session(None) is None


@pytest.mark.airflow
@pytest.mark.heavy(80)
def test_a_dbt_project_is_refreshed_through_airflow_and_a_pipeline_gets_its_dags(spark, tmp_path, airflow_db, monkeypatch):
    """Each way of declaring views besides YAML through Airflow: the example Spark Declarative
    Pipeline's folder gives a DAG per view; the example dbt project (compiled by dbt for real, read
    from its manifest) end to end: dag.test() of the leaf view bootstraps, then refreshes on demand
    after a TPC-H batch, refreshing its upstream first; the views read equal to their SQL. (The
    pipeline's views following a batch are tests/test_sdp.py's; once loaded, both folders' views take
    the same DAG code. CI budget: a dag.test() of each folder cost ~60 s of CPU more.)"""
    from lakeivm.api import Views
    from lakeivm.datagen.tpch import TpchChangeStream, generate_tpch
    from lakeivm.infra.scheduling import build_dags
    from lakeivm.store import commit

    project = tmp_path / "dbt"
    shutil.copytree(REPO / "schemas" / "dbt-tpch", project)
    dbt = Path(sys.executable).parent / "dbt"
    done = subprocess.run([str(dbt), "compile", "--project-dir", str(project), "--profiles-dir", str(project)],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          env={**os.environ, "DBT_SEND_ANONYMOUS_USAGE_STATS": "false"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    monkeypatch.setenv("LAKEIVM_LAKE", str(tmp_path / "lake-sdp"))
    monkeypatch.setenv("LAKEIVM_VIEWS", str(REPO / "schemas" / "views-sdp"))
    assert {"lakeivm__leading_nations", "lakeivm__revenue_by_nation"} <= set(build_dags(deadline_alerts=False))
    for folder, leaf, upstream in [(project, "revenue_by_priority", "order_revenue")]:
        root = str(tmp_path / f"lake-{folder.name}")
        for key, value in {"LAKEIVM_LAKE": root, "LAKEIVM_VIEWS": str(folder), "LAKEIVM_SPARK_MASTER": "local[2]"}.items():
            monkeypatch.setenv(key, value)
        views = Views.open(spark, lake=root, views=str(folder))
        assert sorted(views) == sorted([leaf, upstream]) and not views.broken
        generate_tpch(views.lake, 0.002, tables=("nation", "customer", "orders", "lineitem"), progress=lambda line: None)
        dag = build_dags(deadline_alerts=False)[f"lakeivm__{leaf}"]
        assert str(dag.test().state) == "success"
        stream = TpchChangeStream(views.lake, seed=3)
        stream.rf1(5), stream.rf2(5)  # RF1 inserts orders with their lineitems, RF2 deletes some
        run = dag.test(run_conf={"refresh": True})
        states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
        assert str(run.state) == "success" and states == {"apply": "success", "validate": "success"}, (folder, states)
        chained = commit.log_rows(views.lake, leaf)[-1]  # the leaf's row: its chain's seconds against its deadline
        assert chained.chain_seconds >= chained.seconds and chained.chain_deadline_met is not None, chained
        summary = next(ti for ti in run.get_task_instances() if ti.task_id == "apply").xcom_pull(task_ids="apply")
        assert [(one["view"], one["seq"]) for one in summary["chain"]] == \
            [(name, commit.log_rows(views.lake, name)[-1].seq) for name in (upstream, leaf)], summary  # each view's run, upstream first
        assert summary["chain_seconds"] >= sum(one["seconds"] for one in summary["chain"]), summary
        for name in (upstream, leaf):
            last = commit.log_rows(views.lake, name)[-1]
            assert last.mode == "refresh" and last.kind != "full", (name, last)
            audit = views[name].audit()  # what the view reads, against its SQL recomputed on the same snapshot
            assert audit.ok and views[name].read().count() > 0, (name, audit)
