"""Audits: a maintained view against its own SQL recomputed by Spark on the same snapshots."""
from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from lakeivm.store import commit
from lakeivm.errors import analysed_as
from lakeivm.store.lake import Lake
from lakeivm.spec import ViewSpec
from lakeivm.sources.upstream import prepare, reader, run_spec
from lakeivm.views.base import bag, normalize

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
        if actual != expected and _a_pick_among_ties(ctx, spec, row.watermarks, actual):
            expected = actual
        missing, unexpected = close_enough(list((expected - actual).elements()), list((actual - expected).elements()))
        return Audit(spec.name, row.watermarks, sum(actual.values()), missing, unexpected)


def _a_pick_among_ties(ctx, spec: ViewSpec, versions: Mapping[str, int], actual: Counter) -> bool:
    """Whether ``actual`` is one of the results the view's top-level ``ORDER BY ... LIMIT k`` may
    give on the snapshots at ``versions`` (``one_of_the_picks``): rows tied with the k-th on every
    ORDER BY column are taken in an order Spark leaves open, so the view and its recompute may keep
    different ones. False for a view without a top-k."""
    import operator
    from functools import reduce

    import sqlglot
    from pyspark.sql import functions as F
    from sqlglot import exp

    from lakeivm.errors import UnsupportedQuery
    from lakeivm.sql import DIALECT, as_written
    from lakeivm.sql.parse import top_k

    tree = sqlglot.parse_one(spec.sql, read=DIALECT)
    if not isinstance(tree, exp.Select):
        return False
    try:
        top, k = top_k(tree.copy(), spec.sql, spec.source)
    except UnsupportedQuery:  # ordered by an expression: not told apart here
        return False
    if k is None:
        return False
    tree.set("limit", None)
    rows = ctx.spark.sql(as_written(tree.sql(DIALECT), {t: ctx.snapshot(t, versions[t], oracle=True) for t in ctx.query.tables}))
    head = rows.limit(k).collect()
    if len(head) < k:
        return False
    names = [name for name, _, _ in top]
    tied = rows.where(reduce(operator.and_, [F.col(f"`{n}`").eqNullSafe(F.lit(head[-1][n])) for n in names]))
    at = [rows.columns.index(n) for n in names]
    return one_of_the_picks([_normalized(r) for r in head], [_normalized(r) for r in tied.collect()],
                            lambda row: tuple(row[i] for i in at), actual)


def _normalized(row) -> tuple:
    return tuple(normalize(v) for v in row)


def one_of_the_picks(head: list[tuple], tied: list[tuple], key, actual: Counter) -> bool:
    """Whether ``actual`` is k rows an ``ORDER BY ... LIMIT k`` may take: ``head`` is one such pick,
    in order (k rows), ``tied`` every row whose ``key`` equals the k-th's. Every row of ``head``
    ranked before the k-th's key must be in ``actual``; the rest of ``actual`` must be rows of that
    key, as many as ``head`` has."""
    last = key(head[-1])
    sure = Counter(r for r in head if key(r) != last)
    rest = actual - sure
    return not sure - actual and not rest - Counter(tied) and sum(rest.values()) == len(head) - sum(sure.values())


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
