"""The lake's files read and written from Python: Delta commit files, folders.

Everything here runs in the calling process with ``pyarrow.fs`` -- no JVM, no Spark job -- so a
Spark Connect client pins versions and reads commit histories itself, in
milliseconds. Local paths and ``file:`` URIs use the local file system; ``s3://``/``s3a://``,
``gs://``, ``abfs(s)://`` and ``hdfs://`` go through pyarrow's file systems (credentials from the
environment, as pyarrow reads them).
"""
from __future__ import annotations

import json
import os
import uuid
import weakref
from datetime import datetime, timezone
from functools import lru_cache
from typing import Any
from urllib.parse import urlparse

from lakeivm.errors import StateError

_SCHEMES = {"s3a": "s3", "s3n": "s3", "abfss": "abfs", "gcs": "gs"}


def exists(uri: str) -> bool:
    fs, path = _resolve(uri)
    from pyarrow.fs import FileType

    return fs.get_file_info(path).type != FileType.NotFound


def modified_at(uri: str) -> float | None:
    """When the file was last written, in seconds since the epoch by the store's clock (its mtime,
    an object store's Last-Modified); None if it does not exist."""
    from pyarrow.fs import FileType

    fs, path = _resolve(uri)
    info = fs.get_file_info(path)
    if info.type == FileType.NotFound or info.mtime_ns is None:
        return None
    return info.mtime_ns / 1e9


def list_names(uri: str, directories: bool | None = None) -> list[str]:
    """Names of the entries directly under ``uri`` (only folders, only files, or all); [] if absent."""
    from pyarrow.fs import FileType

    wanted = {True: (FileType.Directory,), False: (FileType.File,), None: (FileType.Directory, FileType.File)}[directories]
    return sorted(i.base_name for i in _listing(uri) if i.type in wanted)


def files_modified(uri: str) -> dict[str, float]:
    """{name: when it was last written (``modified_at``'s clock)} of the files directly under ``uri``, in one listing."""
    from pyarrow.fs import FileType

    return {i.base_name: (i.mtime_ns or 0) / 1e9 for i in _listing(uri) if i.type == FileType.File}


def _listing(uri: str) -> list:
    from pyarrow.fs import FileSelector

    fs, path = _resolve(uri)
    for attempt in range(5):
        try:
            return fs.get_file_info(FileSelector(path, allow_not_found=True))
        except FileNotFoundError:  # an entry went while being listed (a creator's temporary file): list again
            if attempt == 4:
                raise
    return []


def read_text(uri: str) -> str | None:
    """The file's UTF-8 text; None if it does not exist."""
    fs, path = _resolve(uri)
    try:
        with fs.open_input_stream(path) as stream:
            return stream.read().decode("utf-8")
    except FileNotFoundError:
        return None
    except OSError as err:
        if "not found" in str(err).lower() or "no such file" in str(err).lower():
            return None
        raise


def create_exclusive(uri: str, text: str) -> bool:
    """Create the file with ``text`` unless it exists; whether this call created it.

    On a local disk the file appears whole or not at all (written aside, then hard-linked: a link
    fails if the name exists), so a reader never sees it empty. On S3, GCS and Azure it is one
    conditional PUT (``If-None-Match: *``, by ``obstore``: the object_store library delta-rs
    commits with, configured from the same ``AWS_*``/``GOOGLE_*``/``AZURE_*`` variables), and the
    store gives the name to exactly one of racing creators. Other stores (HDFS): check, then write.
    """
    fs, path = _resolve(uri)
    if _is_local(fs):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        aside = f"{path}.{uuid.uuid4().hex}.tmp"
        with open(aside, "w", encoding="utf-8") as handle:
            handle.write(text)
        try:
            os.link(aside, path)
            return True
        except FileExistsError:
            return False
        finally:
            os.unlink(aside)
    url = urlparse(uri)
    scheme = _SCHEMES.get(url.scheme, url.scheme)
    if scheme in _OBJECT_STORES:
        import obstore
        from obstore.exceptions import AlreadyExistsError
        from obstore.store import from_url

        store = from_url(f"{scheme}://{url.netloc}/")
        try:
            obstore.put(store, url.path.lstrip("/"), text.encode("utf-8"), mode="create")
            return True
        except AlreadyExistsError:
            return False
    if exists(uri):
        return False
    with fs.open_output_stream(path) as stream:
        stream.write(text.encode("utf-8"))
    return True


_OBJECT_STORES = ("s3", "gs", "abfs", "az")  # (after _SCHEMES) stores with a conditional PUT


def move(source: str, target: str) -> None:
    """Move a file (within one file system), making the target's folder."""
    fs, path = _resolve(source)
    _, to = _resolve(target)
    fs.create_dir(os.path.dirname(to), recursive=True)
    fs.move(path, to)


def delete_file(uri: str) -> None:
    fs, path = _resolve(uri)
    try:
        fs.delete_file(path)
    except FileNotFoundError:
        pass


def delete_tree(uri: str) -> None:
    """Remove a folder and everything under it (nothing if it does not exist)."""
    fs, path = _resolve(uri)
    if exists(uri):
        fs.delete_dir(path)


# -- Delta transaction logs, read directly ---------------------------------------------------------

def is_delta(table: str) -> bool:
    """Whether ``table`` has a Delta log with at least one commit or checkpoint."""
    return any(version_of(n) is not None or n.endswith(".checkpoint.parquet") for n in list_names(f"{table}/_delta_log", False))


def head_version(table: str) -> int:
    """The newest committed version: the highest ``_delta_log/<version>.json`` (each is written
    atomically, so one that exists is committed); no Spark job, no snapshot. From the head this process
    last saw, the next versions' files are asked for one by one (a log's versions are contiguous and it
    keeps its newest); without one, or where that head's file is gone (the table deleted and written
    anew), one listing. A listing of a log of thousands of commits costs ~3 ms, a probe ~0.02 ms."""
    known = _heads.get(table)
    if known is not None and exists(_commit_file(table, known)):
        while exists(_commit_file(table, known + 1)):
            known += 1
    else:
        versions = [v for v in map(version_of, list_names(f"{table}/_delta_log", False)) if v is not None]
        if not versions:
            raise StateError(f"{table} is not a Delta table (no commit in {table}/_delta_log); create it first.")
        known = max(versions)
    _heads[table] = known
    return known


_heads: dict[str, int] = {}  # table -> the newest version head_version saw in this process


def _commit_file(table: str, version: int) -> str:
    return f"{table}/_delta_log/{version:020d}.json"


def commit_actions(table: str, version: int) -> list[dict[str, Any]] | None:
    """The actions of commit ``version`` (one JSON object per line), or None if its file is gone."""
    text = read_text(_commit_file(table, version))
    if text is None:
        return None
    try:
        actions = [json.loads(line) for line in text.splitlines() if line.strip()]
    except ValueError as err:
        raise DamagedCommit(table, version, str(err)) from err
    if not actions:
        raise DamagedCommit(table, version, "empty")
    return actions


class DamagedCommit(StateError):
    """A commit file of a Delta log that does not parse (``why``: what is wrong with it)."""

    def __init__(self, table: str, version: int, why: str) -> None:
        super().__init__(f"{table}: commit file {version:020d}.json is damaged ({why}); the table's history cannot be "
                         "read. For lakeivm's _system tables run `lakeivm repair`; for other tables restore the file "
                         "from a backup, or rebuild what reads the table.")
        self.why = why


def table_id(table: str) -> str:
    """The Delta table's identity (``metaData.id``): set when the table is created and kept by every
    later commit, so a table deleted and created anew at the same path has another. Read from
    commit 0 (one small file), or by delta-rs from the checkpoint once log cleanup removed it."""
    actions = commit_actions(table, 0)
    for action in actions or ():
        if "metaData" in action:
            return action["metaData"]["id"]
    from deltalake import DeltaTable

    return DeltaTable(table).metadata().id


def history(table: str, after: int, upto: int) -> list[dict[str, Any]]:
    """The commitInfo of versions ``after``+1..``upto`` that still exist, oldest first (see ``commit_info``)."""
    return [info for version in range(after + 1, upto + 1) if (info := commit_info(table, version)) is not None]


def commit_info(table: str, version: int) -> dict[str, Any] | None:
    """What ``DESCRIBE HISTORY`` says of commit ``version``: version, timestamp (UTC), operation,
    operationParameters, operationMetrics, userMetadata; and ``reshapes``: whether the commit changes
    the table's protocol or metadata (schema, properties). None if its commit file is gone."""
    actions = commit_actions(table, version)
    if actions is None:
        return None
    info = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
    stamp = info.get("inCommitTimestamp") or info.get("timestamp") or 0
    return {"version": version, "timestamp": datetime.fromtimestamp(stamp / 1000, timezone.utc),
            "operation": info.get("operation", ""), "operationParameters": info.get("operationParameters") or {},
            "operationMetrics": info.get("operationMetrics") or {}, "userMetadata": info.get("userMetadata"),
            "reshapes": any("metaData" in action or "protocol" in action for action in actions)}


def schema_at(table: str, version: int | None = None) -> dict[str, str]:
    """{column: Spark SQL type} of the Delta table at ``version`` (newest if None), read from its
    log by delta-rs: no Spark job, no snapshot on a server."""
    from deltalake import DeltaTable

    return spark_columns(DeltaTable(table, version=version))


def lake_table_schemas(root: str) -> dict[str, dict[str, str]]:
    """{table: {column: Spark SQL type}} of a lake's base tables (``<root>/tables/<name>``) at their
    newest versions, by delta-rs; one it cannot read (not a Delta table yet, a table feature it
    lacks) is left out, and a lake that does not exist has none."""
    schemas = {}
    for name in list_names(f"{root}/tables", directories=True):
        try:
            schemas[name] = schema_at(f"{root}/tables/{name}")
        except Exception:  # noqa: BLE001 -- whatever delta-rs cannot read is simply not known here
            continue
    return schemas


def local_rows(spark, rows, schema=None):
    """An Arrow table of this process as a Spark frame of local rows (``schema``: a DDL string or a
    StructType; by default the table's own types). Its empty record batches are dropped first:
    pyspark 4.2's ``createDataFrame`` keeps only the rows before the first empty batch that follows
    rows -- batches of [13, 0, 0, 0, 2] rows give 13, silently. A delta-rs scan with a filter yields
    an empty batch for each file it matches nothing in (``tests/test_fastpath.py``)."""
    import pyarrow as pa

    from lakeivm.spark import is_connect

    batches = rows.to_batches()
    if any(batch.num_rows == 0 for batch in batches):
        rows = pa.Table.from_batches([batch for batch in batches if batch.num_rows], schema=rows.schema)
    if schema is None:
        from pyspark.sql.pandas.types import from_arrow_schema

        schema = from_arrow_schema(rows.schema)
    elif isinstance(schema, str) and not is_connect(spark):  # (Connect sends the string to its server)
        schema = _parsed_ddl(schema)
    frame = spark.createDataFrame(rows, schema=schema)
    _LOCAL_ROWS[frame] = rows.num_rows
    return frame


def _parsed_ddl(ddl: str):
    """A DDL schema as the Spark type ``createDataFrame`` would parse it to, parsed by the JVM (a py4j
    call) once per process: a run makes dozens of ``local_rows`` with the same few schemas."""
    from pyspark.sql.types import _parse_datatype_json_string

    return _parse_datatype_json_string(_ddl_json(ddl))  # a new object each time: callers may not share one


@lru_cache(maxsize=4096)
def _ddl_json(ddl: str) -> str:
    from pyspark.sql.types import _parse_datatype_string

    return _parse_datatype_string(ddl).json()


_LOCAL_ROWS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # {frame of ``local_rows``: its number of rows}


def counted(frame) -> int:
    """``frame``'s number of rows: known without a Spark job for a frame of ``local_rows``, else counted."""
    known = _LOCAL_ROWS.get(frame)
    return frame.count() if known is None else known


def is_in(column: str, values, kind):
    """A filter of a delta-rs scan (``to_pyarrow_dataset``): ``column``, of the stored Arrow type
    ``kind``, holds one of ``values`` (an Arrow array; NULL matches NULL). delta-rs 1.6 turns each
    file's statistics into a guarantee Arrow prunes the file by, and two are wrong: a boolean column
    Spark wrote (no min/max) gets ``>= null``, so every file is pruned and the scan returns no row;
    string statistics of files delta-rs wrote come as view-typed literals, and pruning fails ("no
    kernel matching (string, string_view)"). Such a column is compared through a cast to its own
    type, which Arrow does not prune by (``tests/test_fastpath.py``); others keep their pruning."""
    import pyarrow as pa
    import pyarrow.compute as pc

    values = values.cast(kind)
    if pa.types.is_boolean(kind) or pa.types.is_string(kind) or pa.types.is_large_string(kind) \
            or pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return pc.field(column).cast(kind).isin(values)
    return pc.field(column).isin(values)


def spark_columns(table) -> dict[str, str]:
    """{column: Spark SQL type} of a loaded delta-rs ``DeltaTable``."""
    return {f["name"]: _spark_type(f["type"]) for f in json.loads(table.schema().to_json())["fields"]}


def spark_ddl(table) -> str:
    """A loaded delta-rs ``DeltaTable``'s columns as a Spark DDL string (``local_rows``' schema)."""
    return ", ".join(f"`{name}` {kind}" for name, kind in spark_columns(table).items())


def row_count(table: str) -> int:
    """Rows in the table's current files, from the log's per-file statistics (delta-rs; no scan)."""
    from deltalake import DeltaTable

    return rows_in(DeltaTable(table))


def distinct_bounds(table: str) -> tuple[int, dict[str, int]]:
    """The table's rows and, per integer column, at most how many distinct values it holds: the
    span of its files' min/max statistics (``max - min + 1``), at most its rows (delta-rs; no scan).
    A column some file has no statistics for is left out. A join's fan-out is estimated from them
    (``lakeivm.sql.join_order``)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    actions = pa.table(DeltaTable(table).get_add_actions(flatten=True))  # (delta-rs returns arro3 tables)
    rows = rows_in_actions(actions)
    bounds = {}
    for name in actions.column_names:
        if not name.startswith("min.") or f"max.{name[4:]}" not in actions.column_names:
            continue
        low, high = actions.column(name), actions.column(f"max.{name[4:]}")
        if not pa.types.is_integer(low.type) or low.null_count or high.null_count or not actions.num_rows:
            continue
        bounds[name[4:]] = min(rows, int(pc.max(high).as_py()) - int(pc.min(low).as_py()) + 1)
    return rows, bounds


def rows_in_actions(actions, unknown: int = 0) -> int:
    """Rows of the files in delta-rs ``get_add_actions`` rows, by their statistics (see ``rows_in``)."""
    counts = actions.column("num_records").to_pylist() if actions.num_rows else []
    return int(sum(unknown if n is None else n for n in counts))


def rows_in(table, unknown: int = 0) -> int:
    """Rows in a loaded delta-rs ``DeltaTable``'s files, from their statistics; a file written
    without them counts as ``unknown`` rows."""
    return rows_in_actions(table.get_add_actions(flatten=True), unknown)


_PRIMITIVES = {"integer": "int", "long": "bigint", "short": "smallint", "byte": "tinyint"}


def _spark_type(kind: Any) -> str:
    """A Delta protocol type (JSON) as Spark's ``simpleString``."""
    if isinstance(kind, str):
        return _PRIMITIVES.get(kind, kind)
    if kind["type"] == "array":
        return f"array<{_spark_type(kind['elementType'])}>"
    if kind["type"] == "map":
        return f"map<{_spark_type(kind['keyType'])},{_spark_type(kind['valueType'])}>"
    return "struct<" + ",".join(f"{f['name']}:{_spark_type(f['type'])}" for f in kind["fields"]) + ">"


def version_of(name: str) -> int | None:
    """The version a ``_delta_log`` file name commits (``00000000000000000012.json`` -> 12), else None."""
    stem = name[:-5] if name.endswith(".json") else ""
    return int(stem) if stem.isdigit() else None


@lru_cache(maxsize=32)
def _filesystem(scheme: str, netloc: str):
    from pyarrow import fs

    if scheme in ("", "file"):
        return fs.LocalFileSystem()
    return fs.FileSystem.from_uri(f"{_SCHEMES.get(scheme, scheme)}://{netloc}/")[0]


def _resolve(uri: str):
    """(pyarrow FileSystem, path within it) for a local path or URI."""
    url = urlparse(uri)
    scheme = url.scheme if len(url.scheme) > 1 else ""  # C:\\ is not a scheme
    if scheme in ("", "file"):
        return _filesystem("", ""), os.path.abspath(url.path if scheme else uri)
    try:
        fs = _filesystem(scheme, url.netloc)
    except Exception as err:
        raise StateError(f"cannot open the lake at {uri}: pyarrow has no file system for {scheme}:// ({err}); "
                         "use a local path, s3a://, gs://, abfss:// or hdfs://.") from err
    return fs, f"{url.netloc}{url.path}".rstrip("/")


def _is_local(fs) -> bool:
    return type(fs).__name__ == "LocalFileSystem"
