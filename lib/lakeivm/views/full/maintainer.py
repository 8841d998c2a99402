"""The full kind: the view's SQL recomputed on the pinned snapshots, its result replaced.

What Databricks calls a full refresh and Snowflake a full-mode dynamic table: the fallback that lets
any Spark SQL query over lake tables be a view (outer joins, set operations, CTEs, window functions,
ORDER BY ... LIMIT). It keeps no state but the result, so every run is a ``bootstrap``; the engine
never hands it a delta (``engine._recompute``). The run still goes through the commit protocol: one overwrite of the
result (a Delta commit, change data feed on), versioned by the log row, undone by recovery.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from lakeivm.store.lake import CDF
from lakeivm.sql import as_written
from lakeivm.views.base import Context
from lakeivm.views.state import Readable, overwrite, read_result

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


class FullMaintainer:
    """Keeps ``views/<view>/result``: the query's rows, rewritten whole by every run."""

    def state_tables(self, ctx: Context) -> Mapping[str, str]:
        return {"result": ctx.lake.view_path(ctx.view)}

    def bootstrap(self, ctx: Context) -> None:
        sources = {table: ctx.snapshot(table, ctx.pins[table]) for table in ctx.query.tables}
        rows = ctx.spark.sql(as_written(ctx.spec.sql, sources))  # also auto's recompute of an incremental view
        # written by delta-rs up to limits.merge_rows (a Spark write of 20,000 rows costs ~1 s here)
        overwrite(ctx.lake, rows, ctx.lake.view_path(ctx.view), max_rows=ctx.lake.limits.merge_rows, configuration={CDF: "true"})
        ctx.checkpoint("bootstrap:result")

    def apply(self, ctx: Context, table: str, delta: DataFrame) -> None:
        raise AssertionError("the full kind is recomputed, never handed a delta")

    def flush(self, ctx: Context) -> None:
        pass

    def result(self, ctx: Context, version: int | None = None) -> DataFrame:
        return read_result(ctx, version)

    def readable(self, ctx: Context) -> Readable:
        """Its stored rows are the result's row by row: it stores the query's rows as they are."""
        return Readable()
