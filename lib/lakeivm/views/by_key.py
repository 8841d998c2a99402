"""A relation's rows of a few key values, read by delta-rs with a key filter in the run's process.

Where a run needs the rows of the keys its change touches -- a LEFT JOIN's preserved and padded
rows (first_order), a window's touched partitions (window), the stored groups a change updates, a
partition's kept top rows -- Spark would scan the relation or the result whole for a few thousand
keys. ``rows_with_keys`` reads a base table, or a view whose readers see its stored rows one by one
(``upstream.stored_rows``), ``stored_matching`` a view's own stored result, filtered by the keys as
``Lake.read_small`` reads (``docs/design/local-fast-paths.md``); else Spark reads them.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakeivm.columns import HIDDEN
from lakeivm.store import storage

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from lakeivm.views.base import Context
    from lakeivm.views.state import Readable


def located(ctx: Context, table: str, version: int) -> tuple[str, int, Readable | None] | None:
    """(Delta table, version, how its rows are read: None as they are) holding ``table``'s rows at
    ``version``: a base table's own; a view's result where its readers see its stored rows by its
    kind's ``readable`` (``upstream.stored_rows``; ``version`` is then its run's seq); else None."""
    from lakeivm.sources import upstream

    if table not in ctx.lake.upstreams:
        return ctx.lake.table_path(table), version, None
    if (table, version) not in ctx.located:  # asked per side and per read: its reader classifies the view's SQL
        ctx.located[table, version] = upstream.stored_rows(ctx.lake, ctx.lake.upstreams[table].spec, version)
    return ctx.located[table, version]


def rows_with_keys(ctx: Context, table: str, version: int, keys: Mapping[str, Sequence[pa.Array]], columns: list[str] | None,
                   within: Callable[[pa.Schema], pc.Expression | None] | None = None) -> tuple[pa.Table, str] | None:
    """The rows of ``table`` at ``version`` (a base table, or a view whose readers see its stored rows:
    ``located``) whose every column of ``keys`` is in each of its Arrow
    arrays (without NULLs: SQL's IN matches none) and that pass ``within`` (an Arrow filter made for
    the table's schema; None from it: Spark reads them), ``columns`` of them (None: all), read by delta-rs
    as ``Lake.read_small`` reads, with their Spark DDL (the table's own types); or None where the
    gate, its size or a key's type leave it to Spark. A run's terms ask for the same rows again (TPC-H
    Q21's lineitem by the same order keys four times, each a decode of the whole table): a read is
    kept for the run, and one of all the columns asked again answers for fewer."""
    if within is not None:
        return _with_ddl(_rows_with_keys(ctx, table, version, keys, columns, within))
    asked = (table, version, tuple(sorted((column, tuple(_values(a) for a in arrays)) for column, arrays in keys.items())))
    kept = ctx.read_by_key.setdefault(asked, [])
    found = next((held for held_columns, held in kept if held is None or held_columns is None
                  or columns is not None and set(columns) <= set(held_columns)), ...)
    if found is ...:
        found = _rows_with_keys(ctx, table, version, keys, columns, None)
        kept.append((None if columns is None else list(columns), found))
    if found is not None and columns is not None and found[0].column_names != list(columns):
        found = found[0].select(list(columns)), found[1]
    return _with_ddl(found)


def _values(array: pa.Array) -> tuple:
    """An array's distinct values, in order: a read's keys as a dict key."""
    return tuple(pc.unique(array).sort().to_pylist())


def _with_ddl(found: tuple[pa.Table, dict[str, str]] | None) -> tuple[pa.Table, str] | None:
    """(rows, {column: Spark type}) -> (rows, their Spark DDL)."""
    if found is None:
        return None
    rows, types = found
    return rows, ", ".join(f"`{name}` {types[name]}" for name in rows.column_names)


def _rows_with_keys(ctx: Context, table: str, version: int, keys: Mapping[str, Sequence[pa.Array]], columns: list[str] | None,
                    within: Callable[[pa.Schema], pc.Expression | None] | None) -> tuple[pa.Table, dict[str, str]] | None:
    """``rows_with_keys`` read: (rows, the table's {column: Spark type}), or None."""
    from deltalake import DeltaTable

    from lakeivm.store import fastpath

    where = located(ctx, table, version)
    if where is None:
        return None
    path, version, how = where
    try:
        found = DeltaTable(path, version=version)
        if not fastpath.admits(found) or storage.rows_in(found, unknown=ctx.lake.limits.scan_rows + 1) > ctx.lake.limits.scan_rows:
            return None
        schema = pa.schema(found.schema().to_arrow())
        if columns is None and how is not None:  # a view's readers see its stored columns but its own
            columns = [name for name in schema.names if not name.startswith(HIDDEN)]
        condition = None if within is None else within(schema)
        if within is not None and condition is None:
            return None
        for column, arrays in keys.items():
            kind = schema.field(column).type
            for array in arrays:
                if pa.types.is_floating(kind) or pa.types.is_floating(array.type):
                    return None
                one = storage.is_in(column, pc.unique(array), kind)
                condition = one if condition is None else condition & one
        if how is not None and how.where is not None:
            condition = pc.field(how.where) if condition is None else condition & pc.field(how.where)
        weight = None if how is None else how.weight
        extra = [weight] if weight is not None and (columns is None or weight not in columns) else []
        rows = found.to_pyarrow_dataset().to_table(columns=None if columns is None else columns + extra, filter=condition)
        if weight is not None:  # each stored row stands for its count of copies
            rows = rows.take(np.repeat(np.arange(rows.num_rows), rows[weight].to_numpy(zero_copy_only=False))).drop_columns(extra)
    except Exception:  # noqa: BLE001 -- a type Arrow cannot cast or compare, a file delta-rs cannot read: Spark reads it
        return None
    return rows, storage.spark_columns(found)


def stored_matching(ctx: Context, path: str, change: DataFrame, keys: Sequence[str]) -> DataFrame:
    """The stored rows of the table at ``path`` that may match ``change`` on ``keys``: a delta-rs scan
    in this process filtered by each key column's changed values (a superset; the join that reads it
    is exact), handed to Spark as local rows -- where Spark would scan a whole view to join a few
    thousand changed groups, most of a run's time for a large view. The whole table through Spark
    where the gate refuses it (``fastpath``), over the lake's ``limits.scan_rows`` rows, with no
    keys, or with a float key (a NaN matches as Spark's ``<=>`` has it only there)."""
    from deltalake import DeltaTable

    from lakeivm.sources.changes import plain_rows
    from lakeivm.store import fastpath
    from lakeivm.views.state import key_filter

    table = DeltaTable(path)
    schema = pa.schema(table.schema().to_arrow())
    if (not keys or not fastpath.admits(table) or any(pa.types.is_floating(schema.field(k).type) for k in keys)
            or storage.rows_in(table, unknown=ctx.lake.limits.scan_rows + 1) > ctx.lake.limits.scan_rows):
        return ctx.lake.read(path)
    changed = change.select(*[f"`{k}`" for k in keys]).toArrow()
    rows = table.to_pyarrow_dataset().to_table(filter=key_filter(changed, keys, schema))
    return storage.local_rows(ctx.spark, plain_rows(rows))
