"""What the DAG's tasks and the refresh job call: apply (one maintenance run), validate one view.

Each returns a small JSON-able dict (an Airflow XCom). Spark is the long-lived Spark Connect
server when one is configured -- the Airflow connection ``spark_connect_default`` (Airflow's Spark
provider, connection type ``spark_connect``) or the ``spark_remote`` setting -- and then every task
of one DAG run (and the runs of the same hour) attach to one server-side session (``session``): no task starts a JVM.
Without a server, Spark runs in the task's process (local mode) or is the driver spark-submit started.
"""
from __future__ import annotations

import uuid
from typing import Any

from lakeivm.config import Settings, load_settings

CONNECTION_ID = "spark_connect_default"


def session_for(dag_id: str, key: str) -> str:
    """The Spark Connect session id (a UUID) for ``key`` of a DAG: its runs of one hour (``scheduling._session``)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"lakeivm/{dag_id}/{key}"))


def apply(view: str, mode: str, session: str | None = None) -> dict[str, Any]:
    """Run one maintenance run (``mode``: tick or refresh, ``View.refresh``); returns what its log row
    says, or an empty dict -- falsy: the DAG's short-circuit skips validate -- when there was nothing to apply.
    A view over views refreshes (or ticks) its chain in this one task, upstreams first (one session,
    each change read once): ``chain`` lists each view's run of it, predicted beside actual seconds."""
    from lakeivm.api import Views
    from lakeivm.catalog.spec_cache import cached_specs
    from lakeivm.run.chains import chain_of
    from lakeivm.store import commit

    settings = resolve(load_settings())
    views = Views(_open(settings, session), cached_specs(settings.views, settings.lake), settings)
    upstreams = [one.name for one in chain_of(views[view].spec)[:-1]]
    before = {name: commit.last_committed(views.lake, name) for name in upstreams}
    row = views[view].refresh(mode, progress=print)
    if row is None:
        return {}
    ran = [last for name in upstreams if (last := commit.last_committed(views.lake, name)) and last != before[name]]
    if row.chain_deadline_met is False:  # the views it reads refreshed first, and all of it took longer than its deadline
        print(f"lakeivm: the refresh of {view} and the views it reads took {row.chain_seconds:.1f} s, over its deadline "
              f"{row.deadline_s:g} s (predicted {row.chain_predicted_seconds or 0:.1f} s); `lakeivm status` shows the chain's record")
    return {**_run_summary(row), "delta_rows": dict(row.delta_rows), "pending_rows": dict(row.pending_rows),
            "deadline_met": row.deadline_met, "consistent": row.consistent,
            **({"chain_seconds": round(row.chain_seconds, 3), "chain_predicted_seconds": row.chain_predicted_seconds,
                "chain_deadline_met": row.chain_deadline_met, "chain": [*map(_run_summary, ran), _run_summary(row)]}
               if row.chain_seconds is not None else {})}


def _run_summary(row) -> dict[str, Any]:
    """One run's line of the task's XCom: what it applied, its seconds and what they were predicted to be."""
    return {"view": row.view, "seq": row.seq, "mode": row.mode, "plan": row.plan, "applied": list(row.applied),
            "seconds": round(row.seconds, 3), "predicted_seconds": row.predicted_seconds}


def validate(view: str, summary: dict[str, Any], session: str | None = None) -> dict[str, Any]:
    """Validate the stored view with its expectation suite; raises ExpectationFailed naming it.
    A run that applied nothing (``summary`` empty) left the validated state as it was: nothing to check again."""
    from lakeivm.store import commit
    from lakeivm.sources.upstream import reader
    from lakeivm.run.quality import validate as run_suite
    from lakeivm.spec import find_spec
    from lakeivm.catalog.spec_cache import cached_specs

    if not summary:
        return {"view": view, "applied": [], "expectations": 0}
    settings = resolve(load_settings())
    lake = _open(settings, session)
    spec = find_spec(cached_specs(settings.views, settings.lake), view)
    row = commit.last_committed(lake, view)
    ctx, maintainer = reader(lake, spec, row)
    path = maintainer.state_tables(ctx)["result"]
    version = row.state_versions["result"] if row else None
    small = lake.read_small_arrow(path, lake.limits.pandas_rows, version)  # read by delta-rs: no Spark for a small view
    report = run_suite(small.to_pandas() if small is not None else lake.read(path, version), spec, ctx.query,
                       pandas_rows=lake.limits.pandas_rows)
    report.raise_if_failed()
    return {**summary, "expectations": report.evaluated}


def resolve(settings: Settings) -> Settings:
    """``settings`` with the Spark Connect server of Airflow's ``spark_connect_default`` connection,
    when running under Airflow and that connection exists (it wins over ``spark_remote``)."""
    try:
        from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook
        from airflow.sdk.exceptions import AirflowNotFoundException, AirflowRuntimeError
    except ImportError:
        return settings
    try:
        return settings.with_(spark_remote=SparkConnectHook(CONNECTION_ID).get_connection_url())
    except (AirflowNotFoundException, AirflowRuntimeError, RuntimeError):
        return settings  # no such connection, or not inside a task: the settings decide


def _open(settings: Settings, session: str | None):
    from lakeivm.store.lake import open_lake
    from lakeivm.spark import connect, get_spark

    def spark():  # made on first use: a run with nothing to apply needs no session
        return connect(settings.spark_remote, settings, session) if settings.spark_remote else get_spark(settings)

    return open_lake(spark, settings)
