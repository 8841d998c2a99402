"""What the DAG's tasks and ``jobs/refresh.py`` call: plan, apply, validate one view.

Each returns a small JSON-able dict (an Airflow XCom). The Spark session is the process's own
(in-process local mode) or the one spark-submit started.
"""
from __future__ import annotations

from typing import Any

from lakeivm.config import load_settings


def plan(view: str, refresh: bool) -> dict[str, Any]:
    """The run's mode and the view's backlog per table (rows of change feed pending)."""
    from lakeivm.engine import open_lake, status
    from lakeivm.registry import find_spec, load_specs

    settings = load_settings()
    mode = "refresh" if refresh else "tick"
    if not settings.in_process:
        return {"mode": mode}
    spec = find_spec(load_specs(settings.views), view)
    report = status(open_lake(settings=settings), {view: spec})[0]
    return {"mode": mode, "pending_rows": report.get("pending_rows", {})}


def apply(view: str, decision: dict[str, Any]) -> dict[str, Any]:
    """Run one maintenance run; returns what its log row says."""
    from lakeivm.engine import open_lake, run_view
    from lakeivm.registry import find_spec, load_specs

    settings = load_settings()
    spec = find_spec(load_specs(settings.views), view)
    row = run_view(open_lake(settings=settings), spec, mode=decision.get("mode", "tick"), progress=print)
    if row is None:
        return {"view": view, "applied": [], "note": "nothing to apply"}
    return {"view": view, "seq": row.seq, "mode": row.mode, "applied": list(row.applied), "delta_rows": dict(row.delta_rows),
            "seconds": round(row.seconds, 3), "deadline_met": row.deadline_met, "consistent": row.consistent}


def validate(view: str, summary: dict[str, Any]) -> dict[str, Any]:
    """Validate the stored view with its expectation suite; raises ExpectationFailed naming it."""
    from lakeivm import commit
    from lakeivm.engine import open_lake, prepare
    from lakeivm.quality import validate as run_suite
    from lakeivm.registry import find_spec, load_specs

    settings = load_settings()
    lake = open_lake(settings=settings)
    spec = find_spec(load_specs(settings.views), view)
    ctx, maintainer = prepare(lake, spec)
    row = commit.last_committed(lake, view)
    stored = lake.read(maintainer.state_tables(ctx)["result"], row.state_versions["result"] if row else None)
    report = run_suite(stored, spec, ctx.query)
    report.raise_if_failed()
    return {**summary, "expectations": report.evaluated}
