"""The system tables (``_system/log``, ``_system/costs``) read and appended in this process.

They are small Delta tables of one row per run, read and appended once or twice per run. Going
through Spark costs a job, a snapshot and a commit per read or append; with delta-rs (the
``deltalake`` package) there is no JVM -- so a run's bookkeeping is cheap and a refresh with nothing
pending needs no Spark at all. They stay
ordinary Delta tables (CDF readers, Spark, DuckDB read them); appends are blind, so concurrent
writers never conflict, and creation is idempotent under concurrent first runs.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from lakeivm.config import SCHEMAS
from lakeivm.errors import StateError


def columns(schema_file: str) -> dict[str, str]:
    """{column: Spark SQL type} of a system table (``lakeivm/schemas/system/<schema_file>``)."""
    return json.loads((SCHEMAS / "system" / schema_file).read_text())["columns"]


def arrow_schema(schema_file: str):
    """The table's Arrow schema, from its Spark SQL column types."""
    import pyarrow as pa

    return pa.schema([(name, _arrow_type(kind)) for name, kind in columns(schema_file).items()])


def ensure(path: str, schema_file: str) -> None:
    """Create the table if it does not exist, exactly once under concurrent first runs: its first
    commit is made aside and put in place create-if-absent, so a losing creator changes nothing."""
    import tempfile
    from pathlib import Path

    from deltalake import write_deltalake

    from lakeivm.store import storage

    if storage.is_delta(path):
        return
    with tempfile.TemporaryDirectory() as scratch:
        write_deltalake(scratch, arrow_schema(schema_file).empty_table(),  # an empty table: version 0 adds no file
                        configuration={"delta.checkpointInterval": str(CHECKPOINT_EVERY)})
        first = (Path(scratch) / "_delta_log" / f"{0:020d}.json").read_text()
    storage.create_exclusive(f"{path}/_delta_log/{0:020d}.json", first)


def read(path: str, where: Sequence[tuple[str, str, Any]] = (), version: int | None = None) -> list[dict[str, Any]]:
    """The rows (optionally filtered, e.g. ``[("view", "=", "v")]``; newest version unless given)
    as dicts; timestamps naive local time and maps as dicts, as Spark's ``collect`` gave them."""
    from deltalake import DeltaTable

    if any(op != "=" for _, op, _ in where):
        raise ValueError(f"only '=' filters: {where}")
    try:
        delta = DeltaTable(path, version=version)
        _check_gate(path, delta)
        rows = _local_rows(delta, where)
        if rows is None:
            rows = [from_arrow(row) for row in delta.to_pyarrow_table(filters=list(where) or None).to_pylist()]
    except StateError:
        raise
    except Exception as err:
        raise StateError(f"system table {path} cannot be read ({str(err).splitlines()[0]}); if its _delta_log "
                         "was damaged, run `lakeivm repair`.") from err
    return rows


def _local_rows(delta, where: Sequence[tuple[str, str, Any]]) -> list[dict[str, Any]] | None:
    """The rows of ``delta`` where every ``(column, "=", value)`` holds, as ``read`` gives them; None
    unless it is a local table without reader features or partitions (as lakeivm writes them).

    Its files are read one by one by ``pyarrow.parquet`` and filtered in Python: delta-rs's own scan
    goes through ``pyarrow.dataset``, and pyarrow turns timestamps into datetimes and Python values
    into Arrow ones through pandas -- importing either would dominate a no-op ``lakeivm refresh``.
    Timestamps are read as their microseconds since the epoch instead.
    """
    uris = delta.file_uris()
    if delta.protocol().min_reader_version > 1 or delta.metadata().partition_columns or not all(u.startswith("/") for u in uris):
        return None
    import pyarrow as pa
    import pyarrow.parquet as pq

    names = [f.name for f in delta.schema().fields]
    rows = []
    for uri in uris:
        part = pq.ParquetFile(uri).read()
        keep = list(range(part.num_rows))
        for column, _, value in where:
            values = _pylist(part.column(column), pa) if column in part.column_names else [None] * part.num_rows
            keep = [i for i in keep if values[i] == value]
        if keep:  # a column added after this file was written is null in it
            columns = [_picked(part.column(name), keep, pa) if name in part.column_names else [None] * len(keep) for name in names]
            rows += [from_arrow(dict(zip(names, row))) for row in zip(*columns)]
    return rows


def _picked(column, rows: list[int], pa) -> list:
    """``_pylist(column)`` at ``rows``: cell by cell when they are few (one view's rows of a long log)."""
    if pa.types.is_timestamp(column.type):
        micros = _micros(column, pa)
        return [_local_time(micros[i]) for i in rows]
    if 8 * len(rows) >= len(column):
        values = column.to_pylist()
        return [values[i] for i in rows]
    return [column[i].as_py() for i in rows]


def _pylist(column, pa) -> list:
    """``column.to_pylist()``, a timestamp as a naive local datetime like ``from_arrow`` makes (not through pandas)."""
    if not pa.types.is_timestamp(column.type):
        return column.to_pylist()
    return [_local_time(us) for us in _micros(column, pa)]


def _micros(column, pa) -> list[int | None]:
    if column.type.unit != "us":
        raise ValueError(f"timestamps in {column.type.unit}, expected us")
    return [us for chunk in column.chunks for us in chunk.view(pa.int64()).to_pylist()]


def _local_time(micros: int | None) -> datetime | None:
    return None if micros is None else datetime.fromtimestamp((_EPOCH + timedelta(microseconds=micros)).timestamp())


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def append(path: str, schema_file: str, rows: Iterable[Mapping[str, Any]], after: int | None = None) -> int | None:
    """Append ``rows`` (dicts by column name) in one commit; returns the new table version.
    A log written before a column existed gains it (schema merge).

    Blind by default (concurrent appends never conflict). With ``after``, the commit is version
    ``after`` + 1 or nothing: if another commit took that version first, nothing is written and
    None is returned -- Delta's own put-if-absent of the commit file decides, so a caller that
    checked the table at ``after`` appends only if nothing changed since (``commit.Lease``).
    """
    import pyarrow as pa
    from deltalake import CommitProperties, DeltaTable, write_deltalake
    from deltalake.exceptions import CommitFailedError

    schema = arrow_schema(schema_file)
    data = pa.Table.from_pylist([{c: _to_arrow(row.get(c)) for c in schema.names} for row in rows], schema=schema)
    if after is None:
        write_deltalake(_check_gate(path, DeltaTable(path), write=True), data, mode="append", schema_mode="merge")
        version = DeltaTable(path).version()
    else:
        try:
            write_deltalake(_check_gate(path, DeltaTable(path, version=after), write=True), data, mode="append", schema_mode="merge",
                            commit_properties=CommitProperties(max_commit_retries=0))
        except CommitFailedError:
            return None
        version = after + 1
    if version % COMPACT_EVERY == 0:
        compact(path)
    return version


def _check_gate(path: str, delta, write: bool = False):
    """``delta`` (a loaded delta-rs table of a system table) if delta-rs reads (``write``: and writes)
    it exactly as Spark does (``fastpath``), else a StateError naming the feature: lakeivm reads and
    writes its system tables with delta-rs alone, and creates them without such features."""
    from lakeivm.store import fastpath

    why = fastpath.refusal(delta, write)
    if why is not None:
        raise StateError(f"system table {path} uses {why}, which lakeivm does not {'write' if write else 'read'} there "
                         "(it reads and writes its system tables without Spark). Undo the ALTER TABLE that enabled it, or "
                         "move the folder aside to start a new log (every view then rebuilds).")
    return delta


CHECKPOINT_EVERY = 10  # commits: every read of a system table replays at most this many JSON commits (not Delta's 100)
COMPACT_EVERY = 20  # commits: a system table holds at most about this many small files beside its compacted ones
COMPACT_TARGET_BYTES = 8 << 20  # a compacted file this large is left alone; the next one starts


def compact(path: str) -> None:
    """Rewrite the table's small files as one (delta-rs OPTIMIZE: rows unchanged, a commit with no
    data change). Every append is a file, and a fresh process -- each Airflow task, each CLI
    command -- reads them all, so a read slows with every uncompacted append
    (``lakeivm bench log``). A concurrent compaction or append that wins the commit leaves this one undone; the
    next is due ``COMPACT_EVERY`` commits later. Runs' fenced appends retry past it (``commit.Lease``)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaError

    try:
        DeltaTable(path).optimize.compact(target_size=COMPACT_TARGET_BYTES)
    except DeltaError:
        pass


def repair(path: str) -> tuple[list[str], bool]:
    """Check every commit file of the system table at ``path``; move a damaged newest one aside (to
    ``<path>/_damaged/``, which Delta ignores) so the table reads again. Returns what was found and
    done, and whether the table reads now. A damaged or missing commit below the newest cannot be
    repaired here (the table would lose history other rows depend on): it is reported with the fix,
    restoring the file from a backup.
    """
    import time

    from lakeivm.store import storage

    log = f"{path}/_delta_log"
    versions = sorted(v for v in map(storage.version_of, storage.list_names(log, False)) if v is not None)
    if not versions:
        return [f"{path}: no commit files (created on the next run)"], True
    head = versions[-1]
    report, ok = [], True
    missing = sorted(set(range(versions[0], head + 1)) - set(versions))
    if missing:
        report.append(f"{path}: commit files {missing} are missing below the newest ({head}); restore them from a "
                      "backup (lakeivm cannot rebuild a system table's history).")
        ok = False
    for version in versions:
        try:
            storage.commit_actions(path, version)
        except storage.DamagedCommit as err:
            if version != head:
                report.append(f"{err} It is not the newest commit: restore it from a backup.")
                ok = False
                continue
            aside = f"{path}/_damaged/{version:020d}.json.{int(time.time())}"
            storage.move(f"{log}/{version:020d}.json", aside)
            report.append(f"{path}: the newest commit file ({version:020d}.json) was damaged ({err.why}); moved it "
                          f"aside to {aside}. A run it committed is rolled forward from its data file on the view's "
                          "next refresh.")
    return report or [f"{path}: {len(versions)} commit files, all readable"], ok


def _arrow_type(kind: str):
    import pyarrow as pa

    kind = kind.strip().upper()
    if kind.startswith("MAP<"):
        key, value = kind[4:-1].split(",", 1)
        return pa.map_(_arrow_type(key), _arrow_type(value))
    if kind.startswith("ARRAY<"):
        return pa.list_(_arrow_type(kind[6:-1]))
    return {"STRING": pa.string(), "BIGINT": pa.int64(), "DOUBLE": pa.float64(), "BOOLEAN": pa.bool_(),
            "TIMESTAMP": pa.timestamp("us", tz="UTC")}[kind]


def _to_arrow(value: Any) -> Any:
    if isinstance(value, Mapping):
        return list(value.items())
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, datetime) and value.tzinfo is None:
        return value.astimezone(timezone.utc)  # naive values are local time, as Spark's collect returns them
    return value


def from_arrow(row: dict[str, Any]) -> dict[str, Any]:
    """A row as read by pyarrow, as Spark's ``collect`` gave it (maps as dicts, naive local times)."""
    out = {}
    for key, value in row.items():
        if isinstance(value, list) and value and isinstance(value[0], tuple):
            value = dict(value)
        elif isinstance(value, datetime) and value.tzinfo is not None:
            value = datetime.fromtimestamp(value.timestamp())
        out[key] = value
    return out
