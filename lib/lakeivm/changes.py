"""Change capture: Delta's change data feed -> netted signed-multiplicity deltas (ARCHITECTURE §4.2, §4.4).

A table's pending range is (watermark, head]. Before reading it we check it is readable -- the
change data feed on over the range, the history still there, the view's columns unchanged -- and
raise ChangeRangeError saying what happened and how to fix it; the engine then applies the view's
``on_unreadable_changes`` policy. Files removed by VACUUM are detected when the range is read.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from lakeivm import storage
from lakeivm.errors import ChangeRangeError
from lakeivm.columns import MULTIPLICITY
from lakeivm.lake import CDF, Lake
from lakeivm.limits import SMALL_DELTA_ROWS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

SIGN = {"insert": 1, "update_postimage": 1, "delete": -1, "update_preimage": -1}
_CDF_ROWS_PER_METRIC = {"numOutputRows": 1, "numDeletedRows": 1, "numUpdatedRows": 2,
                        "numTargetRowsInserted": 1, "numTargetRowsDeleted": 1, "numTargetRowsUpdated": 2,
                        # delta-rs (and writers built on it: polars, lakeivm's own datagen) names them in snake case;
                        # its MERGE's num_output_rows includes copied rows, so only these count
                        "num_added_rows": 1, "num_deleted_rows": 1, "num_updated_rows": 2,
                        "num_target_rows_inserted": 1, "num_target_rows_deleted": 1, "num_target_rows_updated": 2}


def pin(lake: Lake, tables: Iterable[str]) -> dict[str, int]:
    """Head version of each table: the run reads every table up to this version and no further
    (for a view read as a source, the seq of its last consistent run: ``lakeivm.upstream``)."""
    return {t: lake.upstreams[t].pin() if t in lake.upstreams else lake.head_version(lake.table_path(t))
            for t in tables}


def identities(lake: Lake, tables: Iterable[str]) -> dict[str, str]:
    """Each base table's Delta id (``storage.table_id``); a view read as a source has none: its
    runs are numbered by the log the reading view shares, so they cannot be replaced under it."""
    return {t: storage.table_id(lake.table_path(t)) for t in tables if t not in lake.upstreams}


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


def pending_rows(lake: Lake, table: str, watermark: int, head: int, path: str | None = None) -> int:
    """Change-feed rows in (watermark, head], from the commits' operation metrics (no data read).

    An updated row counts twice (pre- and post-image), as in the change data feed. ``path``: the
    Delta table's, where it is not the lake table ``table`` (a view's result, read by a view over it).
    """
    if path is None and table in lake.upstreams:
        return lake.upstreams[table].pending_rows(watermark, head)
    if head <= watermark:
        return 0
    return sum(_cdf_rows(row["operationMetrics"] or {}) for row in history(lake, table, watermark, head, path))


def pending_age_seconds(lake: Lake, table: str, watermark: int, head: int) -> float:
    """Seconds since the oldest commit in (watermark, head] was written (0 when nothing is pending)."""
    from datetime import datetime, timezone

    if table in lake.upstreams:
        return lake.upstreams[table].pending_age_seconds(watermark, head)
    commits = history(lake, table, watermark, head)
    if not commits:
        return 0.0
    oldest = min(row["timestamp"] for row in commits)
    return max(0.0, (datetime.now(timezone.utc) - oldest).total_seconds())


def check_readable(lake: Lake, table: str, watermark: int, head: int, columns: Iterable[str], path: str | None = None) -> None:
    """Raise ChangeRangeError if (watermark, head] of ``table`` (at ``path``, as ``pending_rows``)
    cannot be read as changes."""
    if path is None and table in lake.upstreams:
        return lake.upstreams[table].check_readable(watermark, head, columns)
    path = path or lake.table_path(table)
    if head < watermark:
        raise ChangeRangeError(
            f"table {table!r} is at version {head}, behind the view's watermark {watermark}: it was "
            "restored or recreated. Rebuild the view (policy rebuild) from the table's current snapshot."
        )
    if head == watermark:
        return
    commits = history(lake, table, watermark, head, path)
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
    before, after = lake.schema_at(path, watermark), lake.schema_at(path, head)
    for column in columns:
        old, new = before.get(column), after.get(column)
        if old != new:
            raise ChangeRangeError(
                f"table {table!r}: column {column!r} changed between versions {watermark} and {head} "
                f"({old or 'absent'} -> {new or 'absent'}); the view's SQL no longer means the same. "
                "Fix the table or the view, then rebuild the view."
            )


def read_delta(lake: Lake, table: str, watermark: int, head: int, columns: Iterable[str]) -> DataFrame:
    """The netted signed delta of ``table`` over (watermark, head], projected to ``columns``.

    Rows carry ``_lakeivm_m`` (a non-zero signed multiplicity); the result is materialized
    (local checkpoint), so a vacuumed range fails here, before any state is written.
    """
    return read_counted(lake, table, watermark, head, columns)[0]


def read_counted(lake: Lake, table: str, watermark: int, head: int, columns: Iterable[str],
                 path: str | None = None) -> tuple[DataFrame, int]:
    """``read_delta`` and its number of rows (known without a Spark job when netted in this process);
    ``path`` as ``pending_rows``."""
    from pyspark.sql import functions as F

    if path is None and table in lake.upstreams:
        delta = lake.upstreams[table].read_delta(watermark, head, columns)
        return delta, delta.count()
    columns, path = list(columns), path or lake.table_path(table)
    check_readable(lake, table, watermark, head, columns, path)
    small = _read_small_delta(lake, table, watermark, head, columns, path)
    if small is not None:
        return small
    sign = F.when(F.col("_change_type").isin("insert", "update_postimage"), 1).otherwise(-1)
    try:
        changes = (
            lake.spark.read.format("delta")
            .option("readChangeFeed", "true")
            .option("startingVersion", watermark + 1)
            .option("endingVersion", head)
            .load(path)
        )
        delta = (
            changes.select(*columns, sign.alias(MULTIPLICITY))
            .groupBy(*columns)
            .agg(F.sum(MULTIPLICITY).cast("bigint").alias(MULTIPLICITY))
            .where(F.col(MULTIPLICITY) != 0)
        ).localCheckpoint(eager=True)
        return delta, delta.count()
    except Exception as err:  # Spark raises Py4J/Analysis errors; classify them for the user
        raise ChangeRangeError(_explain_read_error(table, watermark, head, err)) from err


_NO_ROWS = ("SET TBLPROPERTIES", "UNSET TBLPROPERTIES", "ADD COLUMNS", "CHANGE COLUMN", "ADD CONSTRAINT", "DROP CONSTRAINT")


def _read_small_delta(lake: Lake, table: str, watermark: int, head: int, columns: list[str], path: str) -> tuple[DataFrame, int] | None:
    """``read_delta`` for a range of at most SMALL_DELTA_ROWS change-feed rows (by its commits'
    metrics): read by delta-rs and netted with Arrow in this process, handed to Spark as local rows.
    Spark then loads no snapshot of the changed table at its new version (on a warm session the
    Spark read of a few changed rows costs jobs and a snapshot of every new table version). None:
    Spark reads it -- a commit without metrics, a table the gate refuses (``fastpath``: deletion
    vectors, column mapping, ...), a range with a commit that changes the table's protocol or
    metadata (the gate judges the head's), a key type Arrow cannot group, or any read error
    (Spark's read names it)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from lakeivm import fastpath

    commits = history(lake, table, watermark, head, path)
    unknown = any(not row["operationMetrics"] and row["operation"] not in _NO_ROWS for row in commits)
    reshaped = any(row.get("reshapes") for row in commits)
    if not columns or unknown or reshaped or pending_rows(lake, table, watermark, head, path) > SMALL_DELTA_ROWS:
        return None
    types = lake.schema_at(path, head)
    try:
        delta_table = fastpath.load(path, version=head)
        if delta_table is None:
            return None
        reader = delta_table.load_cdf(starting_version=watermark + 1, ending_version=head, columns=[*columns, "_change_type"])
        changes = pa.RecordBatchReader.from_stream(reader).read_all()
        kind = changes["_change_type"].cast(pa.string())
        signs = pc.if_else(pc.is_in(kind, value_set=pa.array(["insert", "update_postimage"])), 1, -1).cast(pa.int64())
        rows = changes.select(columns)  # string views as plain strings: Arrow's filter has no kernel for them
        rows = rows.cast(pa.schema([plain_field(f) for f in rows.schema])).append_column(MULTIPLICITY, signs)
        netted = rows.group_by(columns, use_threads=False).aggregate([(MULTIPLICITY, "sum")])
        netted = netted.filter(pc.not_equal(netted[f"{MULTIPLICITY}_sum"], 0)).select([*columns, f"{MULTIPLICITY}_sum"])
    except Exception:  # noqa: BLE001 -- the Spark read below raises the error a user can act on
        return None
    ddl = ", ".join(f"`{c}` {types[c]}" for c in columns) + f", `{MULTIPLICITY}` bigint"
    return lake.spark.createDataFrame(netted.rename_columns([*columns, MULTIPLICITY]), schema=ddl), netted.num_rows


def plain_field(field):
    """An Arrow field as pyspark reads it: view and large string/binary types as plain ones."""
    import pyarrow as pa

    plain = {pa.string_view(): pa.string(), pa.large_string(): pa.string(), pa.binary_view(): pa.binary(), pa.large_binary(): pa.binary()}
    return field.with_type(plain.get(field.type, field.type))


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


def history(lake: Lake, table: str, watermark: int, head: int, path: str | None = None) -> list:
    """Commits (watermark, head] of ``table`` (at ``path``), read from its commit files in this
    process (no Spark job); cached on the lake (committed versions never change)."""
    path = path or lake.table_path(table)
    key = ("history", path, watermark, head)
    if key not in lake.cache:
        lake.cache[key] = storage.history(path, watermark, head)
    return lake.cache[key]


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


def _explain_read_error(table: str, watermark: int, head: int, err: Exception) -> str:
    text = str(err)
    where = f"table {table!r}, changes of versions {watermark + 1}..{head}"
    if "FileNotFound" in text or "FILE_NOT_FOUND" in text or "does not exist" in text:
        return (f"{where}: change files were removed (VACUUM ran with a retention shorter than the "
                "view's backlog). Rebuild the view from a snapshot, and keep VACUUM's retention longer "
                "than the view's max pending age.")
    if "CHANGE_DATA" in text or "change data" in text.lower():
        return f"{where}: the change data feed is not available over this range ({text.splitlines()[0]}). Enable {CDF} and rebuild the view."
    return f"{where}: cannot be read: {text.splitlines()[0] if text else type(err).__name__}"
