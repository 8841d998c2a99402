"""The window kind on Spark: each shape (QUALIFY too) equal to its own SQL, recomputed by Spark on the same
snapshots, after random insert/update/delete batches (NULL partition keys, ties and duplicate rows
included); a run rewrites only the partitions its changes touch; a view over views; the "latest row
per key" filter of a windowed derived table or CTE kept whole, one window view storing only its rows."""
from __future__ import annotations

import random

import pytest

from lakeivm.run.audit import audit
from lakeivm.run.engine import run_view
from lakeivm.catalog.registry import load_specs, spec_from_dict
from tests.helpers import sql

ROWS = [(0, 1, 5), (0, 2, None), (0, 2, 7), (1, 1, 3), (1, 1, 3), (None, 1, 2), (None, 3, None), (2, 4, 1)]

VIEWS = {  # ORDER BY every column where ROW_NUMBER, LEAD or a ROWS frame would otherwise break a tie arbitrarily
    "analytic": "SELECT k, ts, v, ROW_NUMBER() OVER (PARTITION BY k ORDER BY ts DESC, v DESC) AS rn, "
                "RANK() OVER (PARTITION BY k ORDER BY v) AS r, DENSE_RANK() OVER (PARTITION BY k ORDER BY ts DESC) AS dr, "
                "LAST_VALUE(v) IGNORE NULLS OVER (PARTITION BY k ORDER BY ts, v) AS lv, "
                "MIN(v) OVER (PARTITION BY k ORDER BY ts, v ROWS BETWEEN 51 PRECEDING AND CURRENT ROW) AS lo52, "
                "MAX(v) OVER (PARTITION BY k ORDER BY ts, v ROWS BETWEEN 51 PRECEDING AND CURRENT ROW) AS hi52, "
                "SUM(v) OVER (PARTITION BY k ORDER BY ts, v ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS sum2, "
                "COUNT(*) OVER (PARTITION BY k ORDER BY ts RANGE BETWEEN 1 PRECEDING AND CURRENT ROW) AS n_range, "
                "AVG(v) OVER (PARTITION BY k) AS avg_v FROM t",
    "scd2": "SELECT k AS key, ts AS start_ts, v, LEAD(ts) OVER (PARTITION BY k ORDER BY ts, v) AS end_ts, "
            "LAG(v, 1, -1) OVER (PARTITION BY k ORDER BY ts, v) AS before FROM t WHERE ts > 0",
    "latest": "SELECT k, ts, v FROM t QUALIFY ROW_NUMBER() OVER (PARTITION BY k ORDER BY ts DESC, v DESC) = 1",
}


def spec(name: str, sql_text: str) -> object:
    """Under refresh_policy incremental: auto may recompute so small a view in full instead."""
    return spec_from_dict({"name": name, "deadline": 60, "refresh_policy": "incremental", "sql": sql_text}, source=f"{name}.yaml")


def batch(lake, rng: random.Random, table: str = "t") -> None:
    """One commit on t(k, ts, v): an insert (NULL keys and values among them), a delete or an update."""
    op = rng.choice(["insert", "insert", "delete", "update"])
    key = lambda: rng.choice(["NULL", "0", "1", "2", "3"])  # noqa: E731
    if op == "insert":
        rows = ", ".join(f"({key()}, {rng.randrange(5)}, {rng.choice(['NULL', rng.randrange(9)])})" for _ in range(rng.randint(1, 3)))
        sql(lake, f"INSERT INTO {{t}} VALUES {rows}", table)
    elif op == "delete":
        sql(lake, f"DELETE FROM {{t}} WHERE k <=> {key()} AND ts = {rng.randrange(5)}", table)
    else:
        sql(lake, f"UPDATE {{t}} SET v = COALESCE(v, 0) + 1, ts = ts + 1 WHERE k <=> {key()}", table)


@pytest.mark.heavy(170)
def test_each_shape_equals_its_sql_after_random_batches(lake, spark):
    rng = random.Random(52)
    lake.create_table("t", spark.createDataFrame(ROWS, "k int, ts int, v int"))
    views = [spec(name, text) for name, text in VIEWS.items()]
    for view in views:
        assert run_view(lake, view).kind == "window"
    for round_ in range(2):
        batch(lake, rng)
        for view in views:
            row = run_view(lake, view)  # None: the batch changed no row
            assert row is None or (row.kind == "window" and row.mode != "rebuild"), row.plan
            report = audit(lake, view)
            assert report.ok, f"{view.name}, round {round_}: {report}; missing {report.missing[:5]}, unexpected {report.unexpected[:5]}"


@pytest.mark.heavy(125)
@pytest.mark.parametrize("merged_by", ["delta-rs", "Apache-Spark"])
def test_a_run_rewrites_only_the_partitions_its_changes_touch(lake, spark, monkeypatch, merged_by):
    """By a MERGE here (no result counts as small): delta-rs's in this process within
    ``limits.local_merge_rows``, else Spark's. Its change feed is the rows it rewrote."""
    from lakeivm.limits import Limits

    monkeypatch.setattr("lakeivm.views.window.maintainer.read_if_small", lambda lake, path: None)
    if merged_by == "Apache-Spark":
        monkeypatch.setattr(lake, "limits", Limits(local_merge_rows=0))
    lake.create_table("t", spark.createDataFrame(ROWS, "k int, ts int, v int"))
    view = spec("ranked", VIEWS["analytic"])
    run_view(lake, view)
    sql(lake, "INSERT INTO {t} VALUES (NULL, 9, 9)", "t")
    run_view(lake, view)
    path = lake.view_path("ranked")
    version = spark.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT 1").first()["version"]
    changed = spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", version).load(path)
    assert {r.k for r in changed.collect()} == {None}  # the NULL partition only, deleted and rewritten
    assert changed.where("_change_type = 'insert'").count() == 3 and audit(lake, view).ok
    last = spark.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT 1").first()
    assert last["operation"] == "MERGE" and (last["engineInfo"] or last["clientVersion"] or "").startswith(merged_by), last


@pytest.mark.heavy(130)
def test_a_window_over_a_view_and_the_latest_rows_kept_whole_follow_random_batches(lake, spark, tmp_path):
    rng = random.Random(7)
    lake.create_table("t", spark.createDataFrame(ROWS, "k int, ts int, v int"))
    for name, text in {
        "bronze": "SELECT k, ts, v FROM t WHERE v IS NOT NULL",
        "silver": "SELECT k, ts, v, LEAD(ts) OVER (PARTITION BY k ORDER BY ts, v) AS end_ts FROM bronze",
        "latest": "SELECT k, ts, v FROM (SELECT k, ts, v, ROW_NUMBER() OVER (PARTITION BY k ORDER BY ts DESC, v DESC) AS rn "
                  "FROM t) AS d WHERE rn = 1",
        "latest_two": "WITH ranked AS (SELECT k AS key, ts, v, ROW_NUMBER() OVER (PARTITION BY k ORDER BY ts DESC, v DESC) "
                      "AS rn FROM bronze) SELECT key, v, rn FROM ranked WHERE rn <= 2 AND ts > 0",
    }.items():
        # incremental: this follows the window maintainer; auto would recompute `latest` whole on a lake this small
        (tmp_path / f"{name}.yaml").write_text(f"name: {name}\ndeadline: 60s\nrefresh_policy: incremental\nsql: |\n  {text}\n")
    specs = load_specs(tmp_path)
    assert not specs.broken, [b.summary for b in specs.broken]
    assert not specs["latest"].split_off and not specs["latest_two"].split_off
    kinds = {name: run_view(lake, specs[name]).kind for name in ("bronze", "silver", "latest", "latest_two")}
    assert kinds == {"silver": "window", "latest": "window", "bronze": "first_order", "latest_two": "window"}, kinds
    for round_ in range(3):
        batch(lake, rng)
        for name in ("silver", "latest", "latest_two"):
            row = run_view(lake, specs[name])  # refreshes the views it reads first
            assert row is None or row.mode != "rebuild", row.plan
        for spec_ in specs.values():
            report = audit(lake, spec_)
            assert report.ok, f"{spec_.name}, round {round_}: {report}; missing {report.missing[:5]}, unexpected {report.unexpected[:5]}"


@pytest.mark.heavy(90)
def test_the_touched_partitions_of_a_table_or_view_are_read_by_key(lake, spark, monkeypatch, tmp_path):
    """A change touching a few of 40 keys: the window reads those partitions' rows of the table, and
    of a view over it, by delta-rs filtered by the keys (``_touched_rows``), not by a Spark scan; a
    change at a NULL key (a key filter matches none) and one touching most keys are read by Spark.
    Each view equal to its SQL after every batch."""
    from lakeivm.views.window import maintainer

    rows = [(k, ts, (k * ts) % 7 or None) for k in range(40) for ts in range(5)]
    lake.create_table("t", spark.createDataFrame(rows, "k int, ts int, v int"))
    for name, text in {"bronze": "SELECT k, ts, v FROM t WHERE ts > 0", "scd2_t": VIEWS["scd2"],
                       "scd2_bronze": VIEWS["scd2"].replace("FROM t", "FROM bronze")}.items():
        (tmp_path / f"{name}.yaml").write_text(f"name: {name}\ndeadline: 60s\nrefresh_policy: incremental\nsql: |\n  {text}\n")
    specs = load_specs(tmp_path)
    views = [specs[name] for name in ("bronze", "scd2_t", "scd2_bronze")]
    for view in views:
        run_view(lake, view)
    read = []

    def spy(ctx, table, *args, real=maintainer.rows_with_keys):
        found = real(ctx, table, *args)
        read.append((table, None if found is None else found[0].num_rows))
        return found

    monkeypatch.setattr(maintainer, "rows_with_keys", spy)
    for change, local in (("INSERT INTO {t} VALUES (3, 9, 1), (7, 9, NULL)", True),
                          ("UPDATE {t} SET v = COALESCE(v, 0) + 1 WHERE k = 11 AND ts = 2", True),
                          ("DELETE FROM {t} WHERE k IN (3, 12) AND ts = 4", True),
                          ("INSERT INTO {t} VALUES (NULL, 1, 1), (5, 1, 1)", False),
                          ("UPDATE {t} SET v = 0 WHERE k < 30", False)):
        sql(lake, change, "t")
        read.clear()
        for view in views:
            row = run_view(lake, view)
            assert row is None or row.mode != "rebuild", row.plan
        for view in views:
            report = audit(lake, view)
            assert report.ok, f"{view.name} after {change}: {report}; missing {report.missing[:5]}, unexpected {report.unexpected[:5]}"
        if local:  # each window view read its relation's touched partitions here, 5-6 rows a key
            assert sorted(table for table, n in read if n is not None) == ["bronze", "t"] and all(0 < n <= 14 for _, n in read), read
        else:
            assert not read, read


TOP = {  # a ROW_NUMBER view keeps no column a tie could tell apart: Spark breaks its ties arbitrarily
    "latest": "WITH r AS (SELECT k, ts, v, ROW_NUMBER() OVER (PARTITION BY k ORDER BY ts DESC) AS rn FROM t) "
              "SELECT k, ts AS day FROM r WHERE rn = 1",
    "top3": "SELECT k, ts, v FROM (SELECT k, ts, v, RANK() OVER (PARTITION BY k ORDER BY ts DESC NULLS FIRST) AS n FROM t "
            "WHERE v IS NOT NULL) AS d WHERE n <= 3",
    "first2": "SELECT k AS key, ts, v FROM (SELECT k, ts, v, DENSE_RANK() OVER (PARTITION BY k ORDER BY ts NULLS LAST) AS n FROM t) "
              "AS d WHERE n < 3",
    "latest_by_two": "WITH r AS (SELECT k, ts, v, ROW_NUMBER() OVER (PARTITION BY k ORDER BY ts DESC, v DESC) AS rn FROM t) "
                     "SELECT k, ts, v FROM r WHERE rn = 1",  # a tie-breaker: no single O, read back from the result
}


@pytest.mark.heavy(100)
@pytest.mark.parametrize("stored_read", ["delta-rs", "spark"])
def test_the_top_rows_per_key_are_read_from_the_lowest_kept_row_on(lake, spark, monkeypatch, stored_read):
    """Appends (a later row for two keys, an earlier one for a third) read each touched key's rows
    from its lowest kept O on and the rows inserted below it, not its history (from the result, where
    it holds every column the view reads); an update of a key's kept rows and random deletes and
    updates (kept rows among them, NULL keys and O) read their partitions whole. Each view equal to
    its SQL after every batch. The touched keys' stored rows are read by delta-rs filtered by the
    keys, or by Spark whole (``limits.scan_rows`` 0): the same rows."""
    from lakeivm.limits import Limits
    from lakeivm.views.window import maintainer

    if stored_read == "spark":
        monkeypatch.setattr(lake, "limits", Limits(scan_rows=0))

    rng = random.Random(5)
    history = [(k, ts, (ts * (k + 2)) % 7) for k in range(3) for ts in range(10, 30)]
    lake.create_table("t", spark.createDataFrame(ROWS + history, "k int, ts int, v int"))
    views = [spec(name, text) for name, text in TOP.items()]
    for view in views:
        assert run_view(lake, view).kind == "window"
    read, relation_read = [], []

    def counted(candidates):
        def rows_read(ctx, snapshot, *args):  # the relation marked, to be found in the plan of the rows read
            rows = candidates(ctx, snapshot.alias("relation_at_the_pin").alias("r"), *args)
            relation_read.append("relation_at_the_pin" in rows._jdf.queryExecution().logical().toString())
            read.append(rows.count())
            return rows
        return rows_read

    for name in ("_top_candidates", "_top_from_result"):
        monkeypatch.setattr(maintainer, name, counted(getattr(maintainer, name)))
    for round_ in range(4):
        if round_ % 2 == 0:
            sql(lake, f"INSERT INTO {{t}} VALUES (0, {40 + round_}, 1), (1, {41 + round_}, 2), (1, {41 + round_}, 3), (2, 0, 5)", "t")
        elif round_ == 1:  # every row of key 1 updated: its kept rows lost, its partition read whole
            sql(lake, "UPDATE {t} SET v = COALESCE(v, 0) + 10 WHERE k = 1", "t")
        else:
            batch(lake, rng)
        read.clear()
        relation_read.clear()
        for view in views:
            row = run_view(lake, view)
            assert row is None or (row.kind == "window" and row.mode != "rebuild"), row.plan
            report = audit(lake, view)
            assert report.ok, f"{view.name}, round {round_}: {report}; missing {report.missing[:5]}, unexpected {report.unexpected[:5]}"
        if round_ == 0:  # of the three keys' 69 rows, each view reads their kept rows and the 4 inserted
            assert read == [2 + 3 + 1 + 1, 4 + 5 + 4, 3 + 3 + 2 + 4, 3 + 4], read
            # "latest" reads t from each key's latest row on (it keeps no v); the others, whose results hold every
            # column they read, read their kept rows back from the result
            assert relation_read == [True, False, False, False], relation_read
        if round_ == 1:
            assert relation_read == [True] * 4, relation_read


LOOKING_BACK = {  # every window ordered by ts alone, looking back: a change rewrites its partitions from its first ts on
    "running": "SELECT k, ts, v, SUM(v) OVER (PARTITION BY k ORDER BY ts) AS run, RANK() OVER (PARTITION BY k ORDER BY ts) AS r, "
               "DENSE_RANK() OVER (PARTITION BY k ORDER BY ts) AS dr, "
               "MAX(v) OVER (PARTITION BY k ORDER BY ts RANGE BETWEEN 2 PRECEDING AND 1 PRECEDING) AS hi_before FROM t",
    "first": "WITH r AS (SELECT k, ts, v, RANK() OVER (PARTITION BY k ORDER BY ts) AS r FROM t) SELECT k, ts, v FROM r WHERE r = 1",
}
MARKET = ("SELECT k, ts AS day, v, MAX(v) OVER (PARTITION BY k ORDER BY ts ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS hi3, "
          "AVG(v) OVER (PARTITION BY k ORDER BY ts ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS avg2, "
          "ROW_NUMBER() OVER (PARTITION BY k ORDER BY ts) AS n, LAG(v) OVER (PARTITION BY k ORDER BY ts) AS before FROM m")
FRAMED = ("SELECT k, ts AS day, v, MIN(v) OVER (PARTITION BY k ORDER BY ts ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS lo3, "
          "SUM(v) OVER (PARTITION BY k ORDER BY ts ROWS BETWEEN 3 PRECEDING AND 1 PRECEDING) AS prior3, "
          "LAG(v, 2) OVER (PARTITION BY k ORDER BY ts) AS before2 FROM m")  # no window reads more than the 3 rows before a row
SLIDING = ("SELECT k, ts AS day, v, MAX(v) OVER (PARTITION BY k ORDER BY ts ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS hi3, "
           "MIN(v + k) OVER (PARTITION BY k ORDER BY ts ROWS BETWEEN 3 PRECEDING AND CURRENT ROW) - 1 AS lo4, "
           "AVG(CAST(v AS DECIMAL(6, 2))) OVER (PARTITION BY k ORDER BY ts ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS avg2, "
           "COUNT(*) OVER (PARTITION BY k ORDER BY ts ROWS BETWEEN 3 PRECEDING AND CURRENT ROW) AS n4, "
           "SUM(v) OVER (PARTITION BY k ORDER BY ts ROWS BETWEEN 0 PRECEDING AND CURRENT ROW) AS s1 FROM m")  # frames joined


@pytest.mark.heavy(120)
def test_windows_looking_back_rewrite_from_the_first_changed_row_on(lake, spark, monkeypatch):
    """Ties, NULL ts and NULL keys on the delta-rs path; ROWS frames (ts unique per key, so that
    ROW_NUMBER and the frames decide every tie) on the MERGE path, where an append deletes nothing;
    windows reading at most 3 rows back recompute from the 3 rows before the first changed one; where
    each is an aggregate over a sliding frame, by a join of the new rows with their frames' rows."""
    from lakeivm.catalog.registry import choose
    from lakeivm.views.window import maintainer
    from lakeivm.views.window.shape import partition_of

    rng = random.Random(11)
    lake.create_table("t", spark.createDataFrame(ROWS + [(0, None, 4), (None, None, 1)], "k int, ts int, v int"))
    lake.create_table("m", spark.createDataFrame([(k, day, (k * 7 + day * 3) % 10) for k in range(3) for day in range(5)]
                                                 + [(1, None, 4)], "k int, ts int, v int"))
    views = {name: spec(name, text) for name, text in {**LOOKING_BACK, "market": MARKET, "framed": FRAMED, "sliding": SLIDING}.items()}
    for view in views.values():
        p = partition_of(choose(view, lake.table_schemas()).query)
        assert p.order in {("ts", "ts"), ("ts", "day")} and p.reach == (3 if view.name in ("framed", "sliding") else None), (view.name, p)
        assert p.sliding == (view.name == "sliding"), (view.name, p)
        assert run_view(lake, view).kind == "window"
    read, within_reach, joined, frames_joined = [], maintainer._within_reach, [], maintainer._frames_joined
    monkeypatch.setattr(maintainer, "_within_reach",
                        lambda *args, **kw: (lambda rows: read.append(rows.count()) or rows)(within_reach(*args, **kw)))
    monkeypatch.setattr(maintainer, "_frames_joined", lambda rows, p, *args: joined.append(p.table) or frames_joined(rows, p, *args))
    merged, read_if_small = lake.view_path("market"), maintainer.read_if_small
    monkeypatch.setattr(maintainer, "read_if_small", lambda lake_, path: None if path == merged else read_if_small(lake_, path))
    days = {k: 5 for k in range(3)}
    for round_ in range(4):
        batch(lake, rng)
        if round_ % 2:
            sql(lake, f"INSERT INTO {{t}} VALUES ({rng.choice(['NULL', '1'])}, NULL, {rng.randrange(9)})", "t")
        k = rng.randrange(3)
        if round_ == 2:  # a row of the middle moves to the end of its partition
            sql(lake, f"UPDATE {{t}} SET ts = {days[k] + 10} WHERE k = {k} AND ts = 2", "m")
        elif round_ == 3:
            sql(lake, f"DELETE FROM {{t}} WHERE k = {k} AND ts = 1", "m")
        else:  # appends only
            sql(lake, "INSERT INTO {t} VALUES " + ", ".join(f"({k}, {days[k] + i}, {rng.randrange(10)})" for i in range(2)), "m")
            days[k] += 2
        read.clear()
        for view in views.values():
            row = run_view(lake, view)
            assert row is None or (row.kind == "window" and row.mode != "rebuild"), row.plan
            report = audit(lake, view)
            assert report.ok, f"{view.name}, round {round_}: {report}; missing {report.missing[:5]}, unexpected {report.unexpected[:5]}"
        if round_ < 2:  # an append of 2 rows: read with the 3 rows before them, not the partition's history
            assert read == [3 + 2], (round_, read)
        assert joined == ["m"] * (round_ + 1)  # the sliding frames' view, once per round
        if round_ == 0:  # rows after every row of their partition: appended, no other rewritten (no MERGE)
            last = spark.sql(f"DESCRIBE HISTORY delta.`{merged}` LIMIT 1").first()
            version = last["version"]
            assert last["operation"] == "WRITE", last["operation"]
            changed = spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", version).load(merged)
            assert sorted((r.k, r.day, r._change_type) for r in changed.collect()) == [(k, 5, "insert"), (k, 6, "insert")]


def test_sliding_frames_joined_equal_sparks_own_sliding_frames(spark):
    """``_frames_joined`` against the window as Spark computes it over the whole relation: the same
    rows and types (decimal AVG and SUM, COUNT of a column, NULL values, a NULL partition and a NULL
    order first), from each partition's first changed row on."""
    from decimal import Decimal

    from pyspark.sql import functions as F

    from lakeivm.sql import as_written, parse_full
    from lakeivm.views.window import maintainer
    from lakeivm.views.window.shape import partition_of

    rng = random.Random(3)
    rows = [(k, day or None, None if rng.random() < 0.1 else Decimal(f"{rng.uniform(1, 99):.2f}"), rng.randrange(100))
            for k in (None, 0, 1, 2) for day in range(60) if rng.random() < 0.9]
    relation = spark.createDataFrame(rows, "k int, d int, x decimal(8,2), v int")
    text = ("SELECT k AS sym, d, x, MAX(x) OVER (PARTITION BY k ORDER BY d ROWS BETWEEN 20 PRECEDING AND CURRENT ROW) AS hi, "
            "MIN(x) OVER (PARTITION BY k ORDER BY d ROWS BETWEEN 20 PRECEDING AND CURRENT ROW) AS lo, "
            "AVG(x) OVER (PARTITION BY k ORDER BY d ROWS BETWEEN 6 PRECEDING AND CURRENT ROW) AS a7, "
            "SUM(x * v) OVER (PARTITION BY k ORDER BY d ROWS BETWEEN 3 PRECEDING AND CURRENT ROW) AS s4, "
            "COUNT(x) OVER (PARTITION BY k ORDER BY d ROWS BETWEEN 9 PRECEDING AND CURRENT ROW) AS c10, "
            "AVG(v) OVER (PARTITION BY k ORDER BY d ROWS BETWEEN 9 PRECEDING AND CURRENT ROW) AS av FROM t")
    p = partition_of(parse_full(text, {"t": {"k": "int", "d": "int", "x": "decimal(8,2)", "v": "int"}}))
    assert (p.reach, p.sliding) == (20, True)
    relation.createOrReplaceTempView("lakeivm_test_whole")
    whole = spark.sql(as_written(text, {"t": "lakeivm_test_whole"}))
    for first in (None, 17, 45, 59):  # None: a change at a NULL d, the whole partition
        touched = relation.select("k").distinct().withColumn(maintainer._FROM, F.lit(first).cast("int"))
        joined = relation.alias("r").join(touched.alias("k"), F.col("r.k").eqNullSafe(F.col("k.k")))
        got = spark.sql(as_written(maintainer._frames_joined(joined, p, text, "lakeivm_test_part"), {"t": "lakeivm_test_part"}))
        want = whole if first is None else whole.where(f"d >= {first}")
        assert got.schema == want.schema
        assert sorted(got.collect(), key=repr) == sorted(want.collect(), key=repr), first
