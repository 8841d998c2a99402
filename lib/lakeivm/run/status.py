"""``lakeivm status``: per view, its last run, what is pending, the predicted refresh, who holds it."""
from __future__ import annotations

import math
from collections.abc import Mapping

from lakeivm.sources import changes, upstream
from lakeivm.store import commit
from lakeivm.errors import LakeIVMError
from lakeivm.store.lake import Lake
from lakeivm.spec import FULL, ViewSpec
from lakeivm.sources.upstream import prepare


def status(lake: Lake, specs: Mapping[str, ViewSpec], lease_seconds: float = commit.LEASE_SECONDS) -> list[dict[str, object]]:
    """Per view: kind, last run, watermarks vs heads, pending rows per table, deadline; for a view a
    run holds, who holds it and its heartbeat's age (lapsing past ``lease_seconds``: ``commit.heartbeat``)."""
    report = []
    for spec in specs.values():
        entry: dict[str, object] = {"view": spec.name, "deadline_s": spec.deadline_s, "tick_s": spec.tick_s}
        rows = commit.log_rows(lake, spec.name, status=None)  # every row, oldest first: one read of the log
        history = [r for r in rows if r.status == "committed"]
        last = history[-1] if history else None
        ran = upstream.run_spec(spec, last)  # auto may have recomputed a split view as declared, whole
        if ran is not spec:
            history = [r for r in history if r.fingerprint == last.fingerprint]
        try:
            ctx, maintainer = prepare(lake, ran)
        except LakeIVMError as err:
            report.append({**entry, "error": str(err)})
            continue
        running = commit.holder(rows)
        if running is not None:
            entry.update(_claim_status(lake, running, lease_seconds))
        entry["kind"] = maintainer.kind
        entry["refresh_policy"] = spec.refresh_policy
        if spec.upstreams:  # views it reads: their "versions" are log seqs
            entry["upstreams"] = list(spec.upstreams)
        unbuilt = [name for name, up in spec.upstreams.items() if not upstream.readable(lake, up)]
        if unbuilt:  # a view it reads has no run (of its definition) yet: a fresh lake, not a fault
            entry["waiting_for"] = unbuilt
            if last is not None:
                entry["last_run"] = f"#{last.seq} {last.mode} at {last.finished_at:%Y-%m-%d %H:%M:%S} ({last.seconds:.1f}s)"
            report.append(entry)
            continue
        try:
            heads = changes.pin(lake, ctx.query.tables)
        except LakeIVMError as err:  # a table is gone, unreadable: this view's line says so
            report.append({**entry, "error": str(err)})
            continue
        if ctx.why_full:
            entry["why_full"] = ctx.why_full
        entry["heads"] = heads
        if last is None:
            entry.update(last_run=None, pending_rows={t: None for t in heads})
        else:
            from lakeivm.planning.auto import Estimate, full_seconds
            from lakeivm.planning.tick import plan_refresh

            pending = changes.pending(lake, last.watermarks, heads)
            if last.kind == FULL:  # a recomputation costs what the last ones did, whatever is pending
                estimate = full_seconds(history, maintainer.kind) or Estimate(last.seconds, "its last run")
                seconds, why = estimate.seconds, estimate.source
            else:
                own = [r for r in history if r.kind == last.kind]
                decision = plan_refresh(own, pending, spec.deadline_s, spec.options, commit.calibrated_costs(lake, spec.name),
                                        lake.limits.small_delta_rows)
                seconds, why = decision.predicted_seconds, decision.reason
            if ctx.auto or ran is not spec:  # the last run's choice between incremental and full, and why
                entry["last_mode"] = "whole" if ran is not spec else "full" if last.kind == FULL else "incremental"
            refreshes = [r for r in history if r.mode == "refresh" and r.deadline_met is not None]
            entry.update(
                last_run=f"#{last.seq} {last.mode} at {last.finished_at:%Y-%m-%d %H:%M:%S} ({last.seconds:.1f}s)",
                watermarks=dict(last.watermarks),
                pending_rows=pending,
                consistent=last.consistent,
                predicted_refresh_s=round(seconds, 3),
                refresh_prediction=why,
                last_plan=last.plan,
                deadline_record={"refreshes": len(refreshes), "met": sum(bool(r.deadline_met) for r in refreshes),
                                 "recent": [(r.seq, round(r.seconds, 1), r.deadline_met) for r in refreshes[-5:]]},
            )
            if spec.upstreams:  # the refresh its deadline bounds is its chain's
                entry.update(_chain_status(lake, ran, history))
        report.append(entry)
    return report


def _chain_status(lake: Lake, spec: ViewSpec, history: list[commit.LogRow]) -> dict[str, object]:
    """``status``'s entries of a view over views: its chain's predicted refresh and the record of the
    chain's on-demand refreshes against the view's deadline (``run.chains``)."""
    from lakeivm.run import chains

    predicted = chains.predicted_refresh(lake, spec)
    refreshes = [r for r in history if r.chain_deadline_met is not None]
    entry: dict[str, object] = {"chain_deadline_record": {
        "refreshes": len(refreshes), "met": sum(bool(r.chain_deadline_met) for r in refreshes),
        "recent": [(r.seq, round(r.chain_seconds, 1), None if r.chain_predicted_seconds is None else round(r.chain_predicted_seconds, 1),
                    r.chain_deadline_met) for r in refreshes[-5:]]}}
    if predicted is not None:
        entry["chain_predicted_refresh_s"] = round(predicted[1], 3)
    return entry


def _claim_status(lake: Lake, running: commit.LogRow, lease_seconds: float) -> dict[str, object]:
    """``status``'s entries of a view a run holds: a line, and the claim's holder, run and heartbeat age."""
    age, lapses = commit.heartbeat(lake, running, lease_seconds)
    lapsed = commit.stale(lake, running, lease_seconds)
    verdict = ("claim lapsed: the next run takes it over" if lapsed else
               f"lapses at {lapses:.0f} s; `lakeivm unlock {running.view} --force` ends it now")
    line = (f"#{running.seq} {running.mode} on {running.holder} (run {running.run_id[:8]}) since "
            f"{running.started_at:%Y-%m-%d %H:%M:%S}, last heartbeat {commit.ago(age)} ({verdict})")
    return {"running": line, "holder": running.holder, "run_id": running.run_id,
            "heartbeat_age_s": round(age, 1) if math.isfinite(age) else None, "lease_s": lapses, "claim_lapsed": lapsed}
