"""The window kind's maintainer: the partitions a change touches, recomputed and replaced.

The partition-recompute rule (``docs/kinds/window.md``): every window of the view is partitioned by
P, so a change to rows of partition p changes only p's window outputs. A run takes K, the distinct P
values of the relation's netted change (NULL matching NULL), recomputes the view's own SQL over the
relation's snapshot at the pin restricted to K (a LEFT SEMI JOIN before any window is computed),
and replaces the result rows of K with those rows in one commit (a small result rewritten by delta-rs,
else a Delta MERGE). Where every window looks back along one ascending column O (``shape._looked_back``),
a row before its partition's first changed O keeps its values, so only the rows from there on are
replaced: an append rewrites the appended rows; where no window reads more than N rows back
(``shape._reach``), only those rows and the N before them are read and windowed. Cost per run: the
touched partitions' rows, read and windowed; the rows replaced, written; the rest of the result is
not read.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from lakeivm.store import storage
from lakeivm.store.lake import CDF
from lakeivm.sql import as_written, backquoted
from lakeivm.views.base import Context
from lakeivm.views.by_key import located, rows_with_keys, stored_matching
from lakeivm.views.state import Readable, keys_in, overwrite, quoted, read_if_small, read_result
from lakeivm.views.window.shape import Partition, partition_of

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

_OP = "_lakeivm_op"  # in the MERGE's source: "d" a touched partition's key, "i" a recomputed row
_FROM = "_lakeivm_from"  # a touched partition's first changed O, where the windows look back along O
# ``_frames_joined``: a row from its partition's first changed O on, its number in the partition, the first such
# row's number, the last row's number, the number of the new row whose frame a repeat of a row is in, an aggregate over a frame
_BOUND = "_lakeivm_bound"  # ``_top_candidates``: a touched partition's lowest kept O (NULL: read it whole)
_NEW, _ROW, _FIRST, _LAST, _TARGET, _FRAME = (
    "_lakeivm_new", "_lakeivm_row", "_lakeivm_first", "_lakeivm_last", "_lakeivm_target", "_lakeivm_frame")


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
        columns = [F.col(f"`{c}`") for c in p.columns]
        if p.order is None:
            touched = delta.select(*columns).distinct()
        else:  # each partition's first changed O (NULL: a change at a NULL O, the whole partition)
            o = F.col(f"`{p.order[0]}`")
            touched = delta.groupBy(*columns).agg(F.when(F.max(o.isNull()), F.lit(None)).otherwise(F.min(o)).alias(_FROM))
        local = _touched_rows(ctx, table, touched, p)
        snapshot = (local if local is not None else ctx.spark.table(ctx.snapshot(table, ctx.pins[table]))).alias("r")
        on = _same("r", "k", p.columns)
        name = f"lakeivm_{ctx.view}_{table}_touched"
        sql = ctx.spec.sql
        if p.top is not None:
            (_top_from_result if p.top.stored is not None else _top_candidates)(ctx, snapshot, delta, touched, p).createOrReplaceTempView(name)
        elif p.order is None or p.reach is None:
            snapshot.join(touched.alias("k"), on, "left_semi").createOrReplaceTempView(name)
        elif p.sliding:
            sql = _frames_joined(snapshot.join(touched.alias("k"), on), p, sql, name)
        else:
            _within_reach(snapshot.join(touched.alias("k"), on), p).createOrReplaceTempView(name)
        rows = ctx.spark.sql(as_written(sql, {table: name}))
        keys = touched.select(*[F.col(f"`{c}`").alias(o) for c, o in zip(p.columns, p.outputs)], *([_FROM] if p.order else []))
        if p.order is not None and not p.sliding:  # only the rows from each partition's first changed O on can differ
            on = _same("r", "k", p.outputs)
            rows = rows.alias("r").join(keys.alias("k"), on).where(
                F.col(f"k.{_FROM}").isNull() | (F.col(f"r.`{p.order[1]}`") >= F.col(f"k.{_FROM}"))).select("r.*")
        rows = rows.localCheckpoint(eager=True)
        ctx.spark.catalog.dropTempView(name)
        self._pending.append((keys, rows, p.order is not None and p.one_to_one and _appended_at_the_end(delta, rows, p)))

    def flush(self, ctx: Context) -> None:
        """Replace the touched partitions' result rows with their recomputed rows in one commit: a small
        result rewritten whole by delta-rs in this process (a Spark MERGE costs seconds however few
        rows it touches), a larger one by one MERGE."""
        pending, self._pending = self._pending, []
        path, p = ctx.lake.view_path(ctx.view), partition_of(ctx.query, ctx.spec.source)
        for keys, rows, appended in pending:  # one relation: one apply per run
            if appended:
                _append(ctx, path, rows)
                ctx.checkpoint("flush:result")
                continue
            stored = read_if_small(ctx.lake, path)
            if stored is None or not _replace_locally(ctx, path, stored[1], keys, rows, p):
                if not _merge_locally(ctx, path, keys, rows, p):
                    _merge(ctx, path, keys, rows, p)
            ctx.checkpoint("flush:result")

    def result(self, ctx: Context, version: int | None = None) -> DataFrame:
        return read_result(ctx, version)

    def readable(self, ctx: Context) -> Readable:
        """Its stored rows are the result's row by row (a row is stored as the view has it)."""
        return Readable()


def _touched_rows(ctx: Context, table: str, touched: DataFrame, p: Partition) -> DataFrame | None:
    """The relation's rows at the pin of the partitions ``touched`` names (their P, as relation
    columns), read by delta-rs filtered by those P values (``by_key.rows_with_keys``: a superset,
    each column filtered on its own; the joins that read them are exact) and handed to Spark as local
    rows -- where Spark would scan the relation whole for the few thousand customers an SCD2 history's
    batch touches. None, and Spark reads the relation, where a touched P is NULL (a key filter
    matches none), where its first column's statistics put the rows read above
    ``limits.reduced_rows`` or half the relation (every symbol's new market day: Spark's scan costs no
    more) or say nothing (not an integer column), or where ``rows_with_keys`` declines."""
    where = located(ctx, table, ctx.pins[table])
    if where is None:
        return None
    try:
        rows, bounds = storage.distinct_bounds(where[0])
    except Exception:  # noqa: BLE001 -- a table delta-rs cannot read: Spark reads it
        return None
    distinct = bounds.get(p.columns[0])
    if not distinct:  # decided before the keys are collected: no Spark job for a partition column without bounds
        return None
    keys = touched.select(*[f"`{c}`" for c in p.columns]).toArrow()
    if any(keys[c].null_count for c in p.columns):
        return None
    if rows * keys.num_rows / distinct > min(ctx.lake.limits.reduced_rows, rows / 2):
        return None
    found = rows_with_keys(ctx, table, ctx.pins[table], {c: [keys[c]] for c in p.columns}, None)
    return None if found is None else storage.local_rows(ctx.spark, *found)


def _top_candidates(ctx: Context, snapshot: DataFrame, delta: DataFrame, touched: DataFrame, p: Partition) -> DataFrame:
    """The rows of the touched partitions (``touched``: their P; ``snapshot``, the relation at the pin, as ``r``) a recompute
    of their top rows reads (``Partition.top``). A partition whose change only inserts rows or deletes
    rows strictly below its kept ones keeps its first rows among those kept and those inserted: its
    rows at or above its lowest kept O (the bound; ties too) and its inserted rows below it. Any other
    partition (a kept row deleted or updated, a kept O NULL, nothing kept) is read whole. Where every
    touched partition has a bound, the scan is filtered by the lowest one as a literal, so that Delta
    skips the files of older rows: a new market day per symbol reads the last days' files, not the
    history."""
    from pyspark.sql import functions as F

    from lakeivm.columns import MULTIPLICITY

    top, columns = p.top, [F.col(f"`{c}`") for c in p.columns]
    keys = touched.select(*[F.col(f"`{c}`").alias(o) for c, o in zip(p.columns, p.outputs)])
    stored = stored_matching(ctx, ctx.lake.view_path(ctx.view), keys, p.outputs).select(
        *[F.col(f"`{o}`").alias(c) for c, o in zip(p.columns, p.outputs)], F.col(f"`{top.output}`").alias(_BOUND))
    lowest = F.min(_BOUND) if top.descending else F.max(_BOUND)
    bounds = (stored.join(touched, [stored[c].eqNullSafe(touched[c]) for c in p.columns], "left_semi").groupBy(*columns)
              .agg(F.when(F.max(F.col(_BOUND).isNull()), F.lit(None)).otherwise(lowest).alias(_BOUND)))

    def above(rows: str, keys: str):  # O at or above the partition's bound in the window's order
        o, bound = F.col(f"{rows}.`{top.order}`"), F.col(f"{keys}.{_BOUND}")
        return o.isNotNull() & (o >= bound if top.descending else o <= bound)

    o, bound = F.col(f"d.`{top.order}`"), F.col(f"b.{_BOUND}")
    below = o.isNotNull() & (o < bound if top.descending else o > bound)  # its deletion changes no kept row
    keys = (delta.alias("d").join(bounds.alias("b"), _same("d", "b", p.columns), "left")
            .groupBy(*[F.col(f"d.`{c}`").alias(c) for c in p.columns])
            .agg(F.when(F.max((F.col(f"d.{MULTIPLICITY}") < 0) & ~F.coalesce(below, F.lit(False))), F.lit(None))
                 .otherwise(F.first(bound)).alias(_BOUND))
            .localCheckpoint(eager=True))
    whole, lowest_bound = keys.agg(F.max(F.col(_BOUND).isNull()), (F.min if top.descending else F.max)(F.col(_BOUND)).cast("string")).first()
    if not whole and lowest_bound is not None:  # a literal Delta's file statistics can skip by
        kind = snapshot.schema[top.order].dataType
        literal = F.lit(lowest_bound).cast(kind)
        o = F.col(f"r.`{top.order}`")
        snapshot = snapshot.where(o >= literal if top.descending else o <= literal)
    relation = [c for c in delta.columns if c != MULTIPLICITY]  # the columns the query reads
    read = (snapshot.join(keys.alias("k"), _same("r", "k", p.columns)).where(F.col(f"k.{_BOUND}").isNull() | above("r", "k"))
            .select(*[F.col(f"r.`{c}`") for c in relation]))
    inserted = (delta.alias("d").join(keys.alias("k"), _same("d", "k", p.columns))
                .where(F.col(f"k.{_BOUND}").isNotNull() & ~F.coalesce(above("d", "k"), F.lit(False)) & (F.col(f"d.{MULTIPLICITY}") > 0))
                .select(*[F.col(f"d.`{c}`") for c in relation],
                        F.explode(F.sequence(F.lit(1), F.col(f"d.{MULTIPLICITY}").cast("int"))).alias(_BOUND))
                .drop(_BOUND))
    return read.unionByName(inserted)


def _top_from_result(ctx: Context, snapshot: DataFrame, delta: DataFrame, touched: DataFrame, p: Partition) -> DataFrame:
    """The rows of the touched partitions a recompute of their top rows reads, where the result holds
    every column the query reads (``Top.stored``). A partition none of whose kept rows the change
    deletes keeps its first rows among its kept rows and its inserted rows (a row never kept stays
    below n kept ones, whatever the order): those are read, its kept rows from the result (a delta-rs
    scan filtered by the touched keys: ``stored_matching``). A partition that loses a kept row is
    read whole from ``snapshot`` (the relation at the pin, as ``r``)."""
    from pyspark.sql import functions as F

    from lakeivm.columns import MULTIPLICITY

    read = [c for c, _ in p.top.stored]
    keys = touched.select(*[F.col(f"`{c}`").alias(o) for c, o in zip(p.columns, p.outputs)])
    stored = stored_matching(ctx, ctx.lake.view_path(ctx.view), keys, p.outputs)
    kept = (stored.select(*[F.col(f"`{o}`").alias(c) for c, o in p.top.stored]).alias("r")
            .join(touched.alias("k"), _same("r", "k", p.columns), "left_semi"))
    m = F.col(f"d.{MULTIPLICITY}")
    lost = (delta.alias("d").where(m < 0).join(kept.alias("r"), _same("d", "r", read), "left_semi")
            .select(*[F.col(f"d.`{c}`").alias(c) for c in p.columns]).distinct().localCheckpoint(eager=True))
    inserted = (delta.alias("d").where(m > 0)
                .select(*[F.col(f"d.`{c}`") for c in read], F.explode(F.sequence(F.lit(1), m.cast("int"))).alias(MULTIPLICITY))
                .drop(MULTIPLICITY))
    rows = kept.unionByName(inserted)
    if lost.isEmpty():
        return rows
    whole = snapshot.join(lost.alias("k"), _same("r", "k", p.columns), "left_semi").select(*[F.col(f"r.`{c}`") for c in read])
    return rows.alias("r").join(lost.alias("k"), _same("r", "k", p.columns), "left_anti").unionByName(whole)


def _same(left: str, right: str, columns) -> list:
    """``left``'s ``columns`` equal ``right``'s, NULL matching NULL."""
    from pyspark.sql import functions as F

    return [F.col(f"{left}.`{c}`").eqNullSafe(F.col(f"{right}.`{c}`")) for c in columns]


def _appended_at_the_end(delta: DataFrame, rows: DataFrame, p: Partition) -> bool:
    """Whether ``delta`` only inserts rows after every stored row of its partitions (a new market day
    per symbol), so that replacing the rows from each partition's first changed O on deletes nothing
    and appends ``rows``: the change inserts only, at non-NULL O, and the rows recomputed from the
    first changed O on (one per relation row: ``Partition.one_to_one``) are as many as it inserts --
    none of them was there before."""
    from pyspark.sql import functions as F

    from lakeivm.columns import MULTIPLICITY

    m, o = F.col(MULTIPLICITY), F.col(f"`{p.order[0]}`")
    inserted, least, null_order = delta.agg(F.sum(m), F.min(m), F.max(o.isNull())).first()
    return least is not None and least > 0 and not null_order and rows.count() == inserted


def _append(ctx: Context, path: str, rows: DataFrame) -> None:
    """``rows`` appended to the result in one commit: by delta-rs in this process where the gate lets
    it write the table and they are at most ``limits.merge_rows``, else by Spark."""
    import pyarrow as pa

    from lakeivm.store import fastpath

    table, most = fastpath.load(path, write=True), ctx.lake.limits.merge_rows
    local = None if table is None else rows.limit(most + 1).toArrow()
    if local is not None and local.num_rows <= most:
        schema = pa.schema(table.schema().to_arrow())
        try:
            ctx.lake.write_small(path, local.select(schema.names).cast(schema), "append")
            return
        except Exception:  # noqa: BLE001 -- a type Arrow cannot cast or delta-rs does not write, raised before its commit
            pass
    columns = ctx.lake.read(path).columns
    rows.select(*[f"`{c}`" for c in columns]).write.format("delta").mode("append").save(path)


def _within_reach(joined: DataFrame, p: Partition) -> DataFrame:
    """The touched partitions' rows (``joined``: the relation ``r`` joined with each partition's first
    changed O ``k``) a recompute of their rows from that O on reads, where no window reads more than
    the N = ``p.reach`` rows before a row (``shape._reach``): those from the first changed O on and the
    last N before it (their peers at the N-th too). A 52-week high windows a year of rows per symbol,
    not its whole history."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    before = _before_first_change(p)
    o = F.col(f"r.`{p.order[0]}`")
    back = Window.partitionBy(*[F.col(f"r.`{c}`") for c in p.columns], before).orderBy(o.desc_nulls_last())
    return (joined.withColumn("_lakeivm_back", F.when(before, F.rank().over(back)))
            .where(~before | (F.col("_lakeivm_back") <= p.reach)).select("r.*"))


def _before_first_change(p: Partition):
    """Whether a row of ``joined`` (``_within_reach``) lies before its partition's first changed O (NULLs first)."""
    from pyspark.sql import functions as F

    o = F.col(f"r.`{p.order[0]}`")
    return F.col(f"k.{_FROM}").isNotNull() & (o.isNull() | (o < F.col(f"k.{_FROM}")))


def _frames_joined(joined: DataFrame, p: Partition, sql: str, name: str) -> str:
    """``sql`` computing the rows of ``joined`` (``_within_reach``) from each partition's first changed
    O on, where every window is an aggregate over the n rows before a row and itself
    (``Partition.sliding``): the rows are numbered in their partition, each row within N rows of the
    first new one is repeated once for every new row whose frame holds it, and the aggregates are
    taken per new row over its repeats, registered as ``name`` with the row's columns; ``sql`` reads
    them in place of its windows. Spark's sliding frame aggregates the whole frame again at every row
    it computes, the N rows before a partition's first change too: N^2/2 rows per partition (66,000
    for a symbol's 52-week high, for one new day), against N per new row here, in one aggregation (a
    join of each new row with its frame's rows shuffled both sides: twice the time). The same
    aggregate functions over the same rows: the same values and types. Returns the SQL to run over
    ``name``."""
    import sqlglot
    from pyspark.sql import Window
    from pyspark.sql import functions as F
    from sqlglot import exp

    from lakeivm.sql import DIALECT, named_outputs
    from lakeivm.views.window.shape import sliding_frames

    tree = named_outputs(sqlglot.parse_one(sql, dialect=DIALECT))
    frames = sliding_frames(tree)
    columns = joined.select("r.*").columns
    partition = [F.col(f"r.`{c}`") for c in p.columns]
    ordered = Window.partitionBy(*partition).orderBy(F.col(f"r.`{p.order[0]}`").asc_nulls_first())
    whole = Window.partitionBy(*[F.col(f"`{c}`") for c in p.columns])
    new = ~_before_first_change(p)
    row, first, target = F.col(_ROW), F.col(_FIRST), F.col(_TARGET)
    numbered = (joined.select("r.*", new.alias(_NEW), F.row_number().over(ordered).alias(_ROW))
                .withColumn(_FIRST, F.min(F.when(F.col(_NEW), row)).over(whole))  # the rows from the first new one on are new
                .withColumn(_LAST, F.max(row).over(whole))
                .where(row >= first - p.reach))  # a new row's frame lies within the N rows before the first new one
    repeated = numbered.withColumn(_TARGET, F.explode(F.sequence(F.greatest(first, row), F.least(F.col(_LAST), row + p.reach))))
    aggregates = []
    for i, (window, func, n) in enumerate(frames):
        argument = "1" if isinstance(func.this, exp.Star) else func.this.sql(DIALECT)
        aggregates.append(F.expr(f"{func.key}(CASE WHEN {_ROW} >= {_TARGET} - {n} THEN {argument} END)").alias(f"{_FRAME}{i}"))
        window.replace(exp.column(f"{_FRAME}{i}"))
    carried = [F.first(F.when(row == target, F.col(f"`{c}`")), ignorenulls=True).alias(c) for c in columns if c not in p.columns]
    (repeated.groupBy(*[F.col(f"`{c}`") for c in p.columns], target).agg(*carried, *aggregates)
     .select(*[f"`{c}`" for c in columns], *[f"{_FRAME}{i}" for i in range(len(frames))])
     .createOrReplaceTempView(name))
    return tree.sql(dialect=DIALECT)


def _replace_locally(ctx: Context, path: str, stored, keys: DataFrame, rows: DataFrame, p: Partition) -> bool:
    """The stored rows (Arrow) less those ``keys`` replaces (their partitions, from the partition's
    first changed O on where the windows look back along O), plus ``rows``, written by delta-rs; False
    (nothing written) where it cannot write them."""
    import pyarrow as pa

    keys = keys.toArrow()
    first = dict(zip(keys_in(keys, p.outputs), keys[_FROM].to_pylist() if p.order else [None] * keys.num_rows))
    order = stored[p.order[1]].to_pylist() if p.order else [None] * stored.num_rows
    kept = stored.filter(pa.array([key not in first or (first[key] is not None and _before(o, first[key]))
                                   for key, o in zip(keys_in(stored, p.outputs), order)], pa.bool_()))
    try:
        ctx.lake.overwrite_small(path, pa.concat_tables([kept, rows.toArrow().select(stored.column_names).cast(stored.schema)]),
                                 stored.schema)
    except Exception:  # noqa: BLE001 -- a type delta-rs does not write, raised before its commit
        return False
    return True


def _before(value, first) -> bool:
    """``value`` < ``first`` in Spark's ascending order: NULL first, NaN last."""
    return value is None or (value == value and (first != first or value < first))


def _merge_locally(ctx: Context, path: str, keys: DataFrame, rows: DataFrame, p: Partition) -> bool:
    """``_merge`` by delta-rs in this process, for a result of at most ``limits.local_merge_rows``
    rows and at most ``limits.merge_rows`` recomputed rows (a Spark MERGE costs seconds however few
    rows it replaces); False (nothing written) where the gate refuses the table, or a partition or
    order column is a float (NaN compares as Spark has it only there)."""
    import pyarrow as pa

    from lakeivm.store import fastpath

    limits = ctx.lake.limits
    table = fastpath.load(path, write=True)
    if table is None or storage.rows_in(table, unknown=limits.local_merge_rows + 1) > limits.local_merge_rows:
        return False
    schema = pa.schema(table.schema().to_arrow())
    compared = [*p.outputs, *([p.order[1]] if p.order else [])]
    if any(pa.types.is_floating(schema.field(c).type) for c in compared):
        return False
    inserted = rows.limit(limits.merge_rows + 1).toArrow()
    if inserted.num_rows > limits.merge_rows:
        return False
    touched = keys.toArrow()
    order = [pa.field(_FROM, schema.field(p.order[1]).type)] if p.order else []
    wide = pa.schema([*schema, pa.field(_OP, pa.string()), *order])

    def widened(part: pa.Table, op: str) -> pa.Table:
        n = part.num_rows
        columns = {f.name: part[f.name].cast(f.type) if f.name in part.column_names else pa.nulls(n, f.type) for f in wide}
        columns[_OP] = pa.array([op] * n, pa.string())
        return pa.table(columns, schema=wide)

    source = pa.concat_tables([widened(touched, "d"), widened(inserted.select(schema.names).cast(schema), "i")])
    on = " AND ".join([f"s.{_OP} = 'd'", *(f"(t.{quoted(o)} IS NOT DISTINCT FROM s.{quoted(o)})" for o in p.outputs)])
    if p.order:
        on += f" AND (s.{_FROM} IS NULL OR t.{quoted(p.order[1])} >= s.{_FROM})"
    (ctx.lake.merger(table, source, on).when_matched_delete()
     .when_not_matched_insert({c: f"s.{quoted(c)}" for c in schema.names}, predicate=f"s.{_OP} = 'i'").execute())
    return True


def _merge(ctx: Context, path: str, keys: DataFrame, rows: DataFrame, p: Partition) -> None:
    """One Delta MERGE: the result rows ``keys`` replaces deleted (``_replace_locally``), ``rows`` inserted."""
    from pyspark.sql import functions as F

    source = keys.withColumn(_OP, F.lit("d")).unionByName(rows.withColumn(_OP, F.lit("i")), allowMissingColumns=True)
    on = " AND ".join([f"s.{_OP} = 'd'", *(f"t.{backquoted(o)} <=> s.{backquoted(o)}" for o in p.outputs)])
    if p.order:
        on += f" AND (s.{_FROM} IS NULL OR t.{backquoted(p.order[1])} >= s.{_FROM})"
    columns = [backquoted(c) for c in rows.columns]
    ctx.lake.merge(path, source, on, "WHEN MATCHED THEN DELETE",
                   f"WHEN NOT MATCHED AND s.{_OP} = 'i' THEN INSERT ({', '.join(columns)}) VALUES ({', '.join('s.' + c for c in columns)})")
