"""The window kind's shape (``lakeivm.views.window.shape``) and the classifier's choice: which SQL it
claims, its partition columns, and the reason auto recomputes the rest in full. No Spark."""
from __future__ import annotations

import pytest

from lakeivm.errors import UnsupportedQuery
from lakeivm.catalog.registry import choose, spec_from_dict
from lakeivm.sql import parse_full
from lakeivm.views.window.shape import WHOLE_TABLE, partition_of

SCHEMAS = {"t": {"k": "int", "j": "int", "ts": "int", "v": "int"}, "u": {"k": "int", "w": "int"}}


def spec(sql: str, **options) -> object:
    return spec_from_dict({"name": "w", "deadline": 60, "sql": sql, **options}, source="w.yaml")


@pytest.mark.parametrize("sql, partition", [
    ("SELECT k, ts, ROW_NUMBER() OVER (PARTITION BY k ORDER BY ts DESC) AS rn FROM t", (("k",), ("k",))),
    ("SELECT k AS key, ts, LEAD(ts) OVER (PARTITION BY k ORDER BY ts) AS end_ts FROM t WHERE v > 0", (("k",), ("key",))),
    ("SELECT *, RANK() OVER (PARTITION BY j, k ORDER BY v) AS r, SUM(v) OVER (PARTITION BY K) AS s FROM t", (("k",), ("k",))),
    ("SELECT DISTINCT k, j, MAX(v) OVER (PARTITION BY k, j) AS mv FROM t", (("k", "j"), ("k", "j"))),
    ("SELECT k, ts, LAST_VALUE(v) IGNORE NULLS OVER (PARTITION BY k, upper(j) ORDER BY ts) AS lv FROM t", (("k",), ("k",))),
    ("SELECT d.k, ts FROM (SELECT k, j, ts, ROW_NUMBER() OVER (PARTITION BY k, j ORDER BY ts DESC) AS rn FROM t) AS d "
     "WHERE rn = 1", (("k",), ("k",))),
    ("WITH r AS (SELECT k AS key, *, RANK() OVER (PARTITION BY k ORDER BY ts) AS n FROM t WHERE v > 0) "
     "SELECT key AS id, ts FROM r WHERE n <= 3", (("k",), ("id",))),
])
def test_the_partition_is_the_plain_columns_every_window_shares_and_the_result_keeps(sql, partition):
    found = partition_of(parse_full(sql, SCHEMAS))
    assert (found.table, found.columns, found.outputs) == ("t", *partition)
    choice = choose(spec(sql), SCHEMAS)
    assert (choice.kind, choice.why_full) == ("window", None)


@pytest.mark.parametrize("sql, reason", [
    ("SELECT k, RANK() OVER (ORDER BY v) AS r FROM t", WHOLE_TABLE),
    ("SELECT k, RANK() OVER (PARTITION BY k ORDER BY v) AS r, SUM(v) OVER () AS s FROM t", WHOLE_TABLE),
    ("SELECT k, RANK() OVER (PARTITION BY k ORDER BY v) AS r, SUM(v) OVER (PARTITION BY j) AS s FROM t", "no plain column"),
    ("SELECT k, SUM(v) OVER (PARTITION BY k + 1) AS s FROM t", "no plain column"),
    ("SELECT ts, RANK() OVER (PARTITION BY k ORDER BY v) AS r FROM t", "partition column 'k' is not a column of the result"),
    ("SELECT k, COUNT(*) OVER (PARTITION BY k) AS n FROM t GROUP BY k", "GROUP BY beside window functions"),
    ("SELECT t.k, ROW_NUMBER() OVER (PARTITION BY t.k ORDER BY w) AS rn FROM t JOIN u ON t.k = u.k", "a JOIN beside"),
    ("SELECT k, ROW_NUMBER() OVER (PARTITION BY k ORDER BY v) AS rn FROM t ORDER BY rn LIMIT 3", "LIMIT beside"),
    ("SELECT k, SUM(v) OVER (PARTITION BY k) AS s FROM t WHERE v > (SELECT AVG(w) FROM u)", "a subquery beside"),
])
def test_what_the_window_kind_refuses_auto_recomputes_in_full_naming_why(sql, reason):
    choice = choose(spec(sql), SCHEMAS)
    assert choice.kind == "full" and reason in choice.why_full, choice.why_full
    with pytest.raises(UnsupportedQuery, match=reason.replace("(", r"\(").replace("+", r"\+")):
        choose(spec(sql, refresh_policy="incremental"), SCHEMAS)


def test_a_window_under_another_kind_is_refused_and_kind_window_needs_a_window():
    windowed = "SELECT k, ROW_NUMBER() OVER (PARTITION BY k ORDER BY v) AS rn FROM t"
    with pytest.raises(UnsupportedQuery, match="kind window maintains window functions"):
        choose(spec(windowed, kind="first_order"), SCHEMAS)
    assert choose(spec(windowed, kind="window"), SCHEMAS).kind == "window"
    with pytest.raises(UnsupportedQuery, match="this SELECT has none"):
        choose(spec("SELECT k, SUM(v) AS s FROM t GROUP BY k", kind="window"), SCHEMAS)


def test_explain_names_the_partition_and_the_cost():
    from lakeivm.views.kinds import kind

    query = choose(spec("SELECT k AS key, ts, LEAD(ts) OVER (PARTITION BY k ORDER BY ts) AS e FROM t"), SCHEMAS).query
    line = kind("window").describe(spec("SELECT 1"), query)
    assert "partitioned by k (result column key) of t" in line and "the touched partitions' rows" in line


@pytest.mark.parametrize("sql, split", [
    ("SELECT k, ts FROM (SELECT k, ts, ROW_NUMBER() OVER (PARTITION BY k ORDER BY ts DESC) AS rn FROM t) AS d WHERE rn = 1", False),
    ("WITH r AS (SELECT k, ts, ROW_NUMBER() OVER (PARTITION BY k ORDER BY ts DESC) AS rn FROM t) SELECT * FROM r WHERE rn = 1", False),
    # kept whole only where the window kind can take it whole: else the window splits off, as before
    ("SELECT ts FROM (SELECT k, ts, ROW_NUMBER() OVER (PARTITION BY k ORDER BY ts DESC) AS rn FROM t) AS d WHERE rn = 1", True),
    ("SELECT k, ts FROM (SELECT k, ts, ROW_NUMBER() OVER (ORDER BY ts DESC) AS rn FROM t) AS d WHERE rn = 1", True),
    ("SELECT d.k, w FROM (SELECT k, ROW_NUMBER() OVER (PARTITION BY k ORDER BY ts) AS rn FROM t) AS d JOIN u ON u.k = d.k "
     "WHERE rn = 1", True),
    ("SELECT k, COUNT(*) AS n FROM (SELECT k, ROW_NUMBER() OVER (PARTITION BY k ORDER BY ts) AS rn FROM t) AS d "
     "WHERE rn < 3 GROUP BY k", True),
])
def test_the_latest_rows_per_partition_are_kept_whole_where_the_window_kind_takes_them(sql, split):
    from lakeivm.sql.split import derived_views

    assert bool(derived_views(sql, lambda alias: f"w__{alias}")[1]) == split
    if not split:
        choice = choose(spec(sql), SCHEMAS)
        assert (choice.kind, choice.why_full) == ("window", None)


@pytest.mark.parametrize("sql, order", [
    ("SELECT k, ts AS day, MAX(v) OVER (PARTITION BY k ORDER BY ts ROWS BETWEEN 364 PRECEDING AND CURRENT ROW) AS hi, "
     "AVG(v) OVER (PARTITION BY k ORDER BY ts ROWS BETWEEN 19 PRECEDING AND CURRENT ROW) AS a FROM t", ("ts", "day")),
    ("SELECT k, ts, SUM(v) OVER (PARTITION BY k ORDER BY ts) AS s, RANK() OVER (PARTITION BY k ORDER BY ts) AS r, "
     "LAG(v, 2) OVER (PARTITION BY k ORDER BY ts) AS l, LAST_VALUE(v) IGNORE NULLS OVER (PARTITION BY k ORDER BY ts) AS lv, "
     "SUM(v) OVER (PARTITION BY k ORDER BY ts ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS b FROM t", ("ts", "ts")),
    ("WITH r AS (SELECT k, ts, ROW_NUMBER() OVER (PARTITION BY k ORDER BY ts) AS rn FROM t) SELECT k, ts AS f FROM r WHERE rn = 1",
     ("ts", "f")),
    # a window that looks ahead, another order, or O not in the result: the whole partition
    ("SELECT k, ts, LEAD(v) OVER (PARTITION BY k ORDER BY ts) AS l FROM t", None),
    ("SELECT k, ts, NTILE(2) OVER (PARTITION BY k ORDER BY ts) AS l FROM t", None),
    ("SELECT k, ts, SUM(v) OVER (PARTITION BY k ORDER BY ts ROWS BETWEEN 1 PRECEDING AND 1 FOLLOWING) AS l FROM t", None),
    ("SELECT k, ts, SUM(v) OVER (PARTITION BY k ORDER BY ts DESC) AS l FROM t", None),
    ("SELECT k, ts, SUM(v) OVER (PARTITION BY k ORDER BY ts NULLS LAST) AS l FROM t", None),
    ("SELECT k, ts, SUM(v) OVER (PARTITION BY k ORDER BY ts, v) AS l FROM t", None),
    ("SELECT k, ts, SUM(v) OVER (PARTITION BY k ORDER BY ts) AS l, SUM(v) OVER (PARTITION BY k ORDER BY v) AS w FROM t", None),
    ("SELECT k, ts, SUM(v) OVER (PARTITION BY k) AS l FROM t", None),
    ("SELECT k, SUM(v) OVER (PARTITION BY k ORDER BY ts) AS l FROM t", None),
])
def test_windows_that_look_back_along_one_ascending_column_name_it(sql, order):
    p = partition_of(parse_full(sql, SCHEMAS))
    assert p.order == order
    assert p.sliding == ("364 PRECEDING" in sql)  # every window an aggregate over the n rows before a row and itself


@pytest.mark.parametrize("sql, top", [
    ("WITH r AS (SELECT k, ts, v, ROW_NUMBER() OVER (PARTITION BY k ORDER BY ts DESC) AS rn FROM t) SELECT k, ts AS day, v FROM r "
     "WHERE rn = 1", ("ts", "day", True)),
    ("SELECT k, ts FROM (SELECT k, ts, RANK() OVER (PARTITION BY k ORDER BY ts DESC NULLS FIRST) AS n FROM t WHERE v > 0) AS d "
     "WHERE n <= 3", ("ts", "ts", True)),
    ("SELECT k, ts FROM (SELECT k, ts, DENSE_RANK() OVER (PARTITION BY k ORDER BY ts NULLS LAST) AS n FROM t) AS d WHERE n < 3",
     ("ts", "ts", False)),
    # the kept rows' lowest O would not bound what a run reads: another filter, rank, order or partition, O not kept
    ("SELECT k, ts FROM (SELECT k, ts, ROW_NUMBER() OVER (PARTITION BY k ORDER BY ts DESC) AS rn FROM t) AS d WHERE rn = 2", None),
    ("SELECT k, ts FROM (SELECT k, ts, v, ROW_NUMBER() OVER (PARTITION BY k ORDER BY ts DESC) AS rn FROM t) AS d "
     "WHERE rn = 1 AND v > 0", None),
    ("SELECT k, ts FROM (SELECT k, ts, v, ROW_NUMBER() OVER (PARTITION BY k ORDER BY ts DESC, v) AS rn FROM t) AS d WHERE rn = 1",
     None),
    ("SELECT k, ts FROM (SELECT k, j, ts, ROW_NUMBER() OVER (PARTITION BY k, j ORDER BY ts DESC) AS rn FROM t) AS d WHERE rn = 1",
     None),
    ("SELECT k, v FROM (SELECT k, v, ROW_NUMBER() OVER (PARTITION BY k ORDER BY ts DESC) AS rn FROM t) AS d WHERE rn = 1", None),
    ("SELECT k, ts, ROW_NUMBER() OVER (PARTITION BY k ORDER BY ts DESC) AS rn FROM t", None),
    # ascending with NULLs first: the windows look back, rewritten from the first changed O on instead
    ("SELECT k, ts FROM (SELECT k, ts, ROW_NUMBER() OVER (PARTITION BY k ORDER BY ts) AS rn FROM t) AS d WHERE rn = 1", None),
])
def test_the_top_rows_per_partition_by_one_column_are_read_from_the_lowest_kept_on(sql, top):
    p = partition_of(parse_full(sql, SCHEMAS))
    assert (None if p.top is None else (p.top.order, p.top.output, p.top.descending)) == top


@pytest.mark.parametrize("sql, stored", [
    ("SELECT k AS key, ts, v FROM (SELECT k, ts, v, RANK() OVER (PARTITION BY k ORDER BY ts DESC) AS n FROM t) AS d WHERE n <= 3",
     (("k", "key"), ("ts", "ts"), ("v", "v"))),  # j is not read
    ("WITH r AS (SELECT k, ts AS day, v, ROW_NUMBER() OVER (PARTITION BY k ORDER BY ts DESC) AS rn FROM t) SELECT k, day FROM r "
     "WHERE rn = 1", None),  # v is read (and kept) but not in the result
    ("SELECT k, ts FROM (SELECT k, ts, RANK() OVER (PARTITION BY k ORDER BY ts DESC) AS n FROM t WHERE v > 0) AS d WHERE n <= 3",
     None),  # v filters the relation but is not in the result
    ("WITH r AS (SELECT k, ts, v, ROW_NUMBER() OVER (PARTITION BY k ORDER BY ts DESC, v DESC) AS rn FROM t) SELECT k, ts, v FROM r "
     "WHERE rn = 1", (("k", "k"), ("ts", "ts"), ("v", "v"))),  # a tie-breaker: read back from the result only
])
def test_the_top_rows_are_read_back_from_the_result_where_it_holds_every_column_read(sql, stored):
    assert partition_of(parse_full(sql, SCHEMAS)).top.stored == stored
