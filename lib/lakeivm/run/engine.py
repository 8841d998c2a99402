"""One maintenance run (docs/design/run.md): claim -> recover -> pin -> plan -> apply -> commit.

``run_view`` is the single code path behind the Airflow DAG, ``lakeivm refresh``, the Python API and
the tests. What reads a run's results lives beside it: ``reading`` (a view's rows), ``audit`` (a view
against its SQL), ``status``; what undoes an interrupted run: ``recovery``.
"""
from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from lakeivm.planning.auto import PROBE, probe_key, probe_limit
from lakeivm.sources import changes, upstream
from lakeivm.store import commit
from lakeivm.run import chains, recovery
from lakeivm.config import load_settings
from lakeivm.errors import ChangeRangeError, LakeIVMError, LeaseHeld, StateError, analysed_as, known_failure
from lakeivm.fingerprint import fingerprint
from lakeivm.store.lake import WRITER_TAG, Lake, open_lake  # noqa: F401 -- open_lake: where a run starts
from lakeivm.spec import FULL, ViewSpec
from lakeivm.spark import deployment
from lakeivm.sources.upstream import InjectedFailure, prepare, schemas_for  # noqa: F401 -- the run's API
from lakeivm.views.base import Context, Maintainer

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


def plan_run(ctx: Context, mode: str, pending: Mapping[str, int], history: Sequence[commit.LogRow] = (),
             tables: Iterable[str] | None = None, planned: Plan | None = None) -> Plan:
    """The tables to apply now: everything for an on-demand refresh, the planner's choice on a tick.

    ``tables`` forces an explicit (possibly asymmetric) choice, used by tests and benchmarks;
    ``planned`` is a tick's choice made for the view's chain (``run.chains``).
    """
    from lakeivm.planning.tick import plan_refresh, plan_tick

    behind = tuple(t for t in ctx.query.tables if ctx.pins[t] > ctx.watermarks[t])
    if tables is not None:
        chosen = tuple(t for t in ctx.query.tables if t in set(tables) and t in behind)
        return Plan(chosen, "tables chosen by the caller")
    if planned is not None:  # a table with commits but no change rows is caught up for free, as below
        return replace(planned, tables=tuple(t for t in behind if t in planned.tables or pending[t] == 0))
    backlog = {t: pending[t] for t in ctx.query.tables}
    calibrated = commit.calibrated_costs(ctx.lake, ctx.view)
    if mode == "refresh":
        decision = plan_refresh(history, backlog, ctx.spec.deadline_s, ctx.spec.options, calibrated,
                                small_delta_rows=ctx.lake.limits.small_delta_rows)
        return Plan(behind, decision.reason, decision.predicted_seconds)
    decision = plan_tick(history, backlog, ctx.spec.deadline_s, ctx.spec.options, _too_old(ctx), calibrated,
                         small_delta_rows=ctx.lake.limits.small_delta_rows)
    # A table with commits but no change rows (e.g. an OPTIMIZE) is caught up for free.
    chosen = tuple(t for t in behind if t in decision.apply or pending[t] == 0)
    reason = f"predicted refresh afterwards {decision.predicted_refresh_seconds_after:.3f} s -- {decision.reason}"
    return Plan(chosen, reason, decision.predicted_seconds)


def _too_old(ctx: Context) -> frozenset[str]:
    """Tables whose oldest pending commit is older than the spec's ``max_pending_age``."""
    return chains.too_old(ctx.lake, ctx.spec, ctx.watermarks, {t: ctx.pins[t] for t in ctx.query.tables})


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
    run: the planner chooses the tables) or ``rebuild`` (from snapshots). A query of the view Spark
    cannot analyse fails naming the view (``errors.analysed_as``).
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    with analysed_as(spec):
        return _run_view(lake, spec, mode, tables, fail_at, progress)


def run_views(lake: Lake, specs: Iterable[ViewSpec], mode: str = "refresh",
              progress: Callable[[str], None] = lambda message: None, share: bool = True) -> dict[str, commit.LogRow | None]:
    """One run of each view of ``specs`` and of every view they read, each once and after the views
    it reads, in this process: a change range several of them read is read once (``changes.sharing``).
    Each run is the view's own (a tick plans it alone, under its own deadline); {view: its log row}.
    The first run that fails stops the rest, its view named. ``share=False``: each view reads its
    changes as if it ran alone (``lakeivm bench reads``' baseline)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    order = list({one.name: one for spec in specs for one in chains.chain_of(spec)}.values())
    rows: dict[str, commit.LogRow | None] = {}
    with changes.sharing(lake, order if share else ()):
        for one in order:
            if not share:
                lake.forget_reads()
            with analysed_as(one):
                rows[one.name] = _run_view(lake, one, mode, None, None, progress, alone=True)
    return rows


def _run_view(lake: Lake, spec: ViewSpec, mode: str, tables: Iterable[str] | None, fail_at: str | None,
              progress: Callable[[str], None], asked: bool = True, alone: bool = False,
              refreshed: set[str] | None = None) -> commit.LogRow | None:
    # On demand: the views it reads first, each under its own claim. A tick follows their Assets and
    # reads what they last committed -- but runs one first that has no run of its definition to read yet.
    # auto over a split view: the view as declared recomputed in one query, or it and its split views maintained.
    # A tick of a view over views plans its chain jointly under its deadline (``run.chains``) where every view has runs to learn from.
    # ``alone``: the caller has run the views it reads (``run_views``); ``refreshed``: the views this
    # on-demand refresh has refreshed on its way (a view two of its views read is refreshed once).
    chain_started = time.perf_counter()
    whole, in_whole = _whole_or_split(lake, spec) if mode != "rebuild" and tables is None else (None, False)
    own = spec.whole if whole is not None and whole.full else spec
    chosen = whole and Chosen(whole.reason, whole.full != in_whole, whole.limit if whole.probe else None)
    chained = own.upstreams and tables is None and not alone
    with changes.sharing(lake, chains.chain_of(own) if chained and asked else ()):  # its chain's views read each change once
        if chained and mode == "tick" and chains.policy(own) == "joint":
            planned = chains.decide(lake, own)
            if planned is not None:
                return _chain_tick(lake, own, *planned, fail_at, progress, chosen, chain_started)
        # The chain's prediction and seconds are the view asked for's (its deadline is the chain's), not each upstream's on the way.
        predicted = chains.predicted_refresh(lake, own) if chained and asked and mode == "refresh" else None
        refreshed = set() if refreshed is None else refreshed
        ran = [_refresh_first(lake, up, progress, refreshed) for up in own.upstreams.values()
               if not alone and up.name not in refreshed and (mode != "tick" or not upstream.readable(lake, up))]
        chain = chains.ChainRun(chain_started, predicted and predicted[1]) if ran and asked else None
        row = _own_run(lake, own, mode, tables, fail_at, progress, chosen, chain=chain)
    if ran:  # the chain's seconds, beside the run's own (logged: its cost models, auto and the deadline read those)
        guess = f" (predicted {predicted[1]:.2f} s)" if predicted else ""
        progress(f"{spec.name}: with the {len(ran)} view(s) it reads refreshed first: {time.perf_counter() - chain_started:.2f} s in all{guess}")
    return row


def _refresh_first(lake: Lake, spec: ViewSpec, progress: Callable[[str], None], refreshed: set[str]) -> commit.LogRow | None:
    """An on-demand refresh of a view another view reads, on the way to that view's."""
    refreshed.add(spec.name)
    with analysed_as(spec):
        return _run_view(lake, spec, "refresh", None, None, progress, asked=False, refreshed=refreshed)


def _chain_tick(lake: Lake, spec: ViewSpec, decision, views: list[ViewSpec], fail_at: str | None,
                progress: Callable[[str], None], chosen: Chosen | None, started: float) -> commit.LogRow | None:
    """A tick of ``spec``'s chain as ``planning.chain.decide_chain`` chose: each view that applies
    something ticks with its inputs chosen, upstreams first; the view itself always runs, its log row
    carrying the chain's decision, seconds and prediction. ``views``: the chain's, as each runs
    (``chains.planned``: a split view auto last ran whole ticks whole)."""
    progress(f"{spec.name}: {decision}")
    for up in views[:-1]:
        if decision.apply[up.name]:
            planned = Plan(tuple(decision.apply[up.name]), f"the chain of {spec.name}: {decision.reason}",
                           decision.predicted_view_seconds.get(up.name, 0.0))
            try:
                with analysed_as(up):
                    _own_run(lake, up, "tick", None, None, progress, planned=planned)
            except LeaseHeld as held:  # its own DAG's run: this tick goes on with what that one commits
                progress(f"{up.name}: left to the run that holds it ({str(held).split(';')[0]})")
    own = Plan(tuple(decision.apply[spec.name]), str(decision), decision.predicted_view_seconds.get(spec.name, 0.0))
    return _own_run(lake, spec, "tick", None, fail_at, progress, chosen, planned=own,
                    chain=chains.ChainRun(started, decision.predicted_seconds))


@dataclass(frozen=True)
class Chosen:
    """auto's choice to run a split view whole or split (``_whole_or_split``): why, whether it switches,
    and the seconds a probe of the query as declared may take in this split run (None: no probe)."""

    reason: str
    switched: bool
    probe_limit: float | None = None


def _whole_or_split(lake: Lake, spec: ViewSpec):
    """auto's choice for a view split by ``with_derived_views`` (``planning.auto.choose_whole``), from the
    logs of the view and of the views split off it, and whether its last run was whole; (None, False)
    for any other view."""
    from lakeivm.planning.auto import BUILDS, choose_whole, maintaining_seconds, whole_probed

    if spec.whole is None or spec.refresh_policy != "auto":
        return None, False
    top, whole = commit.log_rows(lake, spec.name), fingerprint(spec.whole)
    chain, builds = {}, 0.0
    for one in (spec, *spec.split_off):
        definition = fingerprint(one)
        rows = [r for r in (top if one is spec else commit.log_rows(lake, one.name)) if r.fingerprint == definition]
        chain[one.name] = maintaining_seconds(rows)
        built = [r.seconds for r in rows if r.mode in BUILDS]
        builds = builds + built[-1] if built and builds is not None else None
    in_whole = bool(top) and top[-1].fingerprint == whole
    probed = whole_probed([r for r in top if r.fingerprint == fingerprint(spec)])
    return choose_whole(chain, [r.seconds for r in top if r.fingerprint == whole], builds, in_whole, probed), in_whole


def _own_run(lake: Lake, spec: ViewSpec, mode: str, tables: Iterable[str] | None, fail_at: str | None,
             progress: Callable[[str], None], chosen: Chosen | None = None, planned: Plan | None = None,
             chain: chains.ChainRun | None = None) -> commit.LogRow | None:
    """The view's own run, its upstreams refreshed: claim, then ``_run``; None when nothing is pending.
    ``planned``: a tick's tables chosen for its chain; ``chain``: what its log row records of the chain."""
    started = time.perf_counter()  # after the upstreams: a run logs its own seconds (its cost models, auto, the deadline)
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
        ctx.fingerprint, ctx.lease, ctx.progress, ctx.chain = definition, claim, progress, chain
        lake.spark.conf.set(WRITER_TAG, recovery.writer_tag(claim))  # every Delta commit of this run names it
        try:
            return _run(ctx, maintainer, claim, mode, tables, started, progress, chosen, planned)
        except Exception as err:  # a late write can also break the run before its commit: say so, not what broke
            late = None
            if ctx.bases and known_failure(err):
                with contextlib.suppress(Exception):  # the history unreadable too: the run's own error stands
                    late = recovery.late_write(ctx, maintainer)
            if late is not None:
                raise late from err
            raise
        finally:
            lake.spark.conf.unset(WRITER_TAG)
            ctx.release()


def _run(ctx: Context, maintainer: Maintainer, claim: commit.Lease, mode: str, tables: Iterable[str] | None,
         started: float, progress: Callable[[str], None], chosen: Chosen | None = None, planned: Plan | None = None) -> commit.LogRow | None:
    """run_view once the run holds the view's claim: recover, pin, plan, apply, commit. ``chosen``: auto's
    choice to run a split view whole or split (``_whole_or_split``), logged with the run."""
    whole_limit = chosen.probe_limit if chosen is not None else None  # probe the query as declared (a split view)
    switched, chosen = chosen is not None and chosen.switched, chosen.reason if chosen is not None else None
    lake, spec, definition, seq = ctx.lake, ctx.spec, ctx.fingerprint, claim.seq
    restored, last = recovery.recover(lake, commit.last_of(claim.history), maintainer.state_tables(ctx), claim)
    ctx.bases = recovery.state_heads(ctx, maintainer)
    if restored:
        progress(f"{spec.name}: recovered from an interrupted run ({'; '.join(restored)})")
    changed = last is not None and last.fingerprint is not None and last.fingerprint != definition
    in_full = ctx.auto and last is not None and last.kind == FULL  # auto recomputed the last run in full
    rekinded = last is not None and last.kind != maintainer.kind and not in_full  # e.g. a lakeivm upgrade maintains the SQL otherwise
    ctx.pins = changes.pin(lake, ctx.query.tables)
    ctx.table_ids = changes.identities(lake, ctx.query.tables)
    if last is None or mode == "rebuild" or changed or rekinded or set(last.watermarks) != set(ctx.query.tables):
        reason = ("first run" if last is None else "rebuild requested" if mode == "rebuild" else
                  chosen if changed and switched else
                  f"the view's definition changed (fingerprint {last.fingerprint} -> {definition})" if changed else
                  f"the view's kind changed ({last.kind} -> {maintainer.kind})" if rekinded else
                  "the view's tables changed")
        whole = changed and switched and maintainer.kind == FULL  # auto's first whole run: a recompute, not a rebuild
        return _bootstrap(ctx, maintainer, seq, "bootstrap" if last is None else mode if whole else "rebuild", reason, started, progress)
    replaced = changes.replaced(lake, last.table_ids, ctx.table_ids)
    if replaced is not None:  # a table deleted and created anew: its versions are not the ones the watermarks count
        return _unreadable(ctx, maintainer, last, seq, replaced, started, progress)
    ctx.watermarks = dict(last.watermarks)
    if maintainer.kind == FULL:
        return _recompute(ctx, maintainer, seq, mode, started, progress, chosen)
    gone = recovery.missing_state(ctx, maintainer, last)
    if gone is not None:
        raise gone
    pending = changes.pending(lake, ctx.watermarks, ctx.pins)
    here = deployment(lake.spark)
    committed = [r for r in claim.history if r.status == "committed" and r.deployment in (None, here)]
    own = [r for r in committed if r.kind == maintainer.kind]  # the incremental cost models learn from these
    probe = False
    plan = plan_run(ctx, mode, pending, history=own, tables=tables, planned=planned)
    if ctx.auto and tables is None and (plan.tables or in_full):
        same = [r for r in committed if r.fingerprint in (None, definition)]  # not costs of an earlier definition
        choice = _auto_mode(ctx, maintainer.kind, same, own, mode, pending, plan, in_full)
        reason = "; ".join(filter(None, (choice.reason, chosen)))
        if choice.full:
            from lakeivm.views.kinds import maintainer_for

            return _recompute(ctx, maintainer_for(FULL), seq, mode, started, progress, reason)
        if in_full:
            return _bootstrap(ctx, maintainer, seq, "rebuild", reason, started, progress)
        plan = replace(plan, reason=f"{plan.reason}; {choice.reason}")
        probe = choice.probe
    if chosen:
        plan = replace(plan, reason=f"{plan.reason}; {chosen}")
    if not plan.tables and mode == "tick":
        if not any(pending.values()):
            progress(f"{spec.name}: nothing to apply")
            return None
        progress(f"{spec.name}: {plan}")  # the planner batches: the decision is logged, state untouched
        return _commit(ctx, maintainer, seq, mode, plan, {}, started)
    try:
        applied, flushed = _apply(ctx, maintainer, plan, pending, progress)
    except ChangeRangeError as err:
        return _unreadable(ctx, maintainer, last, seq, err, started, progress)
    whole = ctx.spec.whole if whole_limit is not None else None  # (its probe stands for the view's own too)
    probed, key = None, PROBE
    if whole is not None or probe:
        seconds, stopped = _probe(ctx, whole_limit if whole is not None else probe_limit(plan.predicted_seconds or 0.0),
                                  progress, whole)
        probed, key = (seconds, flushed), probe_key(whole is not None, stopped)
    return _commit(ctx, maintainer, seq, mode, plan, applied, started, probe=probed, probe_key=key)


def _probe(ctx: Context, limit: float, progress: Callable[[str], None], whole: ViewSpec | None = None) -> tuple[float, bool]:
    """Seconds of the view's SQL on the run's snapshots, written as a recompute writes its result but
    to a scratch table under ``_system/probe/`` (deleted after): what a full recompute would cost auto
    (``planning.auto``), learned once. Its rows are written, not only computed: without the write a
    probe said 1.1 s for a recompute that took 2.5 s (an SCD2 history of 100,000 customers), and auto
    recomputed it for more than its incremental runs cost. It is interrupted after ``limit`` seconds
    (``auto.probe_limit``: past them a recompute cannot make this run's prediction switch), and then its
    seconds are a lower bound, logged as one (``auto.PROBE_STOPPED``). Returns (seconds, stopped).
    ``whole``: a split view's query as declared (``planning.auto.choose_whole``), on its own tables at
    their newest versions instead."""
    from lakeivm.spark import cancelled, interrupted_after
    from lakeivm.sql import as_written, referenced_tables
    from lakeivm.views.state import overwrite

    t0, interrupted, stopped = time.perf_counter(), None, False
    scratch = f"{ctx.lake.root}/_system/probe/{ctx.view}-{ctx.lease.run_id}"
    try:
        with interrupted_after(ctx.spark, limit, f"lakeivm-probe-{ctx.lease.run_id}") as interrupted:
            if whole is None:
                sql, sources = ctx.spec.sql, {t: ctx.snapshot(t, ctx.pins[t]) for t in ctx.query.tables}
            else:
                tables = sorted(referenced_tables(whole.sql))
                sql, sources = whole.sql, {t: ctx.snapshot(t, v) for t, v in changes.pin(ctx.lake, tables).items()}
            overwrite(ctx.lake, ctx.spark.sql(as_written(sql, sources)), scratch, max_rows=ctx.lake.limits.merge_rows)
        outcome = "probed a full recompute" if whole is None else "probed the query as declared, whole"
    except Exception as err:  # interrupted at the limit (an interrupted Spark operation raises)
        if interrupted is None or not interrupted.is_set() or not cancelled(err):
            raise  # its own failure (a file it cannot read, ...), also past the limit: the user must see it
        outcome, stopped = "stopped probing a full recompute (slower than the incremental run)", True
    finally:
        ctx.lake.delete(scratch)
    seconds = time.perf_counter() - t0
    progress(f"{ctx.view}: {outcome}: {seconds:.2f} s")
    return seconds, stopped


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
           progress: Callable[[str], None]) -> tuple[dict[str, tuple[int, float]], float]:
    """Apply the plan's tables; returns {table: (change-feed rows, seconds)} (the cost models' unit)
    and the seconds of the state's flush."""
    sources = {table: changes.source(ctx.lake, table) for table in plan.tables}
    for table, source in sources.items():  # every range readable before any state is written
        source.check_readable(ctx.watermarks[table], ctx.pins[table], ctx.query.columns_of(table))
    applied = {}
    for table, source in sources.items():
        t0 = time.perf_counter()
        delta, rows = source.read_counted(ctx.watermarks[table], ctx.pins[table], ctx.query.columns_of(table))
        ctx.delta_rows[table] = rows
        progress(f"{ctx.view}: applying {rows} netted changes of {source.span(ctx.watermarks[table], ctx.pins[table])}")
        if rows:
            maintainer.apply(ctx, table, delta)
        ctx.watermarks[table] = ctx.pins[table]
        applied[table] = (pending[table], time.perf_counter() - t0)
        ctx.lease.check()  # a run whose claim was taken over stops before writing more
    t0 = time.perf_counter()
    maintainer.flush(ctx)  # shared by the run's tables: the planner's run seconds, not a table's cost
    return applied, time.perf_counter() - t0


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
        view=ctx.view, seq=seq, status="failed", mode="tick", kind=maintainer.kind,
        pins=ctx.pins, watermarks=dict(last.watermarks) if last else {}, state_versions=dict(last.state_versions) if last else {},
        consistent=False, seconds=time.perf_counter() - started, message=str(err), plan="policy fail",
        table_ids=dict(last.table_ids) if last else {},
        fingerprint=ctx.fingerprint, deployment=deployment(ctx.spark), run_id=ctx.lease.run_id,
    )
    recovery.recover(ctx.lake, last, maintainer.state_tables(ctx))
    ctx.lease.commit(failed)
    raise err


def _commit(ctx: Context, maintainer: Maintainer, seq: int, mode: str, plan: Plan, applied: Mapping[str, tuple[int, float]],
            started: float, recomputed: Mapping[str, int] | None = None, probe: tuple[float, float] | None = None,
            probe_key: str = PROBE) -> commit.LogRow:
    """Append the run's committed log row. ``applied``: {table: (change rows, seconds)} applied as
    deltas; ``recomputed``: {table: change rows} a recomputation reflects (no seconds of its own);
    ``probe``: the seconds of a recompute timed for auto and of the run's flush, kept among the
    table seconds under ``probe_key`` (``planning.auto.PROBES``: ``full_seconds``, ``whole_probed``)."""
    from lakeivm.planning.auto import FLUSH

    lake = ctx.lake
    versions = {name: lake.head_version(path) for name, path in maintainer.state_tables(ctx).items()}
    late = recovery.late_write(ctx, maintainer, versions)  # never commit over another writer's commit
    if late is not None:
        raise late
    seconds = time.perf_counter() - started
    chain_seconds = None if ctx.chain is None else time.perf_counter() - ctx.chain.started
    pending = changes.pending(lake, ctx.watermarks, ctx.pins)
    row = commit.LogRow(
        view=ctx.view, seq=seq, status="committed", mode=mode, kind=maintainer.kind,
        pins=dict(ctx.pins), watermarks=dict(ctx.watermarks), state_versions=versions,
        consistent=all(ctx.watermarks[t] == ctx.pins[t] for t in ctx.pins),
        started_at=datetime.fromtimestamp(time.time() - seconds, timezone.utc), applied=tuple(applied) + tuple(recomputed or ()),
        delta_rows={**{t: r for t, (r, _) in applied.items()}, **(recomputed or {})},
        table_seconds={**{t: s for t, (_, s) in applied.items()}, **({probe_key: probe[0], FLUSH: probe[1]} if probe is not None else {})},
        pending_rows=pending, seconds=seconds,
        predicted_seconds=None if plan.predicted_seconds is None else float(plan.predicted_seconds), deadline_s=ctx.spec.deadline_s,
        deadline_met=(seconds <= ctx.spec.deadline_s) if mode == "refresh" else None, plan=str(plan),
        chain_seconds=chain_seconds, chain_predicted_seconds=None if ctx.chain is None else ctx.chain.predicted_seconds,
        chain_deadline_met=(chain_seconds <= ctx.spec.deadline_s) if mode == "refresh" and chain_seconds is not None else None,
        fingerprint=ctx.fingerprint, deployment=deployment(lake.spark), run_id=ctx.lease.run_id, table_ids=dict(ctx.table_ids),
    )
    ctx.checkpoint("before_log")
    ctx.lease.commit(row)
    return row
