"""A base table changed under a view the way an operator changes it: deleted and created anew at
the same path (a longer, an equal and a shorter new history), or upgraded to column mapping with two
used columns swapped by RENAME. Each case: the run notices, acts on the view's policy, and the view
then equals its SQL on the new table (``audit``: Spark recomputing it from scratch).
"""
from __future__ import annotations

import shutil

import pytest

from lakeivm.store import commit
from lakeivm.run.audit import audit
from lakeivm.run.engine import run_view
from lakeivm.errors import ChangeRangeError
from lakeivm.catalog.registry import spec_from_dict
from tests.helpers import sql

SQL = "SELECT g, SUM(x) AS sx, COUNT(*) AS c FROM r JOIN s ON r.a = s.a GROUP BY g"


def _spec(policy: str = "rebuild"):
    return spec_from_dict({"name": "by_g", "sql": SQL, "deadline": "1m", "refresh_policy": "incremental",
                           "on_unreadable_changes": policy})


def _tables(lake):
    spark = lake.spark
    lake.create_table("r", spark.createDataFrame([(0, 1), (1, 2), (2, 5)], "a int, x int"))
    lake.create_table("s", spark.createDataFrame([(0, 0), (1, 1), (2, 0)], "a int, g int"))
    sql(lake, "INSERT INTO {t} VALUES (0, 7)", "r")
    sql(lake, "UPDATE {t} SET x = x + 1 WHERE a = 1", "r")  # r at version 2


def _recreate(lake, commits: int) -> None:
    """r deleted (its folder removed) and written anew, then ``commits`` more commits on it."""
    shutil.rmtree(lake.table_path("r"))
    lake.create_table("r", lake.spark.createDataFrame([(0, 100), (2, 200)], "a int, x int"))
    for i in range(commits):
        sql(lake, f"INSERT INTO {{t}} VALUES ({i % 3}, {i})", "r")


@pytest.mark.parametrize("commits", [3, 2, 0], ids=["longer", "equal", "shorter"])
def test_a_recreated_table_rebuilds_the_view(lake, commits):
    spec = _spec()
    _tables(lake)
    run_view(lake, spec)
    _recreate(lake, commits)
    row = run_view(lake, spec)
    assert row is not None and row.mode == "rebuild" and "deleted and created anew" in row.plan, row
    assert audit(lake, spec).ok
    assert run_view(lake, spec) is None  # and then caught up: the new id is the one recorded


def test_a_recreated_table_fails_the_view_under_policy_fail(lake):
    spec = _spec("fail")
    _tables(lake)
    run_view(lake, spec)
    before = commit.last_committed(lake, "by_g")
    _recreate(lake, 2)  # an equal history: the versions alone would say nothing changed
    with pytest.raises(ChangeRangeError, match="deleted and created anew"):
        run_view(lake, spec)
    assert commit.last_committed(lake, "by_g") == before  # nothing committed: the view as it was
    with pytest.raises(ChangeRangeError, match="deleted and created anew"):
        run_view(lake, spec)  # and it stays failed, not caught up
    run_view(lake, spec, mode="rebuild")
    assert audit(lake, spec).ok


def test_a_column_mapped_rename_is_read_as_spark_reads_it(lake):
    """r upgraded in place to column mapping by name, its two columns swapped by RENAME: the view is
    rebuilt (its schema changed), and later changes of the column-mapped table are applied through
    Spark (the gate refuses delta-rs: it read the Parquet columns by their logical names)."""
    spec = _spec()
    lake.create_table("r", lake.spark.createDataFrame([(0, 1), (1, 2), (2, 5)], "a int, x int"))
    lake.create_table("s", lake.spark.createDataFrame([(0, 0), (1, 1), (2, 0), (5, 1)], "a int, g int"))
    run_view(lake, spec)
    sql(lake, "ALTER TABLE {t} SET TBLPROPERTIES ('delta.columnMapping.mode' = 'name', "
              "'delta.minReaderVersion' = '2', 'delta.minWriterVersion' = '5')", "r")
    for old, new in (("a", "tmp"), ("x", "a"), ("tmp", "x")):
        sql(lake, f"ALTER TABLE {{t}} RENAME COLUMN {old} TO {new}", "r")
    run_view(lake, spec)
    assert audit(lake, spec).ok
    sql(lake, "INSERT INTO {t} (a, x) VALUES (5, 1), (1, 2)", "r")
    sql(lake, "DELETE FROM {t} WHERE a = 2", "r")
    row = run_view(lake, spec)
    assert row is not None and row.applied == ("r",)
    assert audit(lake, spec).ok
