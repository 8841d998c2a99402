"""``views.state.overwrite``: a small table written whole by delta-rs reads back through Spark with
the frame's rows and types (every column nullable, the given properties); a larger one, a table
with deletion vectors, or a column name Spark's Delta writer refuses go through Spark."""
from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest

from lakeivm.store.lake import CDF
from lakeivm.views.state import overwrite

ROWS = [(1, "a", Decimal("1.50"), "2026-01-02"), (2, None, Decimal("-3.25"), None)]
DDL = "k bigint not null, g string, s decimal(38,2), d string"


def writer_of(path: str) -> str:
    """Who wrote the table's newest commit: delta-rs (its clientVersion) or Spark (engineInfo)."""
    log = sorted(Path(path, "_delta_log").glob("*.json"))[-1]
    info = next(json.loads(line)["commitInfo"] for line in log.read_text().splitlines() if "commitInfo" in line)
    return "delta-rs" if "delta-rs" in str(info.get("clientVersion", "")) else "spark"


def frame(spark):
    return spark.createDataFrame(ROWS, DDL).selectExpr("k", "g", "s", "CAST(d AS DATE) AS d")


def test_a_small_table_is_written_by_delta_rs_and_spark_reads_it_back(lake, spark):
    path = lake.view_path("v")
    assert overwrite(lake, frame(spark), path, configuration={CDF: "true"}) == 2
    assert writer_of(path) == "delta-rs"
    back = spark.read.format("delta").load(path)
    assert [(f.name, f.dataType.simpleString(), f.nullable) for f in back.schema.fields] == [
        ("k", "bigint", True), ("g", "string", True), ("s", "decimal(38,2)", True), ("d", "date", True)]
    assert sorted(back.collect()) == sorted(frame(spark).collect())
    properties = spark.sql(f"DESCRIBE DETAIL delta.`{path}`").first()["properties"]
    assert properties.get(CDF) == "true"
    # a new schema replaces the old one (a rebuild after a definition change)
    assert overwrite(lake, spark.range(3).selectExpr("id AS other"), path) == 3
    assert spark.read.format("delta").load(path).columns == ["other"]


def test_more_rows_than_the_limit_and_a_table_with_deletion_vectors_are_written_by_spark(lake, spark):
    path = lake.view_path("v")
    assert overwrite(lake, frame(spark), path, max_rows=1) == 2
    assert writer_of(path) == "spark"
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    assert overwrite(lake, frame(spark), path) == 2
    assert writer_of(path) == "spark" and sorted(spark.read.format("delta").load(path).collect()) == sorted(frame(spark).collect())


def test_a_column_name_spark_refuses_is_refused_as_spark_refuses_it(lake, spark):
    with pytest.raises(Exception, match="DELTA_INVALID_CHARACTERS_IN_COLUMN_NAMES"):
        overwrite(lake, spark.range(2).groupBy("id").count().selectExpr("id", "count AS `n (rows)`"), lake.view_path("v"))


@pytest.mark.parametrize("nested", [False, True], ids=["flat", "with a struct"])
def test_rows_are_cast_to_the_stored_order_and_types(spark, nested):
    """``in_stored_types``: ``rows`` in the stored table's column order and Spark types, by one SQL
    projection (by Columns where a struct's field names need their quoting), names with a backquote too."""
    from lakeivm.views.state import in_stored_types

    struct = ", named_struct('f g', 1) AS `s t`" if nested else ""
    stored = spark.sql(f"SELECT CAST(1 AS decimal(10,2)) AS `a``b`, CAST(2 AS bigint) AS n, 'x' AS w{struct}")
    rows = spark.sql(f"SELECT 'y' AS w, 3 AS n, 4.5 AS `a``b`{struct}")
    cast = in_stored_types(rows, stored)
    assert [(f.name, f.dataType) for f in cast.schema] == [(f.name, f.dataType) for f in stored.schema]
    assert tuple(cast.collect()[0])[:3] == (Decimal("4.50"), 3, "y")
