"""Change capture: Delta's change data feed -> netted signed-multiplicity deltas.

A run's pin and apply steps (``docs/design/run.md#3-pin``, ``docs/design/run.md#5-apply``).

A table's pending range is (watermark, head]. Before reading it we check it is readable -- the
change data feed on over the range, the history still there, the view's columns unchanged -- and
raise ChangeRangeError saying what happened and how to fix it; the engine then applies the view's
``on_unreadable_changes`` policy. Files removed by VACUUM are detected when the range is read.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Protocol

from lakeivm.store import storage
from lakeivm.errors import ChangeRangeError
from lakeivm.columns import MULTIPLICITY
from lakeivm.store.lake import CDF, Lake

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from lakeivm.spec import ViewSpec

SIGN = {"insert": 1, "update_postimage": 1, "delete": -1, "update_preimage": -1}
_CDF_ROWS_PER_METRIC = {"numOutputRows": 1, "numDeletedRows": 1, "numUpdatedRows": 2,
                        "numTargetRowsInserted": 1, "numTargetRowsDeleted": 1, "numTargetRowsUpdated": 2,
                        # delta-rs (and writers built on it: polars, lakeivm's own datagen) names them in snake case;
                        # its MERGE's num_output_rows includes copied rows, so only these count
                        "num_added_rows": 1, "num_deleted_rows": 1, "num_updated_rows": 2,
                        "num_target_rows_inserted": 1, "num_target_rows_deleted": 1, "num_target_rows_updated": 2}


class Source(Protocol):
    """A relation a run reads: a Delta table by its versions (``TableSource``) or a view by its runs
    (``lakeivm.sources.upstream.ViewSource``). A version is what a run pins and a watermark names; a change
    range ``(watermark, head]`` is read as one netted signed delta."""

    def pin(self) -> int:
        """The version a run reads the source at: the newest there is."""

    def identity(self) -> str | None:
        """An id that changes when the source is replaced under the same name, or None."""

    def pending_rows(self, watermark: int, head: int) -> int:
        """Change rows in ``(watermark, head]`` (a cost proxy, read without the data)."""

    def pending_age_seconds(self, watermark: int, head: int) -> float:
        """Seconds since the oldest change in ``(watermark, head]`` was committed."""

    def check_readable(self, watermark: int, head: int, columns: Iterable[str]) -> None:
        """Raise ChangeRangeError if ``(watermark, head]`` cannot be read as changes of ``columns``."""

    def read_counted(self, watermark: int, head: int, columns: Iterable[str]) -> tuple[DataFrame, int]:
        """The netted signed delta over ``(watermark, head]`` projected to ``columns``, and its rows."""

    def snapshot(self, version: int, oracle: bool = False) -> DataFrame:
        """The rows at ``version`` (``oracle``: read as an audit's recompute reads them)."""

    def span(self, watermark: int, head: int) -> str:
        """``(watermark, head]`` in words, for progress lines."""


def source(lake: Lake, name: str) -> Source:
    """What ``name`` in a view's FROM reads: a view registered on the lake (``lake.upstreams``), else
    the lake table of that name."""
    return lake.upstreams.get(name) or TableSource(lake, name)


def pin(lake: Lake, tables: Iterable[str]) -> dict[str, int]:
    """The version of each source a run reads up to and no further."""
    return {t: source(lake, t).pin() for t in tables}


def identities(lake: Lake, tables: Iterable[str]) -> dict[str, str]:
    """Each base table's Delta id (``storage.table_id``); a view read as a source has none: its
    runs are numbered by the log the reading view shares, so they cannot be replaced under it."""
    return {t: ident for t in tables if (ident := source(lake, t).identity()) is not None}


def pending(lake: Lake, watermarks: Mapping[str, int], heads: Mapping[str, int]) -> dict[str, int]:
    """Change rows pending per source, ``(watermark, head]`` (no watermark: from the start)."""
    return {t: source(lake, t).pending_rows(watermarks.get(t, -1), head) for t, head in heads.items()}


def replaced(lake: Lake, recorded: Mapping[str, str], ids: Mapping[str, str] | None = None) -> ChangeRangeError | None:
    """The error naming a table that is not the one the view last read -- deleted and created anew
    at the same path, so its versions number another history -- or None. ``recorded``: the ids a
    committed run logged (none in rows of older lakes: nothing to compare); ``ids``: the current
    ones, read if not given."""
    ids = identities(lake, recorded) if ids is None else ids
    for table, was in recorded.items():
        now = ids.get(table, was)
        if now != was:
            return ChangeRangeError(
                f"table {table!r} was deleted and created anew (its Delta table id is {now}, the view last read {was}): "
                "its versions number another history, so no change range continues the old one. Rebuild the view "
                "from the new table (policy rebuild does it; else `lakeivm refresh VIEW --rebuild`).")
    return None


@dataclass(frozen=True, eq=False)
class TableSource:
    """A Delta table read through its change data feed: the lake table ``name``, or with ``path`` any
    Delta table (a view's stored result, read by a view over it) that errors call ``name``."""

    lake: Lake
    name: str
    path: str = ""

    def __post_init__(self) -> None:
        if not self.path:
            object.__setattr__(self, "path", self.lake.table_path(self.name))

    def pin(self) -> int:
        return self.lake.head_version(self.path)

    def span(self, watermark: int, head: int) -> str:
        return f"{self.name} (versions {watermark + 1}..{head})"

    def identity(self) -> str | None:
        return storage.table_id(self.path)

    def history(self, watermark: int, head: int) -> list:
        """Commits ``(watermark, head]``, read from the commit files in this process (no Spark job);
        cached on the lake (committed versions never change)."""
        key = ("history", self.path, watermark, head)
        if key not in self.lake.cache:
            self.lake.cache[key] = storage.history(self.path, watermark, head)
        return self.lake.cache[key]

    def pending_rows(self, watermark: int, head: int) -> int:
        """Change-feed rows in (watermark, head], from the commits' operation metrics (no data read);
        an updated row counts twice (pre- and post-image), as in the change data feed."""
        if head <= watermark:
            return 0
        return sum(_cdf_rows(row["operationMetrics"] or {}) for row in self.history(watermark, head))

    def pending_age_seconds(self, watermark: int, head: int) -> float:
        commits = self.history(watermark, head)
        if not commits:
            return 0.0
        oldest = min(row["timestamp"] for row in commits)
        return max(0.0, (datetime.now(timezone.utc) - oldest).total_seconds())

    def check_readable(self, watermark: int, head: int, columns: Iterable[str]) -> None:
        """Raise ChangeRangeError saying what happened and the fix: the table restored behind the
        watermark, history gone, the feed off or the table replaced in the range, a column changed."""
        table = self.name
        if head < watermark:
            raise ChangeRangeError(
                f"table {table!r} is at version {head}, behind the view's watermark {watermark}: it was "
                "restored or recreated. Rebuild the view (policy rebuild) from the table's current snapshot."
            )
        if head == watermark:
            return
        commits = self.history(watermark, head)
        versions = {int(r["version"]) for r in commits}
        missing = set(range(watermark + 1, head + 1)) - versions
        if missing:
            raise ChangeRangeError(
                f"table {table!r}: the commit history for versions {min(missing)}..{max(missing)} is gone "
                "(log retention); its changes cannot be read. Rebuild the view from a snapshot, and raise "
                "delta.logRetentionDuration or refresh more often."
            )
        for row in sorted(commits, key=lambda r: r["version"]):
            _check_commit(table, row)
        before, after = self.lake.schema_at(self.path, watermark), self.lake.schema_at(self.path, head)
        for column in columns:
            old, new = before.get(column), after.get(column)
            if old != new:
                raise ChangeRangeError(
                    f"table {table!r}: column {column!r} changed between versions {watermark} and {head} "
                    f"({old or 'absent'} -> {new or 'absent'}); the view's SQL no longer means the same. "
                    "Fix the table or the view, then rebuild the view."
                )

    def read_counted(self, watermark: int, head: int, columns: Iterable[str]) -> tuple[DataFrame, int]:
        """The netted signed delta (rows carry ``_lakeivm_m``, a non-zero signed multiplicity) and its
        number of rows (known without a Spark job when netted in this process). Materialized (local
        checkpoint), so a vacuumed range fails here, before any state is written."""
        from pyspark.sql import functions as F

        columns = list(columns)
        self.check_readable(watermark, head, columns)
        small = self._read_small(watermark, head, columns)
        if small is not None:
            return small
        try:
            delta = (
                self._spark_feed(watermark, head, columns)
                .groupBy(*columns)
                .agg(F.sum(MULTIPLICITY).cast("bigint").alias(MULTIPLICITY))
                .where(F.col(MULTIPLICITY) != 0)
            ).localCheckpoint(eager=True)
            return delta, delta.count()
        except Exception as err:  # Spark raises Py4J/Analysis errors; classify them for the user
            raise ChangeRangeError(explain_read_error(self.name, watermark, head, err)) from err

    def snapshot(self, version: int, oracle: bool = False) -> DataFrame:
        """The table at ``version``; one of at most the lake's ``limits.snapshot_rows`` rows is read by
        delta-rs and handed to Spark as local rows (no Delta snapshot job), except for the ``oracle``,
        which always reads through Spark's Delta reader so that an audit stays independent of the
        maintained path."""
        small = None if oracle else self.lake.read_small(self.path, self.lake.limits.snapshot_rows, version)
        return self.lake.read(self.path, version) if small is None else small[0]

    def _read_small(self, watermark: int, head: int, columns: list[str]) -> tuple[DataFrame, int] | None:
        """``read_counted`` for a range of at most the lake's ``limits.small_delta_rows`` change-feed
        rows (``netted_locally``), handed to Spark as local rows. Spark then loads no snapshot of the
        changed table at its new version (on a warm session the Spark read of a few changed rows costs
        jobs and a snapshot of every new table version). None: Spark reads it."""
        netted = self.netted_locally(watermark, head, columns)
        if netted is None:
            return None
        types = self.lake.schema_at(self.path, head)
        ddl = ", ".join(f"`{c}` {types[c]}" for c in columns) + f", `{MULTIPLICITY}` bigint"
        return storage.local_rows(self.lake.spark, netted, ddl), netted.num_rows

    def netted_locally(self, watermark: int, head: int, columns: list[str]):
        """The netted signed delta of ``columns`` (and ``_lakeivm_m``) as Arrow, for a range of at
        most the lake's ``limits.small_delta_rows`` change-feed rows (by its commits' metrics): read by
        delta-rs and netted with Arrow in this process. None: a commit without metrics, a table the
        gate refuses (``fastpath``: deletion vectors, column mapping, ...), a range with a commit that
        changes the table's protocol or metadata (the gate judges the head's), a key type Arrow cannot
        group, or any read error (Spark's read names it)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        lake = self.lake
        commits = self.history(watermark, head)
        unknown = any(not row["operationMetrics"] and row["operation"] not in _NO_ROWS for row in commits)
        reshaped = any(row.get("reshapes") for row in commits)
        if not columns or unknown or reshaped or self.pending_rows(watermark, head) > lake.limits.small_delta_rows:
            return None
        try:
            changes = self._feed(watermark, head)
            if changes is None:
                return None
            kind = changes["_change_type"].cast(pa.string())
            signs = pc.if_else(pc.is_in(kind, value_set=pa.array(["insert", "update_postimage"])), 1, -1).cast(pa.int64())
            rows = changes.select(columns)  # string views as plain strings: Arrow's filter has no kernel for them
            rows = plain_rows(rows).append_column(MULTIPLICITY, signs)
            netted = rows.group_by(columns, use_threads=False).aggregate([(MULTIPLICITY, "sum")])
            netted = netted.filter(pc.not_equal(netted[f"{MULTIPLICITY}_sum"], 0)).select([*columns, f"{MULTIPLICITY}_sum"])
        except Exception:  # noqa: BLE001 -- the Spark read raises the error a user can act on
            return None
        return netted.rename_columns([*columns, MULTIPLICITY])

    def _spark_feed(self, watermark: int, head: int, columns: list[str]) -> DataFrame:
        """The change feed over ``(watermark, head]`` read by Spark: ``columns`` and each row's sign
        (``_lakeivm_m``), not netted. A table that several views of a run set read (``sharing``) has
        each range read once, every column, materialized and kept for the others."""
        if self.path not in self.lake.shared:
            return self._read_feed(watermark, head, columns)
        key = (self.path, storage.table_id(self.path), watermark, head, id(self.lake.spark))
        whole = self.lake.kept("spark feeds", key, lambda: self._read_feed(watermark, head).localCheckpoint(eager=True),
                               KEPT_SPARK_FEEDS)
        return whole.select(*columns, MULTIPLICITY)

    def _read_feed(self, watermark: int, head: int, columns: list[str] | None = None) -> DataFrame:
        """``_spark_feed``'s read: Spark's plan of the feed, ``columns`` (default every column) and signs."""
        from pyspark.sql import functions as F

        feed = (self.lake.spark.read.format("delta").option("readChangeFeed", "true")
                .option("startingVersion", watermark + 1).option("endingVersion", head).load(self.path))
        sign = F.when(F.col("_change_type").isin("insert", "update_postimage"), 1).otherwise(-1)
        kept = [c for c in feed.columns if c not in CDF_COLUMNS] if columns is None else columns
        return feed.select(*kept, sign.alias(MULTIPLICITY))

    def _feed(self, watermark: int, head: int):
        """The change feed over ``(watermark, head]``, every column, read by delta-rs once per process
        (the views of a chain that read a table over the same range share it: ``lake.cache``); None
        where the gate refuses the table."""
        import pyarrow as pa

        from lakeivm.store import fastpath

        def read():
            delta_table = fastpath.load(self.path, version=head)
            if delta_table is None:
                return None
            return pa.RecordBatchReader.from_stream(delta_table.load_cdf(starting_version=watermark + 1, ending_version=head)).read_all()

        return self.lake.kept("feeds", (self.path, storage.table_id(self.path), watermark, head), read, KEPT_FEEDS)


KEPT_FEEDS = 32  # change ranges ``_feed`` keeps per lake (each at most ``limits.small_delta_rows`` rows), least recent dropped first
KEPT_SPARK_FEEDS = 16  # change ranges ``_spark_feed`` keeps while ``sharing`` (materialized by Spark), least recent dropped first
CDF_COLUMNS = ("_change_type", "_commit_version", "_commit_timestamp")  # the columns Delta's change data feed adds


@contextmanager
def sharing(lake: Lake, specs: Iterable[ViewSpec]) -> Iterator[None]:
    """Within it, a change range that two or more of ``specs`` read from one table -- a base table,
    or a view's stored result read through its feed -- is read by Spark once for all of them
    (``TableSource._spark_feed``; the local path shares every range already: ``_feed``). The tables a
    view reads are its last run's (its log): a view never run reads snapshots, not changes. The kept
    ranges are dropped at its end; inside an enclosing ``sharing`` that shares a table it changes nothing."""
    from collections import Counter

    from lakeivm.store import commit

    if lake.shared:
        yield
        return
    readers: Counter[str] = Counter()
    for spec in specs:
        last = commit.last_committed(lake, spec.name)
        for name in last.watermarks if last is not None else ():
            readers[lake.view_path(name) if name in spec.upstreams else lake.table_path(name)] += 1
    lake.shared = frozenset(path for path, n in readers.items() if n > 1)
    try:
        yield
    finally:
        lake.shared = frozenset()
        lake.cache.pop("spark feeds", None)


def read_delta(lake: Lake, table: str, watermark: int, head: int, columns: Iterable[str]) -> DataFrame:
    """The netted signed delta of source ``table`` over (watermark, head], projected to ``columns``."""
    return source(lake, table).read_counted(watermark, head, columns)[0]


_NO_ROWS = ("SET TBLPROPERTIES", "UNSET TBLPROPERTIES", "ADD COLUMNS", "CHANGE COLUMN", "ADD CONSTRAINT", "DROP CONSTRAINT")


def plain_field(field):
    """An Arrow field as pyspark reads it: view and large string/binary types as plain ones."""
    import pyarrow as pa

    plain = {pa.string_view(): pa.string(), pa.large_string(): pa.string(), pa.binary_view(): pa.binary(), pa.large_binary(): pa.binary()}
    return field.with_type(plain.get(field.type, field.type))


def plain_rows(rows):
    """An Arrow table in the types pyspark reads (``plain_field`` of each column)."""
    import pyarrow as pa

    return rows.cast(pa.schema([plain_field(f) for f in rows.schema]))


def net(changes: Iterable[tuple[Mapping[str, object], str]]) -> dict[tuple, int]:
    """Pure netting rule: (row, change_type) pairs -> {row values: multiplicity}, zeros dropped.

    >>> net([({"a": 1}, "insert"), ({"a": 1}, "delete"), ({"a": 2}, "update_postimage")])
    {(2,): 1}
    """
    totals: dict[tuple, int] = {}
    for row, change_type in changes:
        key = tuple(row.values())
        totals[key] = totals.get(key, 0) + SIGN[change_type]
    return {k: m for k, m in totals.items() if m != 0}


def _cdf_rows(metrics: Mapping[str, str]) -> int:
    if "numTargetRowsInserted" in metrics or "numUpdatedRows" in metrics:
        metrics = {k: v for k, v in metrics.items() if k != "numOutputRows"}  # rewritten files, not changes
    return sum(int(metrics.get(k, 0)) * w for k, w in _CDF_ROWS_PER_METRIC.items())


def _check_commit(table: str, row) -> None:
    operation = row["operation"]
    params = row["operationParameters"] or {}
    if operation == "SET TBLPROPERTIES":
        properties = json.loads(params.get("properties", "{}"))
        if str(properties.get(CDF, "true")).lower() == "false":
            raise ChangeRangeError(_cdf_off(table, int(row["version"])))
    if operation == "UNSET TBLPROPERTIES" and CDF in params.get("propertyKeys", ""):
        raise ChangeRangeError(_cdf_off(table, int(row["version"])))
    if operation in ("CREATE OR REPLACE TABLE", "REPLACE TABLE", "CREATE OR REPLACE TABLE AS SELECT", "REPLACE TABLE AS SELECT"):
        raise ChangeRangeError(
            f"table {table!r} was replaced at version {row['version']}; its change feed does not span "
            "the replacement. Rebuild the view from the new snapshot."
        )


def _cdf_off(table: str, version: int) -> str:
    return (
        f"table {table!r}: the change data feed was turned off at version {version}, so its changes "
        f"cannot be read. Turn it back on (ALTER TABLE ... SET TBLPROPERTIES ({CDF} = true)) and "
        "rebuild the view from a snapshot."
    )


def explain_read_error(table: str, watermark: int, head: int, err: Exception) -> str:
    """What a failed read of ``table``'s changes over (watermark, head] means, and the fix."""
    text = str(err)
    where = f"table {table!r}, changes of versions {watermark + 1}..{head}"
    if "FileNotFound" in text or "FILE_NOT_FOUND" in text or "does not exist" in text:
        return (f"{where}: change files were removed (VACUUM ran with a retention shorter than the "
                "view's backlog). Rebuild the view from a snapshot, and keep VACUUM's retention longer "
                "than the view's max pending age.")
    if "CHANGE_DATA" in text or "change data" in text.lower():
        return f"{where}: the change data feed is not available over this range ({text.splitlines()[0]}). Enable {CDF} and rebuild the view."
    return f"{where}: cannot be read: {text.splitlines()[0] if text else type(err).__name__}"
