"""Audits: a maintained view against its own SQL recomputed by Spark on the same snapshots."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from lakeivm.store import commit
from lakeivm.errors import analysed_as
from lakeivm.store.lake import Lake
from lakeivm.spec import ViewSpec
from lakeivm.sources.upstream import prepare, reader
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
    with analysed_as(spec):
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
