"""The window kind's maintainer: the partitions a change touches, recomputed and replaced.

The partition-recompute rule (``docs/kinds/window.md``): every window of the view is partitioned by
P, so a change to rows of partition p changes only p's window outputs. A run takes K, the distinct P
values of the relation's netted change (NULL matching NULL), recomputes the view's own SQL over the
relation's snapshot at the pin restricted to K (a LEFT SEMI JOIN before any window is computed),
and replaces the result rows of K with those rows in one commit (a small result rewritten by delta-rs,
else a Delta MERGE). Cost per run: the touched
partitions' rows, read, windowed and rewritten; the rest of the result is not read.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from lakeivm.columns import MULTIPLICITY
from lakeivm.store.lake import CDF
from lakeivm.sql import as_written, backquoted
from lakeivm.views.base import Context
from lakeivm.views.state import keys_in, overwrite, read_if_small, read_result
from lakeivm.views.window.shape import partition_of

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

_OP = "_lakeivm_op"  # in the MERGE's source: "d" a touched partition's key, "i" a recomputed row


class WindowMaintainer:
    """Keeps ``views/<view>/result``: the query's rows, stored as they are, replaced partition by partition."""

    def __init__(self) -> None:
        self._pending: list[tuple[DataFrame, DataFrame]] = []  # (touched keys as result columns, their recomputed rows)

    def state_tables(self, ctx: Context) -> Mapping[str, str]:
        return {"result": ctx.lake.view_path(ctx.view)}

    def bootstrap(self, ctx: Context) -> None:
        sources = {table: ctx.snapshot(table, ctx.pins[table]) for table in ctx.query.tables}
        rows = ctx.spark.sql(as_written(ctx.spec.sql, sources))
        overwrite(ctx.lake, rows, ctx.lake.view_path(ctx.view), configuration={CDF: "true"})
        ctx.checkpoint("bootstrap:result")

    def apply(self, ctx: Context, table: str, delta: DataFrame) -> None:
        """Recompute the partitions ``delta`` touches on ``table``'s snapshot at the pin (``flush`` writes them)."""
        from pyspark.sql import functions as F

        p = partition_of(ctx.query, ctx.spec.source)
        touched = delta.select(*[F.col(f"`{c}`") for c in p.columns]).distinct()
        snapshot = ctx.spark.table(ctx.snapshot(table, ctx.pins[table])).alias("r")
        on = [F.col(f"r.`{c}`").eqNullSafe(F.col(f"k.`{c}`")) for c in p.columns]
        name = f"lakeivm_{ctx.view}_{table}_touched"
        snapshot.join(touched.alias("k"), on, "left_semi").createOrReplaceTempView(name)
        rows = ctx.spark.sql(as_written(ctx.spec.sql, {table: name})).localCheckpoint(eager=True)
        ctx.spark.catalog.dropTempView(name)
        keys = touched.select(*[F.col(f"`{c}`").alias(o) for c, o in zip(p.columns, p.outputs)])
        self._pending.append((keys, rows))

    def flush(self, ctx: Context) -> None:
        """Replace the touched partitions' result rows with their recomputed rows in one commit: a small
        result rewritten whole by delta-rs in this process (a Spark MERGE costs seconds however few
        rows it touches), a larger one by one MERGE."""
        pending, self._pending = self._pending, []
        path, outputs = ctx.lake.view_path(ctx.view), partition_of(ctx.query, ctx.spec.source).outputs
        for keys, rows in pending:  # one relation: one apply per run
            stored = read_if_small(ctx.lake, path)
            if stored is None or not _replace_locally(ctx, path, stored[1], keys, rows, outputs):
                _merge(ctx, path, keys, rows, outputs)
            ctx.checkpoint("flush:result")

    def result(self, ctx: Context, version: int | None = None) -> DataFrame:
        return read_result(ctx, version)

    def result_changes(self, ctx: Context, changes: DataFrame) -> DataFrame | None:
        """The changes of ``result``: the stored rows' own (a row is stored as the view has it)."""
        return changes.select(*[f"`{c}`" for c in changes.columns if not c.startswith("_lakeivm_")], MULTIPLICITY)


def _replace_locally(ctx: Context, path: str, stored, keys: DataFrame, rows: DataFrame, outputs: tuple[str, ...]) -> bool:
    """The stored rows (Arrow) less the partitions ``keys`` holds, plus ``rows``, written by delta-rs;
    False (nothing written) where it cannot write them."""
    import pyarrow as pa

    touched = set(keys_in(keys.toArrow(), outputs))
    kept = stored.filter(pa.array([key not in touched for key in keys_in(stored, outputs)], pa.bool_()))
    try:
        ctx.lake.overwrite_small(path, pa.concat_tables([kept, rows.toArrow().select(stored.column_names).cast(stored.schema)]),
                                 stored.schema)
    except Exception:  # noqa: BLE001 -- a type delta-rs does not write, raised before its commit
        return False
    return True


def _merge(ctx: Context, path: str, keys: DataFrame, rows: DataFrame, outputs: tuple[str, ...]) -> None:
    """One Delta MERGE: the result rows whose partition ``keys`` holds deleted, ``rows`` inserted."""
    from pyspark.sql import functions as F

    source = keys.withColumn(_OP, F.lit("d")).unionByName(rows.withColumn(_OP, F.lit("i")), allowMissingColumns=True)
    on = " AND ".join([f"s.{_OP} = 'd'", *(f"t.{backquoted(o)} <=> s.{backquoted(o)}" for o in outputs)])
    columns = [backquoted(c) for c in rows.columns]
    ctx.lake.merge(path, source, on, "WHEN MATCHED THEN DELETE",
                   f"WHEN NOT MATCHED AND s.{_OP} = 'i' THEN INSERT ({', '.join(columns)}) VALUES ({', '.join('s.' + c for c in columns)})")
