"""The gate of the non-Spark paths (``lakeivm.store.fastpath``), proved against Spark feature by feature.

For each Delta table feature, a table that uses it -- built by Spark, with inserts, an update and a
delete after the feature is on -- and every fast path of lakeivm against Spark's answer on the
same version: the schema, a read of the head and of an older version, a filtered scan, the change
feed of a range, a MERGE, an overwrite and a RESTORE. A path the gate admits must give exactly what
Spark gives (and must be taken: the commit it writes is delta-rs's); a path it refuses must leave
the work to Spark and write nothing itself. ``ADMITTED`` is the gate's expected answer per feature:
a feature moves into it with this test, not before.
"""
from __future__ import annotations

from collections import Counter
from datetime import datetime, timezone
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from lakeivm.sources import changes
from lakeivm.store import fastpath, storage
from lakeivm.sources.changes import net
from lakeivm.views import state

BASE = "k INT, a INT, b INT, s STRING, d DECIMAL(10,2), dt DATE"
# feature -> (extra column DDL or "", its value for a new row as SQL over k or None: generated, table clause)
FEATURES: dict[str, tuple[str, str | None, str]] = {
    "plain": ("", None, ""),
    "partitioned": ("", None, "PARTITIONED BY (s)"),
    # partition values are strings in the log: a timestamp's, written under a session time zone other than UTC
    "timestamp_partitioned": ("ts TIMESTAMP", "to_timestamp(concat('2024-03-1', k % 9, ' 23:30:00'))", "PARTITIONED BY (ts)"),
    "column_mapping_name": ("", None, ""),  # upgraded in place after data, then two columns swapped by RENAME
    "column_mapping_id": ("", None, "TBLPROPERTIES ('delta.columnMapping.mode' = 'id')"),
    "deletion_vectors": ("", None, "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')"),
    "type_widening": ("", None, "TBLPROPERTIES ('delta.enableTypeWidening' = 'true')"),  # a: INT -> BIGINT after data
    "timestamp_ntz": ("t TIMESTAMP_NTZ", "to_timestamp_ntz(concat('2024-01-0', k % 9 + 1, ' 10:30:00'))", ""),
    "row_tracking": ("", None, "TBLPROPERTIES ('delta.enableRowTracking' = 'true')"),
    "check_constraint": ("", None, ""),  # ADD CONSTRAINT before data
    "generated_column": ("g INT GENERATED ALWAYS AS (k * 2)", None, ""),
    "identity_column": ("id BIGINT GENERATED ALWAYS AS IDENTITY", None, ""),
    "append_only": ("", None, "TBLPROPERTIES ('delta.appendOnly' = 'true')"),
    "in_commit_timestamps": ("", None, "TBLPROPERTIES ('delta.enableInCommitTimestamps' = 'true')"),
    "v2_checkpoint": ("", None, "TBLPROPERTIES ('delta.checkpointPolicy' = 'v2', 'delta.checkpointInterval' = '2')"),
    "clustering": ("", None, "CLUSTER BY (k)"),
}
# feature -> why an admitted table's change feed is read by Spark all the same (delta-rs fails, the path falls back)
FALLS_BACK = {"timestamp_partitioned": "delta-rs's change feed escapes the partition folder's name twice: file not found"}
# feature -> (delta-rs may read it, delta-rs may write it): the gate's answer
ADMITTED = {name: (True, True) for name in ("plain", "partitioned", "timestamp_partitioned", "timestamp_ntz")}
ADMITTED.update({name: (True, False) for name in ("row_tracking", "check_constraint", "generated_column", "identity_column",
                                                  "append_only", "in_commit_timestamps", "clustering")})


def build(spark, feature: str, path: str) -> int:
    """Create the feature's table at ``path`` with Spark and change it; returns the version after
    its first insert that a change range may start from (its later commits keep the schema)."""
    zone = spark.conf.get("spark.sql.session.timeZone")
    if feature == "timestamp_partitioned":
        spark.conf.set("spark.sql.session.timeZone", "America/Los_Angeles")
    try:
        return _create_and_change(spark, feature, path)
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)


def _create_and_change(spark, feature: str, path: str) -> int:
    extra, value, clause = FEATURES[feature]
    columns = BASE + (f", {extra}" if extra else "")
    props = "" if "TBLPROPERTIES" in clause else " TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')"
    clause = clause.replace("TBLPROPERTIES (", "TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true', ")
    table = f"delta.`{path}`"
    spark.sql(f"CREATE TABLE {table} ({columns}) USING delta {clause}{props}")
    if feature == "check_constraint":
        spark.sql(f"ALTER TABLE {table} ADD CONSTRAINT k_non_negative CHECK (k >= 0)")
    named = "k, a, b, s, d, dt" + (f", {extra.split()[0]}" if value else "")

    def insert(keys: range) -> None:
        spark.sql(f"INSERT INTO {table} ({named}) SELECT k, k * 10, 100 - k, CASE WHEN k % 3 = 0 THEN NULL ELSE "
                  f"concat('s', k % 3) END, CAST(k * 1.25 AS DECIMAL(10,2)), date_add(DATE'2024-01-01', k)"
                  f"{', ' + value if value else ''} FROM (SELECT explode(sequence({keys.start}, {keys.stop - 1})) AS k)")

    insert(range(0, 6))
    if feature == "column_mapping_name":
        spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('delta.columnMapping.mode' = 'name', "
                  "'delta.minReaderVersion' = '2', 'delta.minWriterVersion' = '5')")
        for old, new in (("a", "tmp"), ("b", "a"), ("tmp", "b")):
            spark.sql(f"ALTER TABLE {table} RENAME COLUMN {old} TO {new}")
    if feature == "type_widening":
        spark.sql(f"ALTER TABLE {table} ALTER COLUMN a TYPE BIGINT")
    start = storage.head_version(path)
    if feature != "append_only":
        spark.sql(f"UPDATE {table} SET a = a + 1000 WHERE k = 1")
        spark.sql(f"DELETE FROM {table} WHERE k = 2")
    insert(range(6, 9))
    if feature == "v2_checkpoint":
        insert(range(9, 10))
    return start


@pytest.mark.parametrize("feature", list(FEATURES))
def test_every_fast_path_reads_what_spark_reads(lake, feature):
    spark, path = lake.spark, lake.table_path(feature)
    start = build(spark, feature, path)
    head = storage.head_version(path)
    loaded = fastpath.load(path)
    readable, writable = ADMITTED.get(feature, (False, False))
    assert (loaded is not None, fastpath.admits(loaded or _delta(path), write=True)) == (readable, writable), \
        fastpath.refusal(_delta(path), write=True)

    # the schema (read off the log, never gated: a column's name and type are metadata)
    assert storage.schema_at(path) == {f.name: f.dataType.simpleString() for f in lake.read(path).schema.fields}

    # reads of the head and of an older version
    for version in (head, start):
        local = lake.read_small_arrow(path, 1000, version)
        assert (local is not None) == readable
        if local is not None:
            assert _bag(local.to_pylist(), local.column_names) == _spark_bag(lake.read(path, version), local.column_names)

    # a filtered scan (the stored rows of changed keys: AdditiveTable.local_where, first_order)
    if loaded is not None:
        scanned = loaded.to_pyarrow_dataset().to_table(filter=pc.field("k") >= 3)
        assert _bag(scanned.to_pylist(), scanned.column_names) == _spark_bag(lake.read(path).where("k >= 3"), scanned.column_names)

    # the change feed of (start, head], netted (Spark's where a commit in it changes the metadata: an
    # identity column's high-water mark is metadata, written by every insert)
    columns = ["k", "a", "b", "s", "d", "dt"]
    fast = changes.TableSource(lake, feature, path)._read_small(start, head, columns)
    taken = readable and not any(c["reshapes"] for c in storage.history(path, start, head)) and feature not in FALLS_BACK
    assert (fast is not None) == taken
    if fast is not None:
        frame, count = fast
        got = {tuple(r[:-1]): r[-1] for r in frame.collect()}
        assert got == _spark_changes(lake, path, start, head, columns) and count == len(got)

    # a MERGE (update k=1, delete k=3, insert k=50) by delta-rs, checked by Spark's read and change feed
    before = _spark_rows(lake.read(path))
    source = spark.sql(f"SELECT * FROM delta.`{path}` WHERE k IN (1, 3) UNION ALL SELECT * FROM delta.`{path}` WHERE k = 4")
    source = source.selectExpr(*["CASE WHEN k = 1 THEN 99 WHEN k = 3 THEN -1 ELSE a END AS a" if c == "a" else
                                 "CASE WHEN k = 4 THEN 50 ELSE k END AS k" if c == "k" else f"`{c}`" for c in source.columns])
    changed = {r[0]: r for r in _spark_rows(source)}  # read before the MERGE changes what the source reads
    merged = lake.merge_small(path, source, ["k"], delete_when='s."a" < 0')
    assert merged == writable
    if merged:
        expected = Counter(before)
        for row in list(expected):
            if row[0] in changed:
                del expected[row]
        for k, row in changed.items():
            if row[1] >= 0:
                expected[row] += 1
        assert Counter(_spark_rows(lake.read(path))) == expected
        assert _engine(path, head + 1) == "delta-rs"
        assert _spark_changes(lake, path, head, head + 1, None) == {r: m for r, m in (expected - Counter(before)).items()} | \
            {r: -m for r, m in (Counter(before) - expected).items()}
    else:
        assert storage.head_version(path) == head

    # an overwrite (a state table rewritten whole), then a RESTORE to the older version
    now = storage.head_version(path)
    rows = lake.read(path).where("k >= 4")
    wanted = Counter(_spark_rows(rows.localCheckpoint(eager=True)))
    if writable:
        state.overwrite(lake, rows, path)
        assert Counter(_spark_rows(lake.read(path))) == wanted and _engine(path, now + 1) == "delta-rs"
    else:
        assert not state._local_target(path, rows.columns)[0] and storage.head_version(path) == now
    now = storage.head_version(path)
    lake.restore(path, start)
    assert Counter(_spark_rows(lake.read(path))) == Counter(_spark_rows(lake.read(path, start)))
    assert _engine(path, now + 1) == ("delta-rs" if writable else "spark")


def _delta(path: str):
    from deltalake import DeltaTable

    return DeltaTable(path)


def _spark_rows(frame) -> list[tuple]:
    return [tuple(row) for row in frame.collect()]


def _bag(rows: list[dict], names: list[str]) -> Counter:
    return Counter(tuple(_plain(row[n]) for n in names) for row in rows)


def _spark_bag(frame, names: list[str]) -> Counter:
    return Counter(tuple(_plain(row[n]) for n in names) for row in frame.collect())


def _plain(value):
    """A value as both readers give it: an aware timestamp (delta-rs: UTC) as Spark's naive one
    (the Python process's local time; tests run with TZ=UTC)."""
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(timezone.utc).replace(tzinfo=None)
    return Decimal(value) if isinstance(value, Decimal) else value


def _spark_changes(lake, path: str, after: int, upto: int, columns: list[str] | None) -> dict[tuple, int]:
    """Spark's change feed of (after, upto], netted per row (``columns``, default every column)."""
    feed = (lake.spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", after + 1)
            .option("endingVersion", upto).load(path))
    names = columns or [c for c in feed.columns if not c.startswith("_")]
    return net(({n: row[n] for n in names}, row["_change_type"]) for row in feed.collect())


def _engine(path: str, version: int) -> str:
    """Which writer made commit ``version``: ``delta-rs`` or ``spark``."""
    info = next(a["commitInfo"] for a in storage.commit_actions(path, version) if "commitInfo" in a)
    return "spark" if "Apache-Spark" in str(info.get("engineInfo", "")) else "delta-rs"


def test_rows_handed_to_spark_keep_every_batch_after_an_empty_one(lake, spark):
    """pyspark 4.2's ``createDataFrame`` of an Arrow table keeps only the rows before its first empty
    batch after rows; a delta-rs scan with a key filter yields one per file it matches nothing in
    (TPC-H Q4's EXISTS at SF 0.1 lost its touched orders so). ``storage.local_rows`` drops them."""
    import pyarrow as pa
    from deltalake import DeltaTable

    for part in range(4):  # four files of overlapping ranges: the filter matches rows in the first and the last only
        lake.write_small(lake.table_path("t"), pa.table({"k": pa.array([part + 50 * i for i in range(5)], pa.int64())}),
                         "append" if part else "overwrite")
    scanned = DeltaTable(lake.table_path("t")).to_pyarrow_dataset().to_table(filter=pc.field("k").isin([0, 3, 203]))
    assert 0 in [batch.num_rows for batch in scanned.to_batches()]  # else this test shows nothing
    frame = storage.local_rows(spark, scanned, "k bigint")
    assert sorted(row["k"] for row in frame.collect()) == [0, 3, 203]


def test_rows_handed_to_spark_take_the_types_spark_parses_their_ddl_to(spark):
    """``local_rows`` parses a DDL schema once per process (``storage._parsed_ddl``): each frame still
    has the types ``createDataFrame`` gives that DDL, as an object of its own, and the rows' values."""
    import datetime
    from decimal import Decimal

    import pyarrow as pa

    ddl = "`a b` decimal(12,2), d date, s string, n bigint, `x``y` array<int>"
    rows = pa.table({"a b": pa.array([Decimal("1.50"), None], pa.decimal128(12, 2)),
                     "d": pa.array([datetime.date(2026, 1, 31), None], pa.date32()), "s": ["x", None],
                     "n": pa.array([7, None], pa.int64()), "x`y": pa.array([[1, None], None], pa.list_(pa.int32()))})
    first, second = (storage.local_rows(spark, rows, ddl) for _ in range(2))
    assert first.schema == second.schema == spark.createDataFrame([], ddl).schema
    assert first.schema is not second.schema
    assert [tuple(r) for r in second.collect()] == [(Decimal("1.50"), datetime.date(2026, 1, 31), "x", 7, [1, None]), (None,) * 5]


def test_rows_handed_to_spark_are_counted_without_a_job(lake, spark):
    """A reader counts the change it takes (the cost models' unit): a frame of ``local_rows`` is
    counted from the rows this process handed over, any other frame by Spark."""
    import pyarrow as pa

    frame = storage.local_rows(spark, pa.table({"k": pa.array([1, 2, None, 2], pa.int64())}), "k bigint")
    tracker = spark.sparkContext.statusTracker()
    before = set(tracker.getJobIdsForGroup(None))
    assert storage.counted(frame) == 4
    assert set(tracker.getJobIdsForGroup(None)) == before  # no Spark job
    assert storage.counted(frame.where("k = 2")) == 2
    assert set(tracker.getJobIdsForGroup(None)) != before  # counted by Spark: the tracker sees its jobs


def test_a_key_filtered_scan_reads_what_spark_reads_on_every_key_type(lake, spark):
    """``state.key_filter`` (the stored rows of changed keys: first_order, fivm, triangle) on a table
    Spark wrote in three files and on the same rows rewritten by delta-rs, for each key type it
    admits, NULL matching NULL. delta-rs's per-file guarantees pruned every file on a boolean column
    Spark wrote (no min/max: ``>= null``), silently, and failed on string statistics of files
    delta-rs wrote (view-typed literals): ``storage.is_in`` compares those columns unpruned."""
    from pyspark.sql import functions as F

    by_spark, by_delta_rs = lake.table_path("keys_by_spark"), lake.table_path("keys_by_delta_rs")
    spark.sql("SELECT CAST(id AS INT) AS k, id % 2 = 0 AS flag, CASE WHEN id % 5 = 0 THEN NULL ELSE concat('s', id % 7) END AS s, "
              "CAST(id * 1.25 AS DECIMAL(10,2)) AS d, date_add(DATE'2024-01-01', CAST(id % 9 AS INT)) AS dt, "
              "CAST(concat('b', id % 4) AS BINARY) AS bin FROM range(60)").repartition(3).write.format("delta").save(by_spark)
    lake.write_small(by_delta_rs, _delta(by_spark).to_pyarrow_table(), "overwrite", new_schema=True)
    for path in (by_spark, by_delta_rs):
        table = fastpath.load(path)
        stored = table.to_pyarrow_table()
        for keys in (["flag"], ["s"], ["k", "s"], ["d", "dt"], ["flag", "bin"], ["s", "dt", "flag"]):
            change = stored.filter(pc.is_in(stored["k"], value_set=pc.cast([0, 3, 7, 11, 12], "int32"))).select(keys)
            scanned = table.to_pyarrow_dataset().to_table(filter=state.key_filter(change, keys, pa.schema(table.schema().to_arrow())))
            wanted = F.lit(True)
            for key in keys:
                values = [v for v in change[key].to_pylist()]
                known = [v for v in values if v is not None]
                one = F.col(key).isin(known) if known else F.lit(False)
                wanted &= (one | F.col(key).isNull()) if None in values else one
            assert _bag(scanned.to_pylist(), stored.column_names) == _spark_bag(lake.read(path).where(wanted), stored.column_names), \
                (path, keys)
