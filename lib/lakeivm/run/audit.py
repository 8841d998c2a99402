"""Audits: a maintained view against its own SQL recomputed by Spark on the same snapshots."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from lakeivm.store import commit
from lakeivm.errors import analysed_as
from lakeivm.store.lake import Lake
from lakeivm.spec import ViewSpec
from lakeivm.sources.upstream import prepare, reader, run_spec
from lakeivm.views.base import bag

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


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
    row = commit.required_run(lake, spec.name, consistent=not latest, purpose="to audit")
    spec = run_spec(spec, row)  # the view as declared, where auto recomputed it whole
    with analysed_as(spec):
        ctx, maintainer = reader(lake, spec, row)
        ctx = replace(ctx, spark_reads_result=True)
        expected = bag(recompute(lake, spec, row.watermarks))
        if hasattr(maintainer, "audit_sample"):  # a sample: each row a join result, min(k, |join|) rows
            rows, missing, unexpected = maintainer.audit_sample(ctx, expected, row.state_versions["result"])
            return Audit(spec.name, row.watermarks, rows, missing, unexpected)
        actual = bag(maintainer.result(ctx, row.state_versions["result"]))
        missing, unexpected = close_enough(list((expected - actual).elements()), list((actual - expected).elements()))
        return Audit(spec.name, row.watermarks, sum(actual.values()), missing, unexpected)


RELATIVE = 1e-9  # how far apart two floating-point values of a row may be and still be one value


def close_enough(missing: list[tuple], unexpected: list[tuple]) -> tuple[tuple, tuple]:
    """``missing`` and ``unexpected`` less the pairs of rows equal but for floating-point values within
    ``RELATIVE`` of each other. Spark's own STDDEV or AVG over doubles is off in the last digits where
    a difference cancels most of them, and depends on the order it adds in: the 12 significant digits
    ``bag`` compares can hold its rounding error, not a maintained view's mistake."""
    unmatched = list(unexpected)
    kept = []
    for row in missing:
        twin = next((other for other in unmatched if len(other) == len(row) and all(map(_same, row, other))), None)
        if twin is None:
            kept.append(row)
        else:
            unmatched.remove(twin)
    return tuple(kept), tuple(unmatched)


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or abs(a - b) <= RELATIVE * max(abs(a), abs(b))
    return a == b
