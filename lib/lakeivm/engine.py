"""One maintenance run (ARCHITECTURE §4): lease -> recover -> pin -> plan -> apply -> commit.

``run_view`` is the single code path behind the Airflow DAG, ``lakeivm refresh`` and the tests.
"""
from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from lakeivm import changes, commit, storage, upstream
from lakeivm.config import Settings, load_settings
from lakeivm.errors import ChangeRangeError, LakeIVMError, StateError, known_failure
from lakeivm.fingerprint import fingerprint
from lakeivm.lake import WRITER_TAG, Lake
from lakeivm.spec import FULL, ViewSpec, find_spec
from lakeivm.spec_cache import cached_specs
from lakeivm.spark import deployment
from lakeivm.upstream import InjectedFailure, prepare, reader, schemas_for  # noqa: F401 -- the run's API
from lakeivm.views.base import Context, Maintainer, bag

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

MODES = ("tick", "refresh", "rebuild")


@dataclass(frozen=True)
class Plan:
    """Which tables a run applies, and why."""

    tables: tuple[str, ...]
    reason: str
    predicted_seconds: float | None = None

    def __str__(self) -> str:
        return f"apply {', '.join(self.tables) or 'nothing'}: {self.reason}"


def open_lake(spark: SparkSession | Callable[[], SparkSession] | None = None, settings: Settings | None = None) -> Lake:
    """The configured lake, with its system tables created if missing. Without ``spark`` the
    settings' session is made on first use (``Lake.spark``): a run with nothing to apply makes none."""
    from lakeivm.spark import get_spark

    settings = settings or load_settings()
    lake = Lake(spark or (lambda: get_spark(settings)), settings.lake)
    lake.ensure_system_tables()
    return lake


def plan_run(ctx: Context, mode: str, pending: Mapping[str, int], history: Sequence[commit.LogRow] = (),
             tables: Iterable[str] | None = None) -> Plan:
    """The tables to apply now: everything for an on-demand refresh, the planner's choice on a tick.

    ``tables`` forces an explicit (possibly asymmetric) choice, used by tests and benchmarks.
    """
    from lakeivm.planning.tick import plan_refresh, plan_tick

    behind = tuple(t for t in ctx.query.tables if ctx.pins[t] > ctx.watermarks[t])
    if tables is not None:
        chosen = tuple(t for t in ctx.query.tables if t in set(tables) and t in behind)
        return Plan(chosen, "tables chosen by the caller")
    backlog = {t: pending[t] for t in ctx.query.tables}
    calibrated = commit.calibrated_costs(ctx.lake, ctx.view)
    if mode == "refresh":
        decision = plan_refresh(history, backlog, ctx.spec.deadline_s, ctx.spec.options, calibrated)
        return Plan(behind, decision.reason, decision.predicted_seconds)
    decision = plan_tick(history, backlog, ctx.spec.deadline_s, ctx.spec.options, _too_old(ctx), calibrated)
    # A table with commits but no change rows (e.g. an OPTIMIZE) is caught up for free.
    chosen = tuple(t for t in behind if t in decision.apply or pending[t] == 0)
    reason = f"predicted refresh afterwards {decision.predicted_refresh_seconds_after:.3f} s -- {decision.reason}"
    return Plan(chosen, reason, decision.predicted_seconds)


def _too_old(ctx: Context) -> frozenset[str]:
    """Tables whose oldest pending commit is older than the spec's ``max_pending_age``."""
    limit = ctx.spec.max_pending_age_s
    if limit is None:
        return frozenset()
    return frozenset(t for t in ctx.query.tables
                     if changes.source(ctx.lake, t).pending_age_seconds(ctx.watermarks[t], ctx.pins[t]) > limit)


def run_view(
    lake: Lake,
    spec: ViewSpec,
    mode: str = "refresh",
    tables: Iterable[str] | None = None,
    fail_at: str | None = None,
    progress: Callable[[str], None] = lambda message: None,
) -> commit.LogRow | None:
    """Run one maintenance run of ``spec``; returns its committed log row (None: nothing to do).

    ``mode``: ``refresh`` (on demand, the default: apply every pending change), ``tick`` (a scheduled
    run: the planner chooses the tables) or ``rebuild`` (from snapshots).
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    started = time.perf_counter()
    # On demand: the views it reads first, each under its own claim. A tick follows their Assets and
    # reads what they last committed -- but runs one first that has no run of its definition to read yet.
    for up in spec.upstreams.values():
        if mode != "tick" or not upstream.readable(lake, up):
            run_view(lake, up, "refresh", progress=progress)
    upstream.register(lake, spec)
    definition = fingerprint(spec)
    if mode != "rebuild" and _up_to_date(lake, commit.log_rows(lake, spec.name, status=None), definition):
        progress(f"{spec.name}: nothing to apply")  # a no-op costs a listing per table: no Spark, no write
        return None
    lake.ensure_spark()  # there is work: the session before the claim, so a server that does not answer claims nothing
    with commit.lease(lake, spec.name, mode, load_settings().lease_seconds) as claim:
        if mode != "rebuild" and _up_to_date(lake, claim.history, definition):  # another run caught it up meanwhile
            progress(f"{spec.name}: nothing to apply")
            return None
        ctx, maintainer = prepare(lake, spec, fail_at)
        ctx.fingerprint, ctx.lease, ctx.progress = definition, claim, progress
        lake.spark.conf.set(WRITER_TAG, writer_tag(claim))  # every Delta commit of this run names it
        try:
            return _run(ctx, maintainer, claim, mode, tables, started, progress)
        except Exception as err:  # a late write can also break the run before its commit: say so, not what broke
            late = None
            if ctx.bases and known_failure(err):
                with contextlib.suppress(Exception):  # the history unreadable too: the run's own error stands
                    late = _late_write(ctx, maintainer)
            if late is not None:
                raise late from err
            raise
        finally:
            lake.spark.conf.unset(WRITER_TAG)
            ctx.release()


def writer_tag(claim: commit.Lease) -> str:
    """What a run's Delta commits carry as ``userMetadata`` (``_commit`` checks its state tables had no other writer)."""
    return f"lakeivm:{claim.view}:{claim.run_id}"


def _run(ctx: Context, maintainer: Maintainer, claim: commit.Lease, mode: str, tables: Iterable[str] | None,
         started: float, progress: Callable[[str], None]) -> commit.LogRow | None:
    """run_view once the run holds the view's claim: recover, pin, plan, apply, commit."""
    lake, spec, definition, seq = ctx.lake, ctx.spec, ctx.fingerprint, claim.seq
    restored, last = commit.recover(lake, commit.last_of(claim.history), maintainer.state_tables(ctx), claim)
    ctx.bases = _state_heads(ctx, maintainer)
    if restored:
        progress(f"{spec.name}: recovered from an interrupted run ({'; '.join(restored)})")
    changed = last is not None and last.fingerprint is not None and last.fingerprint != definition
    in_full = ctx.auto and last is not None and last.kind == FULL  # auto recomputed the last run in full
    rekinded = last is not None and last.kind != _kind(maintainer) and not in_full  # e.g. a lakeivm upgrade maintains the SQL otherwise
    ctx.pins = changes.pin(lake, ctx.query.tables)
    ctx.table_ids = changes.identities(lake, ctx.query.tables)
    if last is None or mode == "rebuild" or changed or rekinded or set(last.watermarks) != set(ctx.query.tables):
        reason = ("first run" if last is None else "rebuild requested" if mode == "rebuild" else
                  f"the view's definition changed (fingerprint {last.fingerprint} -> {definition})" if changed else
                  f"the view's kind changed ({last.kind} -> {_kind(maintainer)})" if rekinded else
                  "the view's tables changed")
        return _bootstrap(ctx, maintainer, seq, "bootstrap" if last is None else "rebuild", reason, started, progress)
    replaced = changes.replaced(lake, last.table_ids, ctx.table_ids)
    if replaced is not None:  # a table deleted and created anew: its versions are not the ones the watermarks count
        return _unreadable(ctx, maintainer, last, seq, replaced, started, progress)
    ctx.watermarks = dict(last.watermarks)
    if _kind(maintainer) == FULL:
        return _recompute(ctx, maintainer, seq, mode, started, progress)
    gone = _missing_state(ctx, maintainer, last)
    if gone is not None:
        raise gone
    pending = changes.pending(lake, ctx.watermarks, ctx.pins)
    here = deployment(lake.spark)
    committed = [r for r in claim.history if r.status == "committed" and r.deployment in (None, here)]
    own = [r for r in committed if r.kind == _kind(maintainer)]  # the incremental cost models learn from these
    probe = False
    plan = plan_run(ctx, mode, pending, history=own, tables=tables)
    if ctx.auto and tables is None and (plan.tables or in_full):
        same = [r for r in committed if r.fingerprint in (None, definition)]  # not costs of an earlier definition
        choice = _auto_mode(ctx, _kind(maintainer), same, own, mode, pending, plan, in_full)
        if choice.full:
            from lakeivm.kinds import maintainer_for

            return _recompute(ctx, maintainer_for(FULL), seq, mode, started, progress, choice.reason)
        if in_full:
            return _bootstrap(ctx, maintainer, seq, "rebuild", choice.reason, started, progress)
        plan = replace(plan, reason=f"{plan.reason}; {choice.reason}")
        probe = choice.probe
    if not plan.tables and mode == "tick":
        if not any(pending.values()):
            progress(f"{spec.name}: nothing to apply")
            return None
        progress(f"{spec.name}: {plan}")  # the planner batches: the decision is logged, state untouched
        return _commit(ctx, maintainer, seq, mode, plan, {}, started)
    try:
        applied = _apply(ctx, maintainer, plan, pending, progress)
    except ChangeRangeError as err:
        return _unreadable(ctx, maintainer, last, seq, err, started, progress)
    probed = _probe(ctx, plan.predicted_seconds or 0.0, progress) if probe else None
    return _commit(ctx, maintainer, seq, mode, plan, applied, started, probe=probed)


def _probe(ctx: Context, limit: float, progress: Callable[[str], None]) -> float:
    """Seconds of the view's SQL on the run's snapshots, computed to the end but not written (Spark's
    ``noop`` sink): what a full recompute would cost auto (``planning.auto``), learned once. It is
    interrupted after ``limit`` seconds (the incremental prediction: past it a recompute cannot win),
    and then its seconds are a lower bound, which is all auto needs."""
    from lakeivm.spark import cancelled, interrupted_after
    from lakeivm.sql import as_written

    t0, interrupted = time.perf_counter(), None
    try:
        with interrupted_after(ctx.spark, limit, f"lakeivm-probe-{ctx.lease.run_id}") as interrupted:
            sources = {t: ctx.snapshot(t, ctx.pins[t]) for t in ctx.query.tables}
            ctx.spark.sql(as_written(ctx.spec.sql, sources)).write.format("noop").mode("overwrite").save()
        outcome = "probed a full recompute"
    except Exception as err:  # interrupted at the limit (an interrupted Spark operation raises)
        if interrupted is None or not interrupted.is_set() or not cancelled(err):
            raise  # its own failure (a file it cannot read, ...), also past the limit: the user must see it
        outcome = "stopped probing a full recompute (slower than the incremental run)"
    seconds = time.perf_counter() - t0
    progress(f"{ctx.view}: {outcome}: {seconds:.2f} s")
    return seconds


def _auto_mode(ctx: Context, kind: str, committed: Sequence[commit.LogRow], own: Sequence[commit.LogRow], mode: str,
               pending: Mapping[str, int], plan: Plan, in_full: bool):
    """refresh_policy auto: recompute this run in full or maintain it incrementally (``planning.auto``).
    From full, both choices catch up everything (a recompute or a rebuild), so a tick compares them so."""
    from lakeivm.planning.auto import choose_mode

    incremental = plan.predicted_seconds
    if in_full and mode == "tick":
        incremental = plan_run(ctx, "refresh", pending, history=own).predicted_seconds
    return choose_mode(committed, kind, incremental, in_full)


def _up_to_date(lake: Lake, history: list[commit.LogRow], definition: str) -> bool:
    """Whether the view's last committed run has the current definition and every table is still
    at its watermark, and no run holds the view (a listing per table)."""
    last = commit.last_of(history)
    return last is not None and last.fingerprint in (None, definition) and commit.holder(history) is None and _caught_up(lake, last)


def _caught_up(lake: Lake, last: commit.LogRow) -> bool:
    """Whether every table of the last committed run is still at its watermark (one listing each;
    for a view read as a source, a read of its log) and still the table it read (its commit 0)."""
    return (last.consistent and changes.pin(lake, last.watermarks) == dict(last.watermarks)
            and changes.replaced(lake, last.table_ids) is None)


def _apply(ctx: Context, maintainer: Maintainer, plan: Plan, pending: Mapping[str, int],
           progress: Callable[[str], None]) -> dict[str, tuple[int, float]]:
    """Apply the plan's tables; returns {table: (change-feed rows, seconds)}: the cost models' unit."""
    for table in plan.tables:
        changes.source(ctx.lake, table).check_readable(ctx.watermarks[table], ctx.pins[table], ctx.query.columns_of(table))
    applied = {}
    for table in plan.tables:
        t0 = time.perf_counter()
        delta, rows = changes.source(ctx.lake, table).read_counted(ctx.watermarks[table], ctx.pins[table], ctx.query.columns_of(table))
        ctx.delta_rows[table] = rows
        span = changes.source(ctx.lake, table).span(ctx.watermarks[table], ctx.pins[table])
        progress(f"{ctx.view}: applying {rows} netted changes of {span}")
        if rows:
            maintainer.apply(ctx, table, delta)
        ctx.watermarks[table] = ctx.pins[table]
        applied[table] = (pending[table], time.perf_counter() - t0)
        ctx.lease.check()  # a run whose claim was taken over stops before writing more
    maintainer.flush(ctx)  # shared by the run's tables: the planner's run seconds, not a table's cost
    return applied


def _bootstrap(ctx: Context, maintainer: Maintainer, seq: int, mode: str, reason: str, started: float, progress) -> commit.LogRow:
    progress(f"{ctx.view}: building from snapshots at {ctx.pins} ({reason})")
    maintainer.bootstrap(ctx)
    ctx.watermarks = dict(ctx.pins)
    return _commit(ctx, maintainer, seq, mode, Plan((), reason), {}, started)


def _recompute(ctx: Context, maintainer: Maintainer, seq: int, mode: str, started: float, progress,
               reason: str | None = None) -> commit.LogRow:
    """A run of the full kind (or auto's choice, ``reason``): the view's SQL on the snapshots at the pins replaces its result."""
    behind = {t: rows for t, rows in changes.pending(ctx.lake, ctx.watermarks, ctx.pins).items() if ctx.pins[t] > ctx.watermarks[t]}
    progress(f"{ctx.view}: recomputing in full on snapshots at {ctx.pins} ({', '.join(behind)} changed)"
             + (f" -- {reason}" if reason else ""))
    maintainer.bootstrap(ctx)
    ctx.watermarks = dict(ctx.pins)
    return _commit(ctx, maintainer, seq, mode, Plan(tuple(behind), reason or f"recomputed in full: {ctx.why_full}"), {}, started,
                   recomputed=behind)


def _unreadable(ctx: Context, maintainer: Maintainer, last: commit.LogRow | None, seq: int, err: ChangeRangeError,
                started: float, progress) -> commit.LogRow:
    if ctx.spec.on_unreadable_changes == "rebuild":
        progress(f"{ctx.view}: {err} -- rebuilding from snapshots (policy rebuild)")
        return _bootstrap(ctx, maintainer, seq, "rebuild", f"unreadable changes: {err}", started, progress)
    failed = commit.LogRow(
        view=ctx.view, seq=seq, status="failed", mode="tick", kind=_kind(maintainer),
        pins=ctx.pins, watermarks=dict(last.watermarks) if last else {}, state_versions=dict(last.state_versions) if last else {},
        consistent=False, seconds=time.perf_counter() - started, message=str(err), plan="policy fail",
        table_ids=dict(last.table_ids) if last else {},
        fingerprint=ctx.fingerprint, deployment=deployment(ctx.spark), run_id=ctx.lease.run_id,
    )
    commit.recover(ctx.lake, last, maintainer.state_tables(ctx))
    ctx.lease.commit(failed)
    raise err


def _commit(ctx: Context, maintainer: Maintainer, seq: int, mode: str, plan: Plan, applied: Mapping[str, tuple[int, float]],
            started: float, recomputed: Mapping[str, int] | None = None, probe: float | None = None) -> commit.LogRow:
    """Append the run's committed log row. ``applied``: {table: (change rows, seconds)} applied as
    deltas; ``recomputed``: {table: change rows} a recomputation reflects (no seconds of its own);
    ``probe``: the seconds of a recompute timed for auto, kept among the table seconds."""
    from lakeivm.planning.auto import PROBE

    lake = ctx.lake
    versions = {name: lake.head_version(path) for name, path in maintainer.state_tables(ctx).items()}
    late = _late_write(ctx, maintainer, versions)  # never commit over another writer's commit
    if late is not None:
        raise late
    seconds = time.perf_counter() - started
    pending = changes.pending(lake, ctx.watermarks, ctx.pins)
    row = commit.LogRow(
        view=ctx.view, seq=seq, status="committed", mode=mode, kind=_kind(maintainer),
        pins=dict(ctx.pins), watermarks=dict(ctx.watermarks), state_versions=versions,
        consistent=all(ctx.watermarks[t] == ctx.pins[t] for t in ctx.pins),
        started_at=datetime.fromtimestamp(time.time() - seconds, timezone.utc), applied=tuple(applied) + tuple(recomputed or ()),
        delta_rows={**{t: r for t, (r, _) in applied.items()}, **(recomputed or {})},
        table_seconds={**{t: s for t, (_, s) in applied.items()}, **({PROBE: probe} if probe is not None else {})},
        pending_rows=pending, seconds=seconds,
        predicted_seconds=None if plan.predicted_seconds is None else float(plan.predicted_seconds), deadline_s=ctx.spec.deadline_s,
        deadline_met=(seconds <= ctx.spec.deadline_s) if mode == "refresh" else None, plan=str(plan),
        fingerprint=ctx.fingerprint, deployment=deployment(lake.spark), run_id=ctx.lease.run_id, table_ids=dict(ctx.table_ids),
    )
    ctx.checkpoint("before_log")
    ctx.lease.commit(row)
    return row


def _state_heads(ctx: Context, maintainer: Maintainer) -> dict[str, int]:
    """Each state table's newest version (-1: not written yet)."""
    return {name: ctx.lake.head_version(path) if ctx.lake.is_delta(path) else -1 for name, path in maintainer.state_tables(ctx).items()}


def _missing_state(ctx: Context, maintainer: Maintainer, last: commit.LogRow) -> StateError | None:
    """The error naming a state table that ``last`` (the committed run an incremental run goes on
    from) names but that is gone -- its folder deleted by hand -- or None: the changes would have
    nothing to be applied to. A rebuild makes every state table again from the snapshots."""
    paths = maintainer.state_tables(ctx)
    gone = [name for name in last.state_versions if ctx.bases.get(name) == -1]
    if not gone:
        return None
    name = gone[0]
    return StateError(f"view {ctx.view!r}: its state table {paths[name]} is gone (not a Delta table any more; run #{last.seq} "
                      f"committed its version {last.state_versions[name]}): it was deleted outside lakeivm. Rebuild the "
                      f"view: lakeivm refresh {ctx.view} --rebuild")


def _late_write(ctx: Context, maintainer: Maintainer, versions: Mapping[str, int] | None = None) -> StateError | None:
    """The error naming a state table's first commit since the run's recovery that the run did not
    make (up to ``versions``, default the heads), or None: the late write of a run that was killed
    (its Spark Connect operation went on without it) or paused past its claim, which the next run's
    recovery undoes. The run must not commit over it; it may also have broken the run before its
    commit (a write into the folder of an uncommitted table the recovery removed names files that
    are gone)."""
    mine, heads = writer_tag(ctx.lease), versions if versions is not None else _state_heads(ctx, maintainer)
    for name, path in maintainer.state_tables(ctx).items():
        head = heads[name]
        base = ctx.bases.get(name, -1)  # a table the run re-created (bootstrap) is checked from its first version
        foreign = [info for info in storage.history(path, base if head >= base else -1, head) if info["userMetadata"] != mine]
        if foreign:
            info = foreign[0]
            return StateError(
                f"view {ctx.view!r}: {path} version {info['version']} was written by {info['userMetadata'] or 'a writer outside lakeivm'} "
                f"({info['operation']}) while this run held the view -- the late write of a killed or paused run. "
                "This run commits nothing; refresh again (recovery undoes that write).")
    return None


def _kind(maintainer: Maintainer) -> str:
    return maintainer.kind  # type: ignore[attr-defined]


def read_view(spark: SparkSession, view: str, latest: bool = False, settings: Settings | None = None) -> DataFrame:
    """The view as of its last consistent run (or, ``latest``, its newest, possibly asymmetric, run)."""
    settings = settings or load_settings()
    lake = open_lake(spark, settings)
    spec = find_spec(cached_specs(settings.views, settings.lake), view)
    return view_snapshot(lake, spec, latest)


def view_snapshot(lake: Lake, spec: ViewSpec, latest: bool = False) -> DataFrame:
    """The view's rows at the state versions its last (consistent) committed log row names."""
    row = commit.last_committed(lake, spec.name, consistent=not latest)
    if row is None:
        raise StateError(f"view {spec.name!r} has no {'committed' if latest else 'consistent'} run yet; run `lakeivm refresh {spec.name}`.")
    ctx, maintainer = reader(lake, spec, row)
    return maintainer.result(ctx, row.state_versions["result"])


def recompute(lake: Lake, spec: ViewSpec, versions: Mapping[str, int]) -> DataFrame:
    """The view's own SQL, as its spec has it, run by Spark on the snapshots at ``versions``: the oracle."""
    from lakeivm.sql import as_written

    ctx, _ = prepare(lake, spec)
    return lake.spark.sql(as_written(spec.sql, {t: ctx.snapshot(t, versions[t], oracle=True) for t in ctx.query.tables}))


@dataclass(frozen=True)
class Audit:
    """The maintained view against its SQL recomputed at the view's watermarks."""

    view: str
    watermarks: Mapping[str, int]
    rows: int
    missing: tuple[tuple, ...]
    unexpected: tuple[tuple, ...]

    @property
    def ok(self) -> bool:
        return not self.missing and not self.unexpected

    def __str__(self) -> str:
        verdict = "no difference" if self.ok else f"{len(self.missing)} rows missing, {len(self.unexpected)} unexpected"
        return f"audit {self.view} at {dict(self.watermarks)}: {self.rows} rows, {verdict}"


def audit(lake: Lake, spec: ViewSpec, latest: bool = True) -> Audit:
    """Diff the view (newest committed run by default) with its SQL at that run's watermarks."""
    row = commit.last_committed(lake, spec.name, consistent=not latest)
    if row is None:
        raise StateError(f"view {spec.name!r} has no committed run to audit; run `lakeivm refresh {spec.name}`.")
    ctx, maintainer = reader(lake, spec, row)
    ctx = replace(ctx, spark_reads_result=True)
    expected = bag(recompute(lake, spec, row.watermarks))
    if hasattr(maintainer, "audit_sample"):  # a sample: each row a join result, min(k, |join|) rows
        rows, missing, unexpected = maintainer.audit_sample(ctx, expected, row.state_versions["result"])
        return Audit(spec.name, row.watermarks, rows, missing, unexpected)
    actual = bag(maintainer.result(ctx, row.state_versions["result"]))
    missing = tuple(r for r in expected - actual)
    unexpected = tuple(r for r in actual - expected)
    return Audit(spec.name, row.watermarks, sum(actual.values()), missing, unexpected)


def status(lake: Lake, specs: Mapping[str, ViewSpec], lease_seconds: float = commit.LEASE_SECONDS) -> list[dict[str, object]]:
    """Per view: kind, last run, watermarks vs heads, pending rows per table, deadline; for a view a
    run holds, who holds it and its heartbeat's age (lapsing past ``lease_seconds``: ``commit.heartbeat``)."""
    report = []
    for spec in specs.values():
        entry: dict[str, object] = {"view": spec.name, "deadline_s": spec.deadline_s, "tick_s": spec.tick_s}
        try:
            ctx, maintainer = prepare(lake, spec)
        except LakeIVMError as err:
            report.append({**entry, "error": str(err)})
            continue
        rows = commit.log_rows(lake, spec.name, status=None)  # every row, oldest first: one read of the log
        history = [r for r in rows if r.status == "committed"]
        last = history[-1] if history else None
        running = commit.holder(rows)
        if running is not None:
            entry.update(_claim_status(lake, running, lease_seconds))
        try:
            heads = changes.pin(lake, ctx.query.tables)
        except LakeIVMError as err:  # a view it reads has not run yet, a table is gone: this view's line says so
            report.append({**entry, "error": str(err)})
            continue
        entry["kind"] = _kind(maintainer)
        entry["refresh_policy"] = spec.refresh_policy
        if ctx.why_full:
            entry["why_full"] = ctx.why_full
        entry["heads"] = heads
        if spec.upstreams:  # views it reads: their "versions" are log seqs
            entry["upstreams"] = list(spec.upstreams)
        if last is None:
            entry.update(last_run=None, pending_rows={t: None for t in heads})
        else:
            from lakeivm.planning.auto import full_seconds
            from lakeivm.planning.tick import plan_refresh

            pending = changes.pending(lake, last.watermarks, heads)
            if last.kind == FULL:  # a recomputation costs what the last ones did, whatever is pending
                seconds, why = full_seconds(history, _kind(maintainer))
            else:
                own = [r for r in history if r.kind == last.kind]
                decision = plan_refresh(own, pending, spec.deadline_s, spec.options, commit.calibrated_costs(lake, spec.name))
                seconds, why = decision.predicted_seconds, decision.reason
            if ctx.auto:  # the last run's choice between incremental and full, and why
                entry["last_mode"] = "full" if last.kind == FULL else "incremental"
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
        report.append(entry)
    return report


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
