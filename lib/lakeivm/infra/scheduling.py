"""Airflow 3 DAGs: one maintenance DAG per view spec, tasks apply -> validate.

What the DAGs do for a user: ``docs/operations/airflow.md#one-dag-per-view``.

The run plans itself (``engine.run_view``: the planner reads the log and the tables' commit files), so
planning is no task of its own: a task more cost every on-demand refresh a task start and a scheduler
hop on its way to a visible result. A run that finds nothing to
apply short-circuits: validate is skipped and no Asset event is emitted.

Parsing a DAG file imports neither Spark nor Great Expectations and opens no connection: the
tasks import the engine when they run. With a Spark Connect server (``spark_remote``, or Airflow's
``spark_connect_default`` connection) the tasks are Connect clients sharing one server-side session
per DAG run; on the embedded default (``local[*]``, no server) Spark runs in the task's process;
with LAKEIVM_SPARK_MASTER naming a cluster and no server, one ``SparkSubmitOperator`` task
(connection ``spark_default``) runs ``jobs/refresh.py`` (``lakeivm.jobs`` installed).

Every task retries a failure ``retries`` times, ``retry_delay`` apart (spec options; ``RETRIES`` and
``RETRY_DELAY_S`` by default): a slow api-server or a lost Connect session must not fail a run. A
failed expectation is no transient failure: validate then fails at once.
"""
from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone
from importlib.resources import files
from pathlib import Path
from typing import Any

from lakeivm.config import Settings, load_settings
from lakeivm.errors import SpecError
from lakeivm.spec import ViewSpec
from lakeivm.catalog.spec_cache import cached_specs


START = datetime(2026, 1, 1, tzinfo=timezone.utc)
REFRESH_JOB = Path(str(files("lakeivm.jobs") / "refresh.py"))  # spark-submit runs it as a file
RETRIES = 2  # a task's retries after a failure, unless its view's spec says `retries:`
RETRY_DELAY_S = 30.0  # seconds between them, unless the spec says `retry_delay:`


def view_asset_uri(settings: Settings, view: str) -> str:
    """The Asset a view publishes: its result table's location."""
    root = settings.lake if "://" in settings.lake else f"file://{Path(settings.lake).resolve()}"
    return f"{root}/views/{view}/result"


def build_dags(settings: Settings | None = None, deadline_alerts: bool = True) -> dict[str, Any]:
    """``{dag_id: DAG}`` for every spec in the views folder that loads; one that does not is logged
    here and raised by ``check_specs`` from a DAG file of its own, so the other views keep their DAGs.
    In a task's process (Airflow's parsing context names the DAG) only that DAG is built."""
    settings = settings or load_settings()
    specs = cached_specs(settings.views, settings.lake)
    for broken in specs.broken:
        logging.getLogger("lakeivm").error("lakeivm: no DAG for a view spec that does not load: %s", broken.summary)
    from airflow.sdk import get_parsing_context  # after logging: importing Airflow reconfigures it

    running = get_parsing_context().dag_id  # set when a task's process parses the file: it needs its own DAG only
    return {f"lakeivm__{name}": build_dag(spec, settings, deadline_alerts) for name, spec in specs.items()
            if running in (None, f"lakeivm__{name}")}


def check_specs(settings: Settings | None = None) -> None:
    """Raise SpecError naming every view spec of the views folder that does not load (file and line).

    Airflow shows it as the import error of the DAG file calling it (``lakeivm_spec_errors.py``). That
    file is not ``lakeivm_views.py`` because Airflow 3 marks every DAG of a file with an import error
    stale, which would stop the views whose specs are fine.
    """
    broken = cached_specs((settings or load_settings()).views).broken
    if broken:
        raise SpecError(f"{len(broken)} view spec(s) do not load, so their views have no DAG "
                        "(the other views' DAGs are in lakeivm_views.py):\n" + "\n".join(entry.summary for entry in broken))


async def deadline_missed(view: str, deadline_s: float, **context: Any) -> None:
    """Deadline alert callback (runs in the triggerer): a run of ``view`` outlived its deadline."""
    logging.getLogger("lakeivm").warning(
        "lakeivm: a run of view %s did not finish within its deadline of %gs; `lakeivm status` shows "
        "the backlog and the predicted refresh time (raise the deadline, tick more often or calibrate).",
        view, deadline_s)


def deadline_callback(spec: ViewSpec, settings: Settings):
    """What a missed deadline of ``spec``'s DAG calls in the triggerer: the notifier the settings name
    (``deadline_notifier``, with ``deadline_notifier_kwargs``: "{view}" and "{deadline_s}" in a string
    filled in), as Airflow's deadline alerts call notifiers; else ``deadline_missed``'s log line."""
    from airflow.sdk.definitions.deadline import AsyncCallback

    if not settings.deadline_notifier:
        return AsyncCallback(deadline_missed, kwargs={"view": spec.name, "deadline_s": spec.deadline_s})
    filled = {key: value.replace("{view}", spec.name).replace("{deadline_s}", f"{spec.deadline_s:g}") if isinstance(value, str)
              else value for key, value in settings.deadline_notifier_kwargs.items()}
    return AsyncCallback(settings.deadline_notifier, kwargs=filled)


def _delta_jars_or_package(settings: Settings) -> dict[str, str]:
    """spark-submit's arguments for Delta: the fetched JAR files (offline, no Ivy) when set-up fetched
    them, else the Maven package. Reads a manifest only: parsing never fetches."""
    from lakeivm.spark import MANIFEST, jars_folder, packages

    manifest = jars_folder(settings) / MANIFEST
    if manifest.exists():
        return {"jars": ",".join(str(manifest.parent / name) for name in manifest.read_text().split())}
    return {"packages": ",".join(packages(settings))}


def _schedule(spec: ViewSpec, settings: Settings) -> Any:
    """Every ``tick``; a view over views also whenever one of the views it reads publishes its Asset."""
    if not spec.upstreams:
        return timedelta(seconds=spec.tick_s)
    from airflow.sdk import Asset, AssetAny, AssetOrTimeSchedule, DeltaTriggerTimetable

    assets = [Asset(name=f"lakeivm__{name}", uri=view_asset_uri(settings, name)) for name in spec.upstreams]
    return AssetOrTimeSchedule(timetable=DeltaTriggerTimetable(timedelta(seconds=spec.tick_s)), assets=AssetAny(*assets))


def retry_args(spec: ViewSpec) -> dict[str, Any]:
    """The tasks' ``retries`` and ``retry_delay`` (Airflow's BaseOperator arguments) for ``spec``.

    >>> from lakeivm.spec import ViewSpec
    >>> retry_args(ViewSpec("v", "SELECT 1", 60, options={"retries": 0}))
    {'retries': 0, 'retry_delay': datetime.timedelta(seconds=30)}
    """
    delay = spec.options.get("retry_delay", RETRY_DELAY_S)
    if isinstance(delay, str):  # '30s': parsed by the registry, which a DAG file imports only then (it imports sqlglot)
        from lakeivm.catalog.registry import parse_duration

        delay = parse_duration(delay)
    return {"retries": int(spec.options.get("retries", RETRIES)), "retry_delay": timedelta(seconds=delay)}


def _mode(params: dict[str, Any] | None) -> str:
    """``refresh`` for a run triggered with ``{"refresh": true}`` (on demand: apply everything), else ``tick``."""
    return "refresh" if (params or {}).get("refresh") else "tick"


def _session(dag_run: Any) -> str | None:
    """The Spark Connect session of one DAG run's tasks (None outside a run): one per view and hour
    of the run's ``run_after``, so that a run finds the server-side session of the runs before it
    warm (a fresh session makes a small run noticeably slower), while a session left idle still
    expires on the server (after an hour, by default) with whatever its runs left cached there. The
    DAG runs one at a time (``max_active_runs=1``), so no two runs use one session at once."""
    from lakeivm.infra.tasks import session_for

    if dag_run is None:
        return None
    hour = getattr(dag_run, "run_after", None) or getattr(dag_run, "start_date", None)
    return session_for(dag_run.dag_id, hour.strftime("hour %Y-%m-%dT%H") if hour is not None else dag_run.run_id)


def build_dag(spec: ViewSpec, settings: Settings, deadline_alert: bool = True):
    """The maintenance DAG of one view: every ``tick``; ``{"refresh": true}`` refreshes on demand."""
    from airflow.sdk import Asset, Param, dag, task
    from airflow.sdk.definitions.deadline import DeadlineAlert, DeadlineReference

    asset = Asset(name=f"lakeivm__{spec.name}", uri=view_asset_uri(settings, spec.name))
    # Airflow 3 deadline alert: a run (an on-demand refresh above all) not done within the view's
    # deadline of being queued calls deadline_missed, which logs it against the view. Left out only
    # for dag.test() (the demo passes deadline_alert=False): Airflow 3.3.2's in-process dag.test()
    # fails on any DAG with a deadline alert (StatementError "'dict' object has no attribute 'hex'").
    deadline = None if not deadline_alert else DeadlineAlert(
        reference=DeadlineReference.DAGRUN_QUEUED_AT,
        interval=timedelta(seconds=spec.deadline_s),
        callback=deadline_callback(spec, settings),
    )

    @dag(
        dag_id=f"lakeivm__{spec.name}",
        schedule=_schedule(spec, settings),
        start_date=START,
        catchup=False,
        max_active_runs=1,
        tags=["lakeivm", spec.name],
        params={"refresh": Param(False, type="boolean", description="on-demand refresh: apply every pending change")},
        deadline=deadline,
        default_args=retry_args(spec),
        doc_md=f"Maintains view `{spec.name}` ({spec.source}); deadline {spec.deadline_s:g}s.\n\n```sql\n{spec.sql}\n```",
    )
    def maintenance():
        if settings.in_process or settings.spark_remote:
            @task.short_circuit
            def apply(params: dict[str, Any] | None = None, dag_run: Any = None) -> dict[str, Any]:
                """Run one maintenance run (on the Spark Connect server, or in this process); one that
                finds nothing to apply returns nothing and skips validate (no state changed, no Asset event)."""
                from lakeivm.infra import tasks

                return tasks.apply(spec.name, _mode(params), session=_session(dag_run))

            @task(outlets=[asset])
            def validate(summary: dict[str, Any], dag_run: Any = None) -> dict[str, Any]:
                """Check the stored view with its expectation suite; a failure names the expectation."""
                from airflow.sdk.exceptions import AirflowFailException

                from lakeivm.infra import tasks
                from lakeivm.run.quality import ExpectationFailed

                try:
                    return tasks.validate(spec.name, summary, session=_session(dag_run))
                except ExpectationFailed as err:  # the data, not a transient failure: retrying cannot help
                    raise AirflowFailException(str(err)) from err

            validate(apply())
        else:
            from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

            submit = SparkSubmitOperator(
                task_id="apply_and_validate",
                application=str(REFRESH_JOB),
                conn_id="spark_default",
                **_delta_jars_or_package(settings),
                # --mode always given: the job's default (refresh) is for a person running it by hand.
                application_args=[spec.name, "--mode", "{{ 'refresh' if params.refresh else 'tick' }}", "--validate"],
                name=f"lakeivm-{spec.name}",
            )

            @task(outlets=[asset])
            def publish() -> None:
                """Emit the view's Asset event once the Spark job validated it."""

            submit >> publish()

    return maintenance()
