"""Join-sample views on Spark: a uniform k-sample of a join's rows, kept by RSJoin on the driver.

The sampler (Dai, Hu, Yi SIGMOD 2024, Alg. 6) is sequential and stateful, so it runs on the driver:
each run collects the view's columns of the tables' snapshots and change rows. That is meant for the
sizes this kind serves (the join index is O(N) Python objects); the cost per run is O(N) to rebuild
the index plus O(log N) amortized per inserted row.

State (both versioned by the engine's commit protocol, so a crash rolls both back together):
``views/<view>/sample`` -- the result: exactly min(k, |join|) rows, each a join result (the SELECT
columns) with the source row ids ``<alias>_row_id`` (see ``plan`` for row identity) and its
reservoir slot; ``views/<view>/aux/sampler`` -- one row holding, as JSON, the query fingerprint, S,
w, q, the counters and the RNG state (docs/kinds/join_sample.md#restarts-and-exact-re-bootstrap).
The index is not stored: it is rebuilt at the start of each run from the snapshots at the
watermarks, in a canonical order, so it is exactly the index the stored state was saved with up to
bucket order, and a rerun after a crash replays the same random process.

Inserts follow the paper, table by table in the run's order. A change batch with deletes or updates
(a negative multiplicity) cannot be sampled incrementally (paper §2.2, hardness): the run then
re-bootstraps exactly from the snapshots at the new watermarks -- a uniform sample from exact join
counts and w from its Beta law (docs/kinds/join_sample.md#restarts-and-exact-re-bootstrap) -- says
so in a progress line of the run and records the reason in the state row.
"""
from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from lakeivm.errors import StateError
from lakeivm.columns import MULTIPLICITY
from lakeivm.views.base import Context, bag

from .plan import SamplePlan, plan_sample
from .view import SampleView

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

SLOT = "_lakeivm_slot"
STATE_DDL = "fingerprint STRING, event STRING, state STRING"


class JoinSampleMaintainer:
    """Keeps ``views/<view>/sample`` and its sampler state (see module doc)."""

    def __init__(self) -> None:
        self._view: SampleView | None = None
        self._rebootstrap: list[str] = []
        self._inserted: Counter = Counter()

    # -- protocol ------------------------------------------------------------------------------
    def state_tables(self, ctx: Context) -> Mapping[str, str]:
        return {"result": ctx.lake.view_path(ctx.view, "sample"), "sampler": ctx.lake.view_path(ctx.view, "aux/sampler")}

    def bootstrap(self, ctx: Context) -> None:
        plan = _plan(ctx)
        view = SampleView.bootstrap(plan, _snapshot(ctx, plan, ctx.pins), ctx.seed)
        self._write(ctx, view, f"bootstrap at {dict(ctx.pins)}: exact uniform sample, w ~ Beta(k, n-k+1)")

    def apply(self, ctx: Context, table: str, delta: DataFrame) -> None:
        plan = _plan(ctx)
        rows = _collect(delta, plan, table, MULTIPLICITY)
        removed = sum(-m for _, m, _ in rows if m < 0)
        if removed:
            self._rebootstrap.append(f"{removed} deleted or updated rows of {table}")
        elif not self._rebootstrap and self._loaded(ctx, plan) is not None:
            self._view.insert(table, rows)
            self._inserted[table] += sum(m for _, m, _ in rows)
        ctx.checkpoint(f"apply:{table}")

    def flush(self, ctx: Context) -> None:
        if self._rebootstrap:
            plan = _plan(ctx)
            reason = "; ".join(self._rebootstrap)
            stored = _stored_state(ctx)
            rng_from = stored if stored and stored.get("fingerprint") == plan.fingerprint() else None
            view = SampleView.bootstrap(plan, _snapshot(ctx, plan, ctx.watermarks), ctx.seed, rng_from)
            ctx.progress(f"{ctx.view}: re-bootstrapping the join sample exactly from the snapshots at {dict(ctx.watermarks)} ({reason})")
            self._write(ctx, view, f"re-bootstrap at {dict(ctx.watermarks)}: {reason}")
        elif self._view is not None:
            self._write(ctx, self._view, f"inserted {dict(self._inserted)} rows (RSJoin)")
        self._view, self._rebootstrap, self._inserted = None, [], Counter()

    def result(self, ctx: Context, version: int | None = None) -> DataFrame:
        plan = _plan(ctx)
        sample = ctx.lake.read(ctx.lake.view_path(ctx.view, "sample"), version)
        return sample.orderBy(SLOT).select(*[f"`{o.name}`" for o in plan.outputs], *plan.row_id_columns)

    def audit_sample(self, ctx: Context, expected: Counter, version: int) -> tuple[int, tuple, tuple]:
        """A sample is no SQL result: check that each row is a join result (as bags) and that there are
        min(k, |join|) rows; ``expected``: the SQL's rows at the watermarks as a bag (``bag``).
        Returns (rows, missing, unexpected)."""
        plan = _plan(ctx)
        sample = bag(self.result(ctx, version).select(*[f"`{o.name}`" for o in plan.outputs]))
        rows, size = sum(sample.values()), min(plan.k, sum(expected.values()))
        unexpected = list((sample - expected).elements())
        missing = list((expected - sample).elements())[:max(0, size - rows)] if rows < size else []
        if rows > size:
            unexpected.append(("<surplus sample rows>", rows - size))
        return rows, tuple(missing), tuple(unexpected)

    # -- state ---------------------------------------------------------------------------------
    def _loaded(self, ctx: Context, plan: SamplePlan) -> SampleView | None:
        """The sampler resumed at the run's start (watermarks not yet advanced by a non-empty apply)."""
        if self._view is None:
            stored = _stored_state(ctx)
            if stored is None or stored.get("fingerprint") != plan.fingerprint():
                self._rebootstrap.append("no stored sampler state" if stored is None else
                                         "the stored sample was drawn for another query or sample_size")
                return None
            self._view = SampleView.resume(plan, stored, _snapshot(ctx, plan, ctx.watermarks))
        return self._view

    def _write(self, ctx: Context, view: SampleView, event: str) -> None:
        plan = view.plan
        schema = _sample_schema(ctx, plan)
        ctx.spark.createDataFrame(view.records(), schema).write.format("delta").mode("overwrite") \
            .option("overwriteSchema", "true").save(ctx.lake.view_path(ctx.view, "sample"))
        ctx.checkpoint("flush:sample")
        row = [(plan.fingerprint(), event, json.dumps(view.to_state(), separators=(",", ":")))]
        ctx.spark.createDataFrame(row, STATE_DDL).write.format("delta").mode("overwrite") \
            .option("overwriteSchema", "true").save(ctx.lake.view_path(ctx.view, "aux/sampler"))
        ctx.checkpoint("flush:sampler")


def _plan(ctx: Context) -> SamplePlan:
    return plan_sample(ctx.query, ctx.spec.options, ctx.spec.source)


def _stored_state(ctx: Context) -> dict[str, Any] | None:
    path = ctx.lake.view_path(ctx.view, "aux/sampler")
    if not ctx.lake.is_delta(path):
        return None
    row = ctx.lake.read(path).first()
    if row is None:
        raise StateError(f"{path} holds no sampler state; rebuild the view (lakeivm refresh --rebuild)")
    return json.loads(row["state"])


def _snapshot(ctx: Context, plan: SamplePlan, versions: Mapping[str, int]) -> dict[str, list]:
    """Each table's distinct rows (view columns) with their counts and filter flags, at ``versions``."""
    out = {}
    for table, columns in plan.columns.items():
        counted = ctx.spark.read.table(ctx.snapshot(table, versions[table])).groupBy(*[f"`{c}`" for c in columns]).count()
        out[table] = _collect(counted, plan, table, "`count`")
    return out


def _collect(frame: DataFrame, plan: SamplePlan, table: str, multiplicity: str) -> list[tuple[tuple, int, tuple[bool, ...]]]:
    """(row, multiplicity, passes per slot) on the driver; filters are evaluated by Spark with SQL's NULL rule."""
    columns = plan.columns[table]
    flags = [" AND ".join(f"({f})" for f in s.filters) or "TRUE" for s in plan.slots_of(table)]
    frame = frame.selectExpr(*[f"`{c}`" for c in columns], f"{multiplicity} AS _m",
                             *[f"COALESCE({f}, FALSE) AS _in{i}" for i, f in enumerate(flags)])
    n = len(columns)
    return [(tuple(r[:n]), int(r[n]), tuple(r[n + 1:])) for r in frame.collect()]


def _sample_schema(ctx: Context, plan: SamplePlan):
    from pyspark.sql.types import IntegerType, StringType, StructField, StructType

    types = {t: {f.name: f.dataType for f in ctx.lake.read(ctx.lake.table_path(t)).schema.fields} for t in plan.columns}
    tables = {s.alias: s.table for s in plan.slots}
    fields = [StructField(SLOT, IntegerType(), False)]
    fields += [StructField(o.name, types[tables[o.alias]][plan.columns[tables[o.alias]][o.position]]) for o in plan.outputs]
    fields += [StructField(c, StringType(), False) for c in plan.row_id_columns]
    return StructType(fields)

