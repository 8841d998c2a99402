"""The lake's layout (``docs/design/lake-layout.md``), base-table creation with CDF on, and the system tables.

```
tables/<name>               base tables (Delta, delta.enableChangeDataFeed = true)
views/<view>/result         the maintained view
views/<view>/aux/<name>     auxiliary views      views/<view>/index/<name>  serialized indexes
views/<view>/sample         reservoir samples    _system/log (runs and claims), _system/costs
```
"""
from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from lakeivm.store import storage
from lakeivm.columns import MULTIPLICITY  # noqa: F401 -- where the modules reading deltas import it
from lakeivm.limits import Limits

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from lakeivm.config import Settings

CDF = "delta.enableChangeDataFeed"
WRITER_TAG = "spark.databricks.delta.commitInfo.userMetadata"  # set per run: every Delta commit of the run names it


@dataclass
class Lake:
    """A lake rooted at ``root`` (a local path or any Hadoop/object-store URI).

    ``session``: the SparkSession, or a function that makes one on the first use of ``spark`` -- a
    run with nothing to apply reads the log and lists the tables with delta-rs and never makes one,
    so a `lakeivm refresh` with nothing pending pays no Spark Connect session. ``limits``: up to which
    sizes a run on this lake works in its own process rather than on Spark (its settings')."""

    session: SparkSession | Callable[[], SparkSession] | None
    root: str
    limits: Limits = Limits()
    cache: dict = field(default_factory=dict, repr=False)  # immutable facts, e.g. commit histories
    upstreams: dict = field(default_factory=dict, repr=False)  # views read as sources by other views: name -> upstream.ViewSource
    shared: frozenset = field(default=frozenset(), repr=False)  # paths whose change ranges a run set reads once (changes.sharing)

    def __post_init__(self) -> None:
        if not urlparse(self.root).scheme:
            self.root = os.path.abspath(self.root)
        self.root = self.root.rstrip("/")

    @property
    def spark(self) -> SparkSession:
        if callable(self.session):
            self.session = self.session()
        return self.session  # type: ignore[return-value]

    def ensure_spark(self) -> None:
        """Make the Spark session now if it is not made yet (a Connect server that does not answer fails here)."""
        _ = self.spark

    def table_path(self, name: str) -> str:
        return f"{self.root}/tables/{name}"

    def view_path(self, view: str, part: str = "result") -> str:
        """``result``, ``sample``, ``aux/<name>`` or ``index/<name>`` of a view."""
        return f"{self.root}/views/{view}/{part}"

    @property
    def log_path(self) -> str:
        return f"{self.root}/_system/log"

    @property
    def costs_path(self) -> str:
        return f"{self.root}/_system/costs"

    def create_table(self, name: str, df: DataFrame, mode: str = "error") -> str:
        """Write ``df`` as base table ``name`` with the change data feed on; returns its path."""
        path = self.table_path(name)
        df.write.format("delta").mode(mode).option(CDF, "true").save(path)
        return path

    def is_delta(self, path: str) -> bool:
        return storage.is_delta(path)

    def head_version(self, path: str) -> int:
        """The newest committed version of the Delta table at ``path`` (one listing of its log)."""
        return storage.head_version(path)

    def merge(self, path: str, source: DataFrame, on: str, *clauses: str) -> None:
        """``MERGE INTO`` the Delta table at ``path`` (alias ``t``) from ``source`` (alias ``s``).

        SQL, so that it works the same in-process and over Spark Connect (Delta's Python
        ``DeltaTable`` needs a server plugin Connect servers lack). Example::

            lake.merge(path, rows, "t.k <=> s.k", "WHEN MATCHED THEN UPDATE SET *", "WHEN NOT MATCHED THEN INSERT *")
        """
        self.spark.sql(f"MERGE INTO delta.`{path}` AS t USING {{source}} AS s ON {on} {' '.join(clauses)}",
                       source=source).collect()

    def merge_small(self, path: str, source: DataFrame, keys: Sequence[str], delete_when: str | None = None,
                    insert_when: str | None = None) -> bool:
        """``merge`` of few rows by delta-rs in this process: ``source`` (at most the lake's
        ``limits.merge_rows``, brought here as Arrow) matched on ``keys`` (NULL matching NULL),
        deleted where ``delete_when`` holds, else updated whole; unmatched inserted where
        ``insert_when`` holds (conditions over ``s.``, columns double-quoted). One commit carrying the
        run's writer tag, with its change data where the table has CDF. A Spark MERGE of a few
        thousand rows into millions pays Spark jobs that read and rewrite the touched files for
        seconds; delta-rs does the same work in this process without them. False, nothing written,
        if the gate refuses the table (``fastpath``: deletion vectors, column mapping, constraints,
        ...), a float key, or the source is larger: the caller MERGEs with Spark."""
        from lakeivm.store import fastpath

        table = fastpath.load(path, write=True)  # before the source is computed: a refused table costs no job
        if table is None:
            return False
        max_rows = self.limits.merge_rows
        rows = source.limit(max_rows + 1).toArrow()
        return rows.num_rows <= max_rows and self.merge_arrow(path, rows, keys, delete_when, insert_when, table)

    def merge_arrow(self, path: str, rows: object, keys: Sequence[str], delete_when: str | None = None,
                    insert_when: str | None = None, table: object | None = None, updates: Mapping[str, str] | None = None) -> bool:
        """``merge_small`` of ``rows``, an Arrow table of this process (into ``table``, the table at
        ``path`` if already loaded): a matched row updated whole, or only its columns ``updates``
        names ({column: expression over ``t.`` and ``s.``}). False, nothing written, where the gate
        refuses the table or a key is a float."""
        import pyarrow as pa

        from lakeivm.store import fastpath

        table = fastpath.load(path, write=True) if table is None else table
        if table is None:
            return False
        schema = pa.schema(table.schema().to_arrow())
        if any(pa.types.is_floating(schema.field(k).type) for k in keys):
            return False  # (a float key: NaN matches NaN under Spark's <=>, which the caller's MERGE keeps)
        quote = lambda name: '"' + name.replace('"', '""') + '"'  # noqa: E731
        on = " AND ".join(f"(t.{quote(k)} IS NOT DISTINCT FROM s.{quote(k)})" for k in keys) or "true"
        merge = self.merger(table, rows.select(schema.names).cast(schema), on)
        if delete_when:
            merge = merge.when_matched_delete(delete_when)
        merge = merge.when_matched_update_all() if updates is None else merge.when_matched_update(dict(updates))
        merge.when_not_matched_insert_all(insert_when).execute()
        return True

    def merger(self, table: object, rows: object, on: str) -> object:
        """A delta-rs MERGE into ``table`` (loaded by ``fastpath.load(..., write=True)``, alias ``t``)
        from the Arrow ``rows`` (alias ``s``) on ``on``, committed with the run's writer tag; the
        caller adds its clauses and executes it."""
        return table.merge(rows, on, source_alias="s", target_alias="t", commit_properties=self._tagged())

    def read(self, path: str, version: int | None = None) -> DataFrame:
        """The Delta table at ``path`` (at ``version``, else its newest) read by Spark. A version's
        frame is kept (``kept``): Delta reconstructs an older version's file list with a Spark job
        for each frame it plans (~0.45 s on a tiny table here), and the frame it made holds that
        snapshot, its state cached, for the next read of the same version. A Spark Connect frame
        holds only its plan: that server resolves the snapshot anew each time, so none is kept."""
        def read() -> DataFrame:
            reader = self.spark.read.format("delta")
            return reader.load(path) if version is None else reader.option("versionAsOf", version).load(path)

        from lakeivm.spark import is_connect

        key = None if version is None or is_connect(self.spark) else self._version_key(path, version, 0, False)
        return read() if key is None else self.kept("spark reads", key, read, KEPT_READS)

    def table_names(self) -> list[str]:
        """Base tables present under ``tables/``."""
        return storage.list_names(f"{self.root}/tables", directories=True)

    def table_schemas(self) -> dict[str, dict[str, str]]:
        """{table: {column: Spark SQL type}} of every base table at its head version (read from the
        Delta logs in this process; cached per version)."""
        return {name: self.schema_at(self.table_path(name), self.head_version(self.table_path(name)))
                for name in self.table_names()}

    def row_count(self, path: str) -> int:
        """Rows of the Delta table at ``path`` from its files' statistics (no scan; an upper bound
        when deletion vectors hide rows)."""
        return storage.row_count(path)

    def schema_at(self, path: str, version: int) -> dict[str, str]:
        """{column: Spark SQL type} of the Delta table at ``path`` as of ``version``."""
        key = ("schema", path, version)
        if key not in self.cache:
            try:
                self.cache[key] = storage.schema_at(path, version)
            except Exception:  # a table feature delta-rs cannot read: ask Spark
                self.cache[key] = {f.name: f.dataType.simpleString() for f in self.read(path, version).schema.fields}
        return self.cache[key]

    def read_small(self, path: str, max_rows: int, version: int | None = None, write: bool = False) -> tuple[DataFrame, object] | None:
        """The Delta table (at ``version``, else its newest) read in this process (delta-rs, one load
        of its log) and handed to Spark as local rows: ``(frame, the Arrow table)``; None if it holds
        more than ``max_rows`` rows (by its files' statistics; a file without them counts as too
        many) or delta-rs cannot read it (a table feature it lacks, e.g. deletion vectors). Spark
        reads no Delta snapshot of it (a snapshot of a table that changes every run costs Spark jobs
        and seconds, however few its rows; one of an older version reconstructs its file list).
        ``write``: read to be rewritten by delta-rs, so None also where the gate refuses its writes."""
        def read() -> tuple[DataFrame, object] | None:
            found = read_with_delta_rs(path, max_rows, version, write=write)
            if found is None:
                return None
            table, rows = found
            return storage.local_rows(self.spark, rows, storage.spark_ddl(table)), rows

        key = None if version is None else self._version_key(path, version, max_rows, write)
        if key is None:
            return read()
        # the views of a chain read the same table versions: each is read once per process
        return self.kept("small reads", key, read, KEPT_READS, rows=lambda small: small[1].num_rows, most_rows=KEPT_ROWS)

    def kept(self, store: str, key: tuple, read: Callable[[], Any], most: int,
             rows: Callable[[Any], int] | None = None, most_rows: int = 0) -> Any:
        """``read()``, kept in this lake's ``store`` under ``key`` and read again only once dropped: the
        least recently used first, beyond ``most`` entries (or ``most_rows`` rows in all, as ``rows``
        counts an entry's). None is not kept."""
        kept = self.cache.setdefault(store, OrderedDict())
        if key in kept:
            kept.move_to_end(key)
            return kept[key]
        value = read()
        if value is not None:
            kept[key] = value
            while len(kept) > most or (rows is not None and sum(map(rows, kept.values())) > most_rows):
                kept.popitem(last=False)
        return value

    def forget_reads(self) -> None:
        """Drop the table versions and change ranges this process keeps (``kept``): the next run reads
        them as the process's first reader would (a benchmark timing each view on its own)."""
        for store in ("small reads", "spark reads", "feeds", "spark feeds"):
            self.cache.pop(store, None)

    def _version_key(self, path: str, version: int, max_rows: int, write: bool) -> tuple | None:
        """What identifies a table version's rows in this process: the path, the table's identity (a
        folder deleted and written anew, e.g. a rebuilt state table, numbers its versions again), the
        version, and the session its frame belongs to. None: the table cannot be identified."""
        try:
            return path, storage.table_id(path), version, max_rows, write, id(self.spark)
        except Exception:  # noqa: BLE001 -- not (yet) a Delta table, a damaged log: read it, and say so there
            return None

    @staticmethod
    def read_small_arrow(path: str, max_rows: int, version: int | None = None, write: bool = False):
        """``read_small``'s Arrow table alone, at ``version`` if given: no Spark at all (a frame's
        typed schema costs a Spark Connect round trip)."""
        read = read_with_delta_rs(path, max_rows, version, write=write)
        return None if read is None else read[1]

    def overwrite_small(self, path: str, rows: object, schema: object) -> None:
        """Replace the Delta table's rows with ``rows`` (few: an Arrow table in this process) in one
        commit written by delta-rs (``write_small``)."""
        self.write_small(path, rows.cast(schema), "overwrite")

    def write_small(self, path: str, rows: object, mode: str, configuration: dict[str, str] | None = None,
                    new_schema: bool = False) -> None:
        """Write ``rows`` (an Arrow table or record batch stream of this process, in the table's
        types unless ``new_schema``: an overwrite that replaces the schema) in one commit by delta-rs
        (``mode`` overwrite or append; ``configuration``: table properties of a table it creates),
        carrying the run's writer tag like its Spark commits."""
        from deltalake import write_deltalake

        write_deltalake(path, rows, mode=mode, configuration=configuration, schema_mode="overwrite" if new_schema else None,
                        commit_properties=self._tagged())

    def _tagged(self):
        """delta-rs commit properties carrying the run's writer tag, as its Spark commits do (none
        before a session is made: the tag is a session setting)."""
        from deltalake import CommitProperties

        tag = None if callable(self.session) else self.spark.conf.get(WRITER_TAG, None)
        return CommitProperties(custom_metadata={"userMetadata": tag} if tag else None)

    def restore(self, path: str, version: int) -> None:
        """Roll the Delta table at ``path`` back to ``version``: one RESTORE commit, carrying the run's
        writer tag like its other commits. delta-rs compares the two file lists in this process; a
        table the gate refuses (``fastpath``), or one delta-rs fails on, is restored by Spark's
        RESTORE instead, which reconstructs both snapshots in Spark jobs."""
        from deltalake.exceptions import DeltaError

        from lakeivm.store import fastpath

        try:
            table = fastpath.load(path, write=True)
            if table is not None:
                table.restore(version, commit_properties=self._tagged())
                return
        except DeltaError:  # a writer feature delta-rs lacks, a file gone, a concurrent commit: Spark restores it or says why not
            pass
        self.spark.sql(f"RESTORE TABLE delta.`{path}` TO VERSION AS OF {int(version)}")

    def ensure_system_tables(self) -> None:
        """Create ``_system/log`` and ``_system/costs`` (schemas in lakeivm/schemas/system/) if missing."""
        from lakeivm.store import system_tables

        for path, schema_file in ((self.log_path, "log.json"), (self.costs_path, "costs.json")):
            system_tables.ensure(path, schema_file)

    def delete(self, path: str) -> None:
        """Remove a folder (state of a view being dropped or rebuilt from scratch)."""
        storage.delete_tree(path)


KEPT_READS = 64  # table versions ``read_small`` keeps per lake (least recently read dropped first) ...
KEPT_ROWS = 2_000_000  # ... holding at most this many rows in all


def open_lake(spark: SparkSession | Callable[[], SparkSession] | None = None, settings: Settings | None = None) -> Lake:
    """The configured lake, with its system tables created if missing. Without ``spark`` the
    settings' session is made on first use (``Lake.spark``): a run with nothing to apply makes none.
    Its runs read the settings' ``limits``."""
    from lakeivm.config import load_settings
    from lakeivm.spark import get_spark

    settings = settings or load_settings()
    lake = Lake(spark or (lambda: get_spark(settings)), settings.lake, limits=settings.limits)
    lake.ensure_system_tables()
    return lake


def read_with_delta_rs(path: str, max_rows: int, version: int | None = None, table=None, write: bool = False):
    """(delta-rs table, its rows as Arrow) if it holds at most ``max_rows`` rows and delta-rs reads
    it, else None (see ``Lake.read_small``); ``table``: the table already loaded by delta-rs. None
    too where the gate refuses the table (``fastpath``), or delta-rs fails to read its files (a file
    gone): the Spark read the caller falls back to raises the error a user can act on. ``write``:
    also None where the gate refuses delta-rs's writes (the caller rewrites what it reads)."""
    from deltalake import DeltaTable

    from lakeivm.store import fastpath

    table = table if table is not None else DeltaTable(path, version=version)
    if not fastpath.admits(table, write=write):
        return None
    try:
        if storage.rows_in(table, unknown=max_rows + 1) > max_rows:
            return None
        return table, table.to_pyarrow_table()
    except Exception:  # noqa: BLE001 -- DeltaProtocolError, FileNotFoundError, ...: Spark reads it instead
        return None
