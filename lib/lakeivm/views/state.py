"""Additive state tables: Delta tables of keys + ring payloads, changed by adding deltas.

Every auxiliary relation and view of the factorized and skew-aware kinds is a K-relation over a
ring whose + is column-wise addition (ℤ for IVM^ε, the payload rings of F-IVM): a row's payload is
added to, and a key whose payloads all reach zero is deleted. Within a run, deltas are buffered
(locally checkpointed) and the table is read as *stored ⊎ buffered deltas* without aggregating:
joins and sums are linear in the payload, so duplicate keys are harmless there. ``flush`` MERGEs
the summed delta once per run; the engine's commit protocol versions the table.

An ``append_only`` table (for readers that only join and sum it, like F-IVM's views) skips the
MERGE: a run appends its summed delta (one cheap commit; a Delta MERGE costs seconds even for a
handful of rows), so the stored table is itself a bag whose per-key sums are the state. It is
compacted -- rewritten consolidated -- when its appended rows outgrow COMPACT_RATIO of the rows
at its last rewrite or when COMPACT_COMMITS appends have piled up (cost amortized over the runs).

A small table (at most the lake's ``limits.rewrite_rows`` rows), append-only or not, is read by
delta-rs in the calling process (once per run) and rewritten whole by it on flush, the change added
on the driver (``add_rows``): Spark takes no snapshot of a table that changes every run.
"""
from __future__ import annotations

from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lakeivm.store import storage
from lakeivm.store.lake import Lake

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from lakeivm.views.base import Context


class AdditiveTable:
    """One Delta table of ``keys`` + additive ``payloads`` with buffered deltas (see module doc)."""

    def __init__(self, lake: Lake, path: str, keys: Sequence[str], payloads: Sequence[str], alive: str | None = None,
                 append_only: bool = False, local_rows: int | None = None) -> None:
        self.lake, self.path = lake, path
        self.local_rows = local_rows  # rows up to which the table is read and rewritten by delta-rs (None: limits.rewrite_rows)
        self.keys, self.payloads = tuple(keys), tuple(payloads)
        self.alive = alive  # the payload whose zero means the key is gone (default: all payloads zero)
        self.append_only = append_only
        self._deltas: list[DataFrame] = []
        self._replacement: DataFrame | None = None
        self._small: tuple | None = None  # (Arrow rows or None,): the stored table read once, then what flush rewrote
        self._columns: dict[str, str] = {}  # {column: Spark type} of the stored table, read with it
        self._small_frame: DataFrame | None = None
        self._loaded = None  # the stored table loaded by delta-rs (its log read once until the table is written)
        self._scans = None  # (that loaded table, its pyarrow dataset or None)

    def stored_arrow(self):
        """The stored rows as an Arrow table in this process if the table is small (at most
        ``local_rows``, by its statistics) and delta-rs may read and rewrite it (``fastpath``), else
        None. Read once (one run's maintainer is the table's only writer); after a flush that
        rewrote it small, the rows it wrote. Spark takes no snapshot of a table that changes every run."""
        if self._small is None:
            from lakeivm.store import storage
            from lakeivm.store.lake import read_with_delta_rs

            read = read_with_delta_rs(self.path, self._local_rows(), table=self._delta_table(), write=True)
            if read is not None:
                self._columns = storage.spark_columns(read[0])
            self._small, self._small_frame = (None if read is None else read[1],), None
        return self._small[0]

    def stored_small(self) -> tuple[DataFrame, object] | None:
        """``stored_arrow`` and the same rows as a Spark frame of local rows (``read_if_small``)."""
        rows = self.stored_arrow()
        if rows is None:
            return None
        if self._small_frame is None:
            ddl = ", ".join(f"`{name}` {kind}" for name, kind in self._columns.items())
            self._small_frame = storage.local_rows(self.lake.spark, rows, ddl)
        return self._small_frame, rows

    def _local_rows(self) -> int:
        return self.lake.limits.rewrite_rows if self.local_rows is None else self.local_rows

    def current(self) -> DataFrame:
        """Stored rows ⊎ buffered deltas, as a bag (the same key may occur several times)."""
        if self._replacement is not None:
            base = self._replacement
        else:  # local rows up to limits.rewrite_rows: a larger table in this process is not shipped back to Spark
            rows = self.stored_arrow()
            small = self.stored_small() if rows is not None and rows.num_rows <= self.lake.limits.rewrite_rows else None
            base = small[0] if small is not None else self.lake.read(self.path)
        frame = base.select(*self.keys, *self.payloads)
        for delta in self._frames():
            frame = frame.unionByName(delta)
        return frame

    def current_local(self):
        """``current()`` as an Arrow table in this process, when the stored table is small (read by
        delta-rs) and every buffered delta is local (added as Arrow); else None."""
        return self.local_matching(None, ()) if self.readable_locally(whole=True) else None

    def local_matching(self, change, shared: Sequence[str]):
        """``current()``'s rows whose ``shared`` keys occur in ``change`` (an Arrow table), as Arrow in
        this process: a superset (each key column filtered on its own; the join that reads them is
        exact); with no shared key, every row. A table too large to read whole is scanned by
        delta-rs with the key filter (a few hundred ms for millions of rows, where Spark takes a
        snapshot, a scan and a job). Call only when ``readable_locally(whole=not shared)``."""
        return self.local_where(key_filter(change, shared, self.arrow_schema()))

    def local_where(self, wanted):
        """``current()``'s rows that satisfy the Arrow expression ``wanted``, as Arrow in this
        process (``local_matching``; call only when ``readable_locally``)."""
        import pyarrow as pa

        columns, small = [*self.keys, *self.payloads], self.stored_arrow()
        if small is not None:
            stored = small.select(columns).filter(wanted)
        else:
            from lakeivm.sources.changes import plain_rows

            stored = plain_rows(self._dataset().to_table(columns=columns, filter=wanted))
        return pa.concat_tables([stored, *[d.cast(stored.schema).filter(wanted) for d in self._deltas]])

    def arrow_schema(self):
        """The stored table's Arrow schema (keys and payloads; call when ``readable_locally``)."""
        import pyarrow as pa

        from lakeivm.sources.changes import plain_field

        small = self.stored_arrow()
        schema = small.schema if small is not None else pa.schema([plain_field(f) for f in self._dataset().schema])
        return pa.schema([schema.field(c) for c in (*self.keys, *self.payloads)])

    def readable_locally(self, whole: bool = False) -> bool:
        """Whether ``local_matching`` reads the table in this process: no replacement and no buffered
        Spark delta, and the stored table small (``stored_arrow``) or, unless ``whole``, scannable by
        delta-rs (admitted by ``fastpath``, at most ``limits.scan_rows`` rows)."""
        import pyarrow as pa

        if self._replacement is not None or not all(isinstance(d, pa.Table) for d in self._deltas):
            return False
        return self.stored_arrow() is not None or (not whole and self._dataset() is not None)

    def writable_locally(self) -> bool:
        """Whether delta-rs may read and write the stored table (``fastpath``: no deletion vectors,
        column mapping, constraints, ...); True for a table not written yet. Read afresh, not kept:
        a maintainer asks before the run's recovery may restore the table."""
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        from lakeivm.store import fastpath

        try:
            return fastpath.admits(DeltaTable(self.path), write=True)
        except TableNotFoundError:
            return True

    def _writable_as_loaded(self) -> bool:
        """``writable_locally`` of the table this run already loaded (no second read of its log)."""
        from lakeivm.store import fastpath

        return fastpath.admits(self._delta_table(), write=True)

    def _delta_table(self):
        if self._loaded is None:
            from deltalake import DeltaTable

            self._loaded = DeltaTable(self.path)
        return self._loaded

    def _dataset(self):
        """The stored table as a delta-rs (pyarrow) dataset for filtered scans, or None (see
        ``readable_locally``); built once per load of the table."""
        from lakeivm.store import fastpath, storage

        table = self._delta_table()
        if self._scans is None or self._scans[0] is not table:
            scannable = fastpath.admits(table) and storage.rows_in(table) <= self.lake.limits.scan_rows
            self._scans = (table, table.to_pyarrow_dataset() if scannable else None)
        return self._scans[1]

    def consolidated(self) -> DataFrame:
        """``current()`` summed per key, zero payloads dropped (a shuffle: use on small slices)."""
        return consolidate(self.current(), self.keys, self.payloads, self.alive)

    def add(self, delta):
        """Buffer a delta (its columns: keys + payloads): a Spark frame, returned computed
        (checkpointed), or an Arrow table computed in this process (``fivm.local``), returned as is."""
        import pyarrow as pa

        if isinstance(delta, pa.Table):
            self._deltas.append(delta.select([*self.keys, *self.payloads]))
        else:
            self._deltas.append(delta.select(*self.keys, *self.payloads).localCheckpoint(eager=True))
        return self._deltas[-1]

    def _frames(self) -> list[DataFrame]:
        return as_frames(self.lake.spark, self._deltas)

    def replace(self, rows: DataFrame) -> None:
        """Replace the whole content (a rebuild); earlier buffered deltas are dropped."""
        self._replacement = consolidate(rows, self.keys, self.payloads, self.alive).localCheckpoint(eager=True)
        self._deltas = []

    def create(self, rows: DataFrame) -> None:
        """Write the table from scratch (bootstrap). One too large for delta-rs to MERGE (over
        ``limits.local_merge_rows``) gets deletion vectors: a Spark MERGE then marks the rows it
        changes instead of rewriting every file it touches. A smaller one does not (delta-rs, which
        rewrites or MERGEs it on ``flush``, cannot write a table with them), nor an append-only one
        (it never MERGEs; delta-rs scans it by keys)."""
        written = self._overwrite(consolidate(rows, self.keys, self.payloads, self.alive))
        if not self.append_only and written > max(self._local_rows(), self.lake.limits.local_merge_rows):
            self.lake.spark.sql(f"ALTER TABLE delta.`{self.path}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")

    def flush(self) -> None:
        """Write the buffered change: an overwrite after ``replace``, else the summed delta -- a small
        table rewritten whole, else one MERGE, or for an append-only table one append (and now and
        then a compaction)."""
        if self._replacement is not None:
            self._overwrite(self._replacement)  # deltas added after the replacement are rewritten onto it, not onto the old read
        self._collect_small_deltas()
        rewritten = self._rewrite_if_small() if self._deltas else None
        if self._deltas and rewritten is None:
            if self.append_only:
                if not self._append_locally():
                    summed = consolidate(union_all(self._frames()), self.keys, self.payloads)
                    summed.write.format("delta").mode("append").save(self.path)
                if _needs_compaction(self.path) and not self._compact_locally():
                    self._overwrite(self.consolidated_stored())
            elif not self._merge_locally():
                merge_add(self.lake, self.path, self._frames(), self.keys, self.payloads, self.alive)
        self._deltas, self._replacement, self._loaded = [], None, None
        if rewritten is not None and rewritten.num_rows <= self._local_rows():
            self._small, self._small_frame = (rewritten,), None  # a later reader in this run reads no file
        else:
            self._small = None

    def _overwrite(self, rows: DataFrame) -> int:
        """Replace the stored table (schema too) with ``rows`` (``overwrite``); returns their number."""
        self._small = self._loaded = None
        return overwrite(self.lake, rows, self.path, self._local_rows())

    def _append_locally(self) -> bool:
        """An append-only table's flush in this process when every buffered delta is Arrow and
        delta-rs reads the table (``readable_locally``): the deltas summed per key by DuckDB and
        appended by delta-rs in one commit. False (nothing written) otherwise."""
        import pyarrow as pa

        dataset = self._dataset() if self.readable_locally() and self._writable_as_loaded() else None
        if dataset is None:
            return False
        schema = pa.schema([dataset.schema.field(c) for c in (*self.keys, *self.payloads)])
        summed = add_rows(schema.empty_table(), pa.concat_tables([d.cast(schema) for d in self._deltas]), self.keys, self.payloads)
        self.lake.write_small(self.path, summed, "append")
        return True

    def merges_locally(self) -> bool:
        """Whether a flush of Arrow deltas stays in this process: the table small (rewritten whole)
        or MERGEd by delta-rs (``_merge_locally``); asked before the run adds its deltas."""
        import pyarrow as pa

        if self.readable_locally(whole=True):
            return True
        if not self.keys or not self.readable_locally() or not self._writable_as_loaded():
            return False
        most = self.lake.limits.local_merge_rows
        return (storage.rows_in(self._delta_table(), unknown=most + 1) <= most
                and not any(pa.types.is_floating(self.arrow_schema().field(k).type) for k in self.keys))

    def _collect_small_deltas(self) -> None:
        """The buffered Spark deltas brought here as Arrow where they hold at most ``limits.merge_rows``
        rows in all and the table then merges in this process (``merges_locally``): one collecting job
        each, where a Spark MERGE of a few thousand keys costs a snapshot and a dozen jobs (the MIN
        and MAX multisets of a view whose change is too large to sum here)."""
        import pyarrow as pa

        from lakeivm.sources.changes import plain_rows

        frames = [d for d in self._deltas if not isinstance(d, pa.Table)]
        if not frames or self._replacement is not None or self.append_only:
            return
        deltas, self._deltas = self._deltas, []  # whether the stored table merges here, whatever the deltas
        here = self.merges_locally()
        self._deltas = deltas
        if here and sum(d.count() for d in frames) <= self.lake.limits.merge_rows:
            self._deltas = [d if isinstance(d, pa.Table) else plain_rows(d.toArrow()) for d in deltas]

    def _merge_locally(self) -> bool:
        """``merge_add`` in this process, for a table too large to rewrite (``_rewrite_if_small``) but
        at most ``limits.local_merge_rows`` rows, when every buffered delta is Arrow: the changed
        keys' stored rows read by a delta-rs key-filtered scan, added to the deltas by DuckDB, and
        MERGEd by delta-rs (``Lake.merge_arrow``) -- where a Spark MERGE of a few thousand keys costs
        a snapshot and a dozen jobs. False (nothing written) otherwise: no key, a float key, a table
        the gate refuses or one larger."""
        import pyarrow as pa

        from lakeivm.sources.changes import plain_rows

        if not self.merges_locally():
            return False
        schema = self.arrow_schema()
        change = pa.concat_tables([d.select(schema.names).cast(schema) for d in self._deltas])
        stored = plain_rows(self._dataset().to_table(columns=schema.names, filter=key_filter(change, self.keys, schema)))
        added = added_at_keys(stored.cast(schema), change, self.keys, self.payloads)
        live = " OR ".join(f"(s.{quoted(p)} IS NOT NULL AND s.{quoted(p)} <> 0)" for p in ([self.alive] if self.alive else self.payloads))
        return self.lake.merge_arrow(self.path, added, self.keys, delete_when=f"NOT ({live})", insert_when=live)

    def _compact_locally(self) -> bool:
        """An append-only table rewritten consolidated in this process (read by delta-rs, summed by
        DuckDB, written by delta-rs in one commit: no Spark job); False (nothing written) where
        delta-rs cannot scan it."""
        self._loaded = None  # the table as its last append left it
        dataset = self._dataset() if self._writable_as_loaded() else None
        if dataset is None:
            return False
        schema = self.arrow_schema()
        stored = dataset.to_table(columns=schema.names).cast(schema)
        self.lake.overwrite_small(self.path, add_rows(schema.empty_table(), stored, self.keys, self.payloads, self.alive), schema)
        return True

    def _rewrite_if_small(self):
        """Add the buffered deltas by rewriting the table whole, read and written by delta-rs
        (``stored_arrow``), if it is small: one commit, and Spark takes no snapshot of a table that
        changes every run (a MERGE costs seconds and a dozen Spark jobs however few rows it touches).
        Returns the Arrow rows written, or None if the table is not small."""
        import pyarrow as pa
        from pyspark.sql import functions as F

        rows = self.stored_arrow()
        if rows is None:
            return None
        local = [d.select(rows.column_names).cast(rows.schema) for d in self._deltas if isinstance(d, pa.Table)]
        remote = [d for d in self._deltas if not isinstance(d, pa.Table)]
        if remote:  # one Spark job: the buffered deltas computed by Spark, in the stored types
            typed = union_all(remote).select(*[F.col(f"`{c}`").cast(t).alias(c) for c, t in self._columns.items()])
            local.append(typed.toArrow().cast(rows.schema))
        summed = add_rows(rows, pa.concat_tables(local), self.keys, self.payloads, self.alive)
        self.lake.overwrite_small(self.path, summed, rows.schema)
        return summed

    def consolidated_stored(self) -> DataFrame:
        """The stored rows summed per key (computed: the table can be overwritten with it)."""
        stored = self.lake.read(self.path).select(*self.keys, *self.payloads)
        return consolidate(stored, self.keys, self.payloads, self.alive).localCheckpoint(eager=True)


def as_frames(spark, deltas: Sequence) -> list[DataFrame]:
    """Buffered deltas as Spark frames: an Arrow one (computed in this process) as local rows."""
    import pyarrow as pa

    return [storage.local_rows(spark, d) if isinstance(d, pa.Table) else d for d in deltas]


def key_filter(change, keys: Sequence[str], types):
    """A pyarrow filter of the rows whose every ``keys`` column holds one of that column's values in
    ``change`` (an Arrow table): a superset of the rows matching a change row (each column filtered on
    its own; the join that reads them is exact). The values cast to the stored ``types`` (a filter
    compares like types); NULL matches NULL."""
    import pyarrow.compute as pc

    wanted = pc.scalar(True)
    for key in keys:
        wanted &= storage.is_in(key, pc.unique(change[key]), types.field(key).type)
    return wanted


def duckdb_query(text: str, **tables):
    """``text`` run by DuckDB in this process over the Arrow ``tables`` (by name); an Arrow table."""
    with duckdb_connection(**tables) as con:
        return con.sql(text).to_arrow_table()


_DATABASE: dict[int, object] = {}  # {process id: its one in-memory DuckDB database} (a fork opens its own)


@contextmanager
def duckdb_connection(**tables):
    """An in-memory DuckDB connection with the Arrow ``tables`` registered by name: a connection of
    its own (its registrations and temp tables its own) to this process's one in-memory database,
    opened in ~1 ms, where a new database costs ~15 ms and a run uses a dozen."""
    import os

    import duckdb

    database = _DATABASE.get(os.getpid())
    if database is None:
        database = _DATABASE.setdefault(os.getpid(), duckdb.connect())
    with database.cursor() as con:
        for name, table in tables.items():
            con.register(name, table)
        yield con


def quoted(name: str) -> str:
    """A column name as a DuckDB identifier."""
    return '"' + name.replace('"', '""') + '"'


def consolidate(rows: DataFrame, keys: Sequence[str], payloads: Sequence[str], alive: str | None = None) -> DataFrame:
    """Sum payloads per key and drop keys whose payloads are all zero (or whose ``alive`` is zero)."""
    from pyspark.sql import functions as F

    summed = rows.groupBy(*keys).agg(*[F.sum(p).alias(p) for p in payloads])
    return summed.where(f"`{alive}` != 0" if alive else " OR ".join(f"`{p}` != 0" for p in payloads))


def overwrite(lake: Lake, rows: DataFrame, path: str, max_rows: int | None = None, configuration: dict[str, str] | None = None) -> int:
    """Replace the Delta table at ``path`` (schema too; ``configuration``: properties of a table it
    creates, e.g. CDF on a view's result) with ``rows``, computed once; returns their number. At
    most ``max_rows`` (default: the lake's ``limits.rewrite_rows``) of them are written by delta-rs in one commit (a Spark
    write of a new small Delta table costs a job and a snapshot, more than collecting the rows and
    writing them here); more, a
    table the gate refuses (``fastpath``: deletion vectors, ...) or a type it does not write are
    written by Spark. A table that held at most half that many rows is rewritten from one Spark job
    (its new rows collected, at most ``max_rows`` + 1 of them) rather than three (compute, count, collect)."""
    limit = lake.limits.rewrite_rows if max_rows is None else max_rows
    writable, held = _local_target(path, rows.columns)
    if writable and held is not None and held <= limit // 2:
        collected = rows.limit(limit + 1).toArrow()  # it was small, so it likely is: computed and collected in one job
        if collected.num_rows <= limit and _write_locally(lake, collected, path, configuration):
            return collected.num_rows
    computed = rows.localCheckpoint(eager=True)
    count = computed.count()
    if count > limit or not writable or not _write_locally(lake, computed.toArrow(), path, configuration):
        writer = computed.write.format("delta").mode("overwrite").option("overwriteSchema", "true")
        for key, value in (configuration or {}).items():
            writer = writer.option(key, value)
        writer.save(path)
    return count


def _local_target(path: str, columns: Sequence[str]) -> tuple[bool, int | None]:
    """Whether delta-rs may replace the table at ``path`` (``fastpath``) with rows of ``columns``, and
    the rows it holds now (by its files' statistics; None: a new table) -- one load of its log."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    from lakeivm.store import fastpath, storage

    if any(set(name) & set(" ,;{}()\n\t=") for name in columns):  # Spark's Delta writer refuses them, naming the fix
        return False, None
    try:
        table = DeltaTable(path)
    except TableNotFoundError:  # a new table
        return True, None
    return fastpath.admits(table, write=True), storage.rows_in(table, unknown=2**62)


def _write_locally(lake: Lake, arrow, path: str, configuration: dict[str, str] | None) -> bool:
    """``overwrite`` by delta-rs of the collected rows; False (nothing written) where it cannot."""
    import pyarrow as pa

    arrow = arrow.cast(pa.schema([field.with_nullable(True) for field in arrow.schema]))  # as a Spark write stores it
    try:
        lake.write_small(path, arrow, "overwrite", configuration=configuration, new_schema=True)
    except Exception:  # noqa: BLE001 -- a type delta-rs does not write (an interval, ...), raised before its commit
        return False
    return True


def as_read(rows: DataFrame, query) -> DataFrame:
    """The view's rows as its reader sees them, from the maintained groups: those that pass the
    view's HAVING (``Query.having``), and for ``ORDER BY ... LIMIT k`` (``Query.limit``) the first k
    in that order, as Spark takes them from the same rows."""
    from pyspark.sql import functions as F

    from lakeivm.columns import MULTIPLICITY
    from lakeivm.sql import HAVING

    if query.having:
        rows = rows.where(F.col(HAVING))
    if query.limit is None:
        return rows

    order = [getattr(F.col(f"`{name}`"), f"{'desc' if desc else 'asc'}_nulls_{'first' if first else 'last'}")()
             for name, desc, first in query.top]
    return rows.orderBy(*order).limit(query.limit)


@dataclass(frozen=True)
class Readable:
    """How a kind's stored result rows are the rows its readers see (``Maintainer.readable``): those
    whose ``where`` column holds, each standing for ``weight`` copies (a count column; else one), on
    the stored columns not named ``_lakeivm_*``."""

    where: str | None = None
    weight: str | None = None


def readable_groups(query, weight: str | None = None) -> Readable | None:
    """``Readable`` of maintained groups (``as_read``): those that pass the view's HAVING, each
    ``weight`` copies (a projection stores a row once with its count); None for a top-k, whose k
    first rows no row's own change decides."""
    from lakeivm.sql import HAVING

    return None if query.limit is not None else Readable(HAVING if query.having else None, weight)


def as_read_changes(changes: DataFrame, how: Readable | None) -> DataFrame | None:
    """Signed changes of the stored rows (their stored columns and ``_lakeivm_m``) -> the changes of
    what the reader sees (``how``); None where a kind cannot say them (``how`` None)."""
    from pyspark.sql import functions as F

    from lakeivm.columns import MULTIPLICITY

    if how is None:
        return None
    if how.where:
        changes = changes.where(F.col(how.where))
    if how.weight:
        changes = changes.withColumn(MULTIPLICITY, F.col(MULTIPLICITY) * F.col(how.weight))
    return changes.select(*[f"`{c}`" for c in changes.columns if not c.startswith("_lakeivm_")], MULTIPLICITY)


def read_if_small(lake: Lake, path: str, max_rows: int | None = None) -> tuple[DataFrame, object] | None:
    """The table's rows as local rows and their Arrow schema (``Lake.read_small``) if it is small
    enough to rewrite whole (at most ``max_rows``, default ``limits.rewrite_rows``, by its Delta statistics)
    and delta-rs reads it, else None: MERGE or write it with Spark (a MERGE costs seconds whatever
    it touches)."""
    return lake.read_small(path, lake.limits.rewrite_rows if max_rows is None else max_rows, write=True)


def read_result(ctx: Context, version: int | None = None) -> DataFrame:
    """The view's stored result (at ``version``) for its readers (``lakeivm read``, an upstream's
    snapshot): local rows read by delta-rs when small (``Lake.read_small``), else Spark's read. Spark's first read of a table loads its log and builds a snapshot, which
    delta-rs does not need for a small table. The audit reads through Spark (``Context.spark_reads_result``): what a Spark user sees
    of files delta-rs may have written is what it checks."""
    path = ctx.lake.view_path(ctx.view)
    small = None if ctx.spark_reads_result else ctx.lake.read_small(path, ctx.lake.limits.rewrite_rows, version)
    return small[0] if small is not None else ctx.lake.read(path, version)


def output_types(spark, sql: str) -> dict[str, str]:
    """{column: Spark SQL type} of ``sql`` (analysed, not run): a view's result keeps its SQL's own
    types whichever way a run computed it, so that a switch to a recompute changes no column."""
    return {f.name: f.dataType.simpleString() for f in spark.sql(sql).schema.fields}


def in_stored_types(rows: DataFrame, stored: DataFrame) -> DataFrame:
    """``rows`` in the column order and Spark types of ``stored``: one projection from SQL text (a
    Column per field costs four py4j calls; a struct's field names need the Column's quoting)."""
    from pyspark.sql import functions as F

    from lakeivm.sql.tree import backquoted

    fields = stored.schema.fields
    types = [f.dataType.simpleString() for f in fields]
    if any("struct<" in t for t in types):
        return rows.select(*[F.col(backquoted(f.name)).cast(f.dataType).alias(f.name) for f in fields])
    return rows.selectExpr(*[f"CAST({backquoted(f.name)} AS {t}) AS {backquoted(f.name)}" for f, t in zip(fields, types)])


def key_of(values: tuple) -> tuple:
    """A row's key as Python values that compare as Spark's ``<=>`` does after its normalization:
    NULL equals NULL (Python's None), NaN equals NaN (a float NaN is not equal to itself)."""
    return tuple("NaN" if isinstance(v, float) and v != v else v for v in values)


def keys_in(table, keys: Sequence[str]) -> list[tuple]:
    """The ``keys`` of each row of an Arrow table (``key_of``), in row order."""
    return [key_of(row) for row in zip(*(table[k].to_pylist() for k in keys))] if keys else [()] * table.num_rows


def add_rows(stored, change, keys: Sequence[str], payloads: Sequence[str], alive: str | None = None):
    """``consolidate`` on the driver, for small Arrow tables: ``stored`` plus ``change`` (the same
    columns), payloads summed per key (NULLs skipped, as SUM does; decimals exact; keys compared
    as Spark's ``<=>`` does: NULL with NULL, NaN with NaN), keys whose payloads are all zero or NULL
    (or whose ``alive`` is) dropped; in ``stored``'s schema. DuckDB runs it on the Arrow tables."""
    import pyarrow as pa

    both = pa.concat_tables([stored, change.select(stored.column_names).cast(stored.schema)])
    group = ", ".join(quoted(k) for k in keys)
    sums = ", ".join(f"SUM({quoted(p)}) AS {quoted(p)}" for p in payloads)
    live = " OR ".join(f"({quoted(p)} IS NOT NULL AND {quoted(p)} <> 0)" for p in ([alive] if alive else payloads))
    text = (f"SELECT * FROM (SELECT {group + ', ' if keys else ''}{sums} FROM added"
            + (f" GROUP BY {group}" if keys else "") + f") WHERE {live}")
    return duckdb_query(text, added=both).select(stored.column_names).cast(stored.schema)


def added_at_keys(stored, change, keys: Sequence[str], payloads: Sequence[str]):
    """``add_rows`` of the keys in ``change`` alone, each kept however its payloads sum (zero: the
    caller deletes it): ``stored`` (a superset of the stored rows of those keys) plus ``change``."""
    import pyarrow as pa

    q = [quoted(k) for k in keys]
    changed = " AND ".join(f"c.{k} IS NOT DISTINCT FROM s.{k}" for k in q)
    sums = ", ".join(f"SUM({quoted(p)}) AS {quoted(p)}" for p in payloads)
    text = (f"SELECT {', '.join(q)}, {sums} FROM (SELECT * FROM stored s WHERE EXISTS (SELECT 1 FROM change c WHERE {changed})"
            f" UNION ALL SELECT * FROM change) GROUP BY {', '.join(q)}")
    both = {"stored": stored, "change": change.select(stored.column_names).cast(stored.schema)}
    return duckdb_query(text, **both).select(stored.column_names).cast(pa.schema(stored.schema))


COMPACT_RATIO = 0.25  # appended rows, as a fraction of the rows at the last rewrite, that trigger a compaction
COMPACT_COMMITS = 40  # appends that trigger one whatever their size (each is a file every scan opens)


def union_all(frames: Sequence[DataFrame]) -> DataFrame:
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame)
    return out


def _needs_compaction(path: str) -> bool:
    """Whether the appends since the table's last rewrite (read from its commit files, newest first)
    hold more than COMPACT_RATIO of the rows that rewrite wrote, or number COMPACT_COMMITS."""
    from lakeivm.store import storage

    head, appended = storage.head_version(path), 0
    for version in range(head, max(head - COMPACT_COMMITS, -1), -1):
        info = storage.commit_info(path, version) or {}
        metrics = info.get("operationMetrics") or {}
        rows = int(metrics.get("numOutputRows", metrics.get("num_added_rows", 0)))  # Spark's, delta-rs's name
        mode = (info.get("operationParameters") or {}).get("mode") if info.get("operation") == "WRITE" else None
        if mode == "Overwrite":
            return appended > COMPACT_RATIO * max(rows, 1000)
        appended += rows if mode == "Append" else 0  # table properties, RESTOREs: no rows of their own
    return True




def small_side(frame: DataFrame, max_rows: int) -> DataFrame:
    """``frame`` computed, with a broadcast hint when it is small enough to ship to every task (a
    batch's side of a join with stored state): the stored table is then scanned, not shuffled.
    Above ``max_rows`` (the lake's ``limits.broadcast_rows``) Spark chooses the join."""
    from pyspark.sql import functions as F

    frame = frame.localCheckpoint(eager=True)
    return F.broadcast(frame) if frame.count() <= max_rows else frame


def merge_add(lake: Lake, path: str, deltas: Sequence[DataFrame], keys: Sequence[str], payloads: Sequence[str],
              alive: str | None = None) -> None:
    """MERGE the sum of ``deltas`` into the table: payloads added, all-zero keys (or zero ``alive``) deleted."""
    from pyspark.sql import functions as F

    change = deltas[0]
    for delta in deltas[1:]:
        change = change.unionByName(delta)
    change = change.groupBy(*keys).agg(*[F.sum(p).alias(p) for p in payloads])
    change = small_side(change.where(f"`{payloads[0]}` IS NOT NULL"), lake.limits.broadcast_rows)  # no keys, no rows: one NULL row
    on = " AND ".join(f"t.`{k}` <=> s.`{k}`" for k in keys) or "true"
    zero_after = f"t.`{alive}` + s.`{alive}` = 0" if alive else " AND ".join(f"t.`{p}` + s.`{p}` = 0" for p in payloads)
    nonzero = f"s.`{alive}` != 0" if alive else " OR ".join(f"s.`{p}` != 0" for p in payloads)
    updates = ", ".join(f"t.`{p}` = t.`{p}` + s.`{p}`" for p in payloads)
    columns = ", ".join(f"`{c}`" for c in (*keys, *payloads))
    lake.merge(path, change, on, f"WHEN MATCHED AND ({zero_after}) THEN DELETE", f"WHEN MATCHED THEN UPDATE SET {updates}",
               f"WHEN NOT MATCHED AND ({nonzero}) THEN INSERT ({columns}) VALUES ({', '.join('s.' + c for c in columns.split(', '))})")
