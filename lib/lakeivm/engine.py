"""One maintenance run (ARCHITECTURE §4): lease -> recover -> pin -> plan -> apply -> commit.

``run_view`` is the single code path behind the Airflow DAG, ``lakeivm refresh`` and the tests.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from lakeivm import changes, commit
from lakeivm.config import Settings, load_settings
from lakeivm.errors import ChangeRangeError, LakeIVMError, StateError
from lakeivm.lake import Lake
from lakeivm.registry import ViewSpec, classify, find_spec, load_specs
from lakeivm.sql import recompute_sql
from lakeivm.views.base import Context, Maintainer

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# kind -> "module:class" of its maintainer, imported on first use (keeps DAG parsing light).
MAINTAINERS: dict[str, str] = {
    "first_order": "lakeivm.views.first_order:FirstOrderMaintainer",
    "triangle": "lakeivm.views.triangle.maintainer:TriangleMaintainer",
    "fivm": "lakeivm.views.fivm.maintainer:FivmMaintainer",
    "nested": "lakeivm.views.nested.maintainer:NestedMaintainer",
    "join_sample": "lakeivm.views.join_sample.maintainer:JoinSampleMaintainer",
}
MODES = ("tick", "refresh", "rebuild")


class InjectedFailure(LakeIVMError):
    """Raised by fault-injection tests at a named point of a run."""


@dataclass(frozen=True)
class Plan:
    """Which tables a run applies, and why."""

    tables: tuple[str, ...]
    reason: str
    predicted_seconds: float | None = None

    def __str__(self) -> str:
        return f"apply {', '.join(self.tables) or 'nothing'}: {self.reason}"


def open_lake(spark: SparkSession | None = None, settings: Settings | None = None) -> Lake:
    """The configured lake, with its system tables created if missing."""
    from lakeivm.spark import get_spark

    settings = settings or load_settings()
    lake = Lake(spark or get_spark(settings), settings.lake)
    lake.ensure_system_tables()
    return lake


def prepare(lake: Lake, spec: ViewSpec, fail_at: str | None = None) -> tuple[Context, Maintainer]:
    """Classify the view and build the run's context (pins and watermarks filled by run_view)."""
    kind, query = classify(spec, lake.table_schemas())

    def checkpoint(label: str) -> None:
        if fail_at == label:
            raise InjectedFailure(f"injected failure at {label}")

    ctx = Context(lake, spec, query, pins={}, watermarks={}, seed=int(spec.options.get("seed", 0)), checkpoint=checkpoint)
    return ctx, maintainer_for(kind)


def maintainer_for(kind: str) -> Maintainer:
    """A fresh maintainer of ``kind`` (see MAINTAINERS)."""
    import importlib

    module, name = MAINTAINERS[kind].split(":")
    maintainer = getattr(importlib.import_module(module), name)()
    maintainer.kind = kind
    return maintainer


def plan_run(ctx: Context, mode: str, pending: Mapping[str, int], tables: Iterable[str] | None = None) -> Plan:
    """The tables to apply now. An on-demand refresh applies everything; a tick, for now, too.

    ``tables`` forces an explicit (possibly asymmetric) choice, used by tests and by the DAG.
    """
    behind = tuple(t for t in ctx.query.tables if ctx.pins[t] > ctx.watermarks[t])
    if tables is not None:
        chosen = tuple(t for t in ctx.query.tables if t in set(tables) and t in behind)
        return Plan(chosen, "tables chosen by the caller")
    reason = "on-demand refresh: apply every table" if mode == "refresh" else "tick: apply every table with pending changes"
    return Plan(behind, reason)


def run_view(
    lake: Lake,
    spec: ViewSpec,
    mode: str = "tick",
    tables: Iterable[str] | None = None,
    fail_at: str | None = None,
    progress: Callable[[str], None] = lambda message: None,
) -> commit.LogRow | None:
    """Run one maintenance run of ``spec``; returns its committed log row (None: nothing to do)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    started = time.perf_counter()
    with commit.lease(lake, spec.name):
        ctx, maintainer = prepare(lake, spec, fail_at)
        history = commit.log_rows(lake, spec.name, status=None)
        last, seq = commit.last_of(history), commit.next_seq(history)
        restored = commit.recover(lake, last, maintainer.state_tables(ctx))
        if restored:
            progress(f"{spec.name}: recovered from an interrupted run ({'; '.join(restored)})")
        ctx.pins = changes.pin(lake, ctx.query.tables)
        if last is None or mode == "rebuild" or set(last.watermarks) != set(ctx.query.tables):
            reason = "first run" if last is None else ("rebuild requested" if mode == "rebuild" else "the view's tables changed")
            return _bootstrap(ctx, maintainer, seq, "bootstrap" if last is None else "rebuild", reason, started, progress)
        ctx.watermarks = dict(last.watermarks)
        pending = {t: changes.pending_rows(lake, t, ctx.watermarks[t], ctx.pins[t]) for t in ctx.query.tables}
        plan = plan_run(ctx, mode, pending, tables)
        if not plan.tables and mode == "tick":
            progress(f"{spec.name}: nothing to apply")
            return None
        try:
            applied = _apply(ctx, maintainer, plan, progress)
        except ChangeRangeError as err:
            return _unreadable(ctx, maintainer, last, seq, err, started, progress)
        return _commit(ctx, maintainer, seq, mode, plan, applied, started)


def _apply(ctx: Context, maintainer: Maintainer, plan: Plan, progress: Callable[[str], None]) -> dict[str, tuple[int, float]]:
    for table in plan.tables:
        changes.check_readable(ctx.lake, table, ctx.watermarks[table], ctx.pins[table], ctx.query.columns_of(table))
    applied = {}
    for table in plan.tables:
        t0 = time.perf_counter()
        delta = changes.read_delta(ctx.lake, table, ctx.watermarks[table], ctx.pins[table], ctx.query.columns_of(table))
        rows = delta.count()
        progress(f"{ctx.view}: applying {rows} netted changes of {table} (versions {ctx.watermarks[table] + 1}..{ctx.pins[table]})")
        if rows:
            maintainer.apply(ctx, table, delta)
        ctx.watermarks[table] = ctx.pins[table]
        applied[table] = (rows, time.perf_counter() - t0)
    maintainer.flush(ctx)
    return applied


def _bootstrap(ctx: Context, maintainer: Maintainer, seq: int, mode: str, reason: str, started: float, progress) -> commit.LogRow:
    progress(f"{ctx.view}: building from snapshots at {ctx.pins} ({reason})")
    maintainer.bootstrap(ctx)
    ctx.watermarks = dict(ctx.pins)
    return _commit(ctx, maintainer, seq, mode, Plan((), reason), {}, started)


def _unreadable(ctx: Context, maintainer: Maintainer, last: commit.LogRow | None, seq: int, err: ChangeRangeError,
                started: float, progress) -> commit.LogRow:
    if ctx.spec.on_unreadable_changes == "rebuild":
        progress(f"{ctx.view}: {err} -- rebuilding from snapshots (policy rebuild)")
        return _bootstrap(ctx, maintainer, seq, "rebuild", f"unreadable changes: {err}", started, progress)
    failed = commit.LogRow(
        view=ctx.view, seq=seq, status="failed", mode="tick", kind=_kind(maintainer),
        pins=ctx.pins, watermarks=dict(last.watermarks) if last else {}, state_versions=dict(last.state_versions) if last else {},
        consistent=False, seconds=time.perf_counter() - started, message=str(err), plan="policy fail",
    )
    commit.recover(ctx.lake, last, maintainer.state_tables(ctx))
    commit.append_log(ctx.lake, failed)
    raise err


def _commit(ctx: Context, maintainer: Maintainer, seq: int, mode: str, plan: Plan, applied: Mapping[str, tuple[int, float]],
            started: float) -> commit.LogRow:
    lake = ctx.lake
    versions = {name: lake.head_version(path) for name, path in maintainer.state_tables(ctx).items()}
    seconds = time.perf_counter() - started
    pending = {t: changes.pending_rows(lake, t, ctx.watermarks[t], ctx.pins[t]) for t in ctx.query.tables}
    row = commit.LogRow(
        view=ctx.view, seq=seq, status="committed", mode=mode, kind=_kind(maintainer),
        pins=dict(ctx.pins), watermarks=dict(ctx.watermarks), state_versions=versions,
        consistent=all(ctx.watermarks[t] == ctx.pins[t] for t in ctx.pins),
        started_at=datetime.fromtimestamp(time.time() - seconds, timezone.utc), applied=tuple(applied),
        delta_rows={t: r for t, (r, _) in applied.items()}, table_seconds={t: s for t, (_, s) in applied.items()},
        pending_rows=pending, seconds=seconds, predicted_seconds=plan.predicted_seconds, deadline_s=ctx.spec.deadline_s,
        deadline_met=(seconds <= ctx.spec.deadline_s) if mode == "refresh" else None, plan=str(plan),
    )
    ctx.checkpoint("before_log")
    commit.append_log(lake, row)
    return row


def _kind(maintainer: Maintainer) -> str:
    return maintainer.kind  # type: ignore[attr-defined]


def read_view(spark: SparkSession, view: str, latest: bool = False, settings: Settings | None = None) -> DataFrame:
    """The view as of its last consistent run (or, ``latest``, its newest, possibly asymmetric, run)."""
    settings = settings or load_settings()
    lake = open_lake(spark, settings)
    spec = find_spec(load_specs(settings.views), view)
    return view_snapshot(lake, spec, latest)


def view_snapshot(lake: Lake, spec: ViewSpec, latest: bool = False) -> DataFrame:
    """The view's rows at the state versions its last (consistent) committed log row names."""
    row = commit.last_committed(lake, spec.name, consistent=not latest)
    if row is None:
        raise StateError(f"view {spec.name!r} has no {'committed' if latest else 'consistent'} run yet; run `lakeivm refresh {spec.name}`.")
    ctx, maintainer = prepare(lake, spec)
    return maintainer.result(ctx, row.state_versions["result"])


def recompute(lake: Lake, spec: ViewSpec, versions: Mapping[str, int]) -> DataFrame:
    """The view's own SQL run by Spark on the snapshots at ``versions``: the oracle."""
    ctx, _ = prepare(lake, spec)
    sources = {r.alias: ctx.snapshot(r.table, versions[r.table]) for r in ctx.query.relations}
    return lake.spark.sql(recompute_sql(ctx.query, sources))


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
    expected = _bag(recompute(lake, spec, row.watermarks))
    ctx, maintainer = prepare(lake, spec)
    actual = _bag(maintainer.result(ctx, row.state_versions["result"]))
    missing = tuple(r for r in expected - actual)
    unexpected = tuple(r for r in actual - expected)
    return Audit(spec.name, row.watermarks, sum(actual.values()), missing, unexpected)


def _bag(df: DataFrame):
    from collections import Counter

    return Counter(tuple(normalize(v) for v in row) for row in df.collect())


def normalize(value: object) -> object:
    """Numbers compared to 12 significant digits (SUM/AVG of the state may differ in the last digit)."""
    from decimal import Decimal

    if isinstance(value, (float, Decimal)) and not isinstance(value, bool):
        return float(f"{float(value):.12g}")
    return value


def status(lake: Lake, specs: Mapping[str, ViewSpec]) -> list[dict[str, object]]:
    """Per view: kind, last run, watermarks vs heads, pending rows per table, deadline."""
    report = []
    for spec in specs.values():
        entry: dict[str, object] = {"view": spec.name, "deadline_s": spec.deadline_s, "tick_s": spec.tick_s}
        try:
            ctx, maintainer = prepare(lake, spec)
        except LakeIVMError as err:
            report.append({**entry, "error": str(err)})
            continue
        last = commit.last_committed(lake, spec.name)
        heads = changes.pin(lake, ctx.query.tables)
        entry["kind"] = _kind(maintainer)
        entry["heads"] = heads
        if last is None:
            entry.update(last_run=None, pending_rows={t: None for t in heads})
        else:
            entry.update(
                last_run=f"#{last.seq} {last.mode} at {last.finished_at:%Y-%m-%d %H:%M:%S} ({last.seconds:.1f}s)",
                watermarks=dict(last.watermarks),
                pending_rows={t: changes.pending_rows(lake, t, last.watermarks.get(t, -1), h) for t, h in heads.items()},
                consistent=last.consistent,
            )
        report.append(entry)
    return report
