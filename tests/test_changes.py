"""Change capture: signed multiplicities, netting, pending counts, unreadable ranges."""
from __future__ import annotations

import pytest

from lakeivm.sources import changes
from lakeivm.errors import ChangeRangeError
from lakeivm.limits import Limits
from tests.helpers import sql


def test_net_is_pure_and_drops_zeros():
    assert changes.net([({"a": 1}, "insert"), ({"a": 1}, "update_preimage"), ({"a": 1}, "insert")]) == {(1,): 1}


@pytest.mark.parametrize("reader", ["arrow", "spark", "deletion vectors"])
@pytest.mark.heavy(165)
def test_read_delta_nets_inserts_updates_deletes(lake, spark, monkeypatch, reader):
    """A small range is read by delta-rs and netted with Arrow; a large one (here: any), or one of a
    table with deletion vectors (delta-rs cannot read them), by Spark: the same netted rows."""
    if reader == "spark":
        monkeypatch.setattr(lake, "limits", Limits(small_delta_rows=0))
    small = changes.TableSource._read_small
    used = []
    monkeypatch.setattr(changes.TableSource, "_read_small", lambda *args: used.append(small(*args)) or used[-1])
    lake.create_table("r", spark.createDataFrame([(1, 10), (2, 20)], "a int, x int"))
    if reader == "deletion vectors":
        sql(lake, "ALTER TABLE {t} SET TBLPROPERTIES ('delta.enableDeletionVectors' = true)", "r")
    sql(lake, "INSERT INTO {t} VALUES (3, 30), (3, 30)", "r")
    sql(lake, "UPDATE {t} SET x = 11 WHERE a = 1", "r")
    sql(lake, "DELETE FROM {t} WHERE a = 2", "r")
    sql(lake, "INSERT INTO {t} VALUES (4, 40)", "r")
    sql(lake, "DELETE FROM {t} WHERE a = 4", "r")
    head = lake.head_version(lake.table_path("r"))
    delta = changes.read_delta(lake, "r", 0, head, ["a", "x"])
    got = sorted(tuple(r) for r in delta.collect())
    assert got == [(1, 10, -1), (1, 11, 1), (2, 20, -1), (3, 30, 2)]
    assert changes.source(lake, "r").pending_rows(0, head) == 2 + 2 + 1 + 1 + 1
    assert changes.read_delta(lake, "r", 0, head, ["a"]).where("a = 1").count() == 0  # projected, then netted
    assert [frame is not None for frame in used] == [reader == "arrow"] * 2


def test_cdf_turned_off_is_named(lake, spark):
    lake.create_table("r", spark.createDataFrame([(1, 10)], "a int, x int"))
    sql(lake, "ALTER TABLE {t} SET TBLPROPERTIES (delta.enableChangeDataFeed = false)", "r")
    sql(lake, "INSERT INTO {t} VALUES (2, 20)", "r")
    with pytest.raises(ChangeRangeError, match="change data feed was turned off at version 1"):
        changes.source(lake, "r").check_readable(0, 2, ["a"])


def test_vacuumed_changes_are_named(lake, spark):
    lake.create_table("r", spark.createDataFrame([(1, 10)], "a int, x int"))
    sql(lake, "INSERT INTO {t} VALUES (2, 20)", "r")
    sql(lake, "UPDATE {t} SET x = 0", "r")
    guard = "spark.databricks.delta.retentionDurationCheck.enabled"  # lakeivm keeps Delta's guard; this test lifts it
    spark.conf.set(guard, "false")
    try:
        sql(lake, "VACUUM {t} RETAIN 0 HOURS", "r")
    finally:
        spark.conf.unset(guard)
    with pytest.raises(ChangeRangeError, match="change files were removed"):
        changes.read_delta(lake, "r", 0, lake.head_version(lake.table_path("r")), ["a", "x"])


def test_schema_change_of_a_used_column_is_named(lake, spark):
    lake.create_table("r", spark.createDataFrame([(1, 10)], "a int, x int"))
    spark.createDataFrame([(1, "ten")], "a int, x string").write.format("delta").mode("overwrite").option(
        "overwriteSchema", "true").save(lake.table_path("r"))
    with pytest.raises(ChangeRangeError, match=r"column 'x' changed between versions 0 and 1 \(int -> string\)"):
        changes.source(lake, "r").check_readable(0, 1, ["a", "x"])
    changes.source(lake, "r").check_readable(0, 1, ["a"])  # a column the view does not use may change


def test_pending_rows_of_commits_delta_rs_wrote_equal_their_change_feed(lake, spark):
    """delta-rs names its operation metrics in snake case: an append, a delete and an update by
    delta-rs count as many pending rows as Spark's change data feed then holds (an update twice)."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    path = lake.table_path("rs")
    write_deltalake(path, pa.table({"a": pa.array([1, 2], pa.int32())}), configuration={"delta.enableChangeDataFeed": "true"})
    write_deltalake(path, pa.table({"a": pa.array([3, 4, 5], pa.int32())}), mode="append")
    DeltaTable(path).delete("a = 1 OR a = 4")
    DeltaTable(path).update(updates={"a": "a + 10"}, predicate="a = 5")
    head = lake.head_version(path)
    feed = spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", 1).load(path).count()
    assert changes.source(lake, "rs").pending_rows(0, head) == feed == 3 + 2 + 2
