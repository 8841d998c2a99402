"""The SQL IR: relations, joins, filters, group keys, aggregates; unsupported constructs named."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakeivm.errors import UnsupportedQuery
from lakeivm.sql import Aggregate, OuterJoin, join_links, join_order, parse_query, recompute_sql, reduced_sql, state_sql

SCHEMAS = {
    "r": {"a": "int", "x": "int"},
    "s": {"a": "int", "b": "int", "g": "string"},
    "t": {"b": "int", "y": "double"},
}


def test_ir_of_a_three_way_join():
    q = parse_query(
        "SELECT g, SUM(x * y) AS sxy, COUNT(*) AS c, AVG(y) AS ay FROM r JOIN s ON r.a = s.a, t "
        "WHERE s.b = t.b AND x > 3 GROUP BY g",
        SCHEMAS,
    )
    assert q.tables == ("r", "s", "t")
    assert [(j.left_alias, j.right_alias) for j in q.joins] == [("r", "s"), ("s", "t")]
    assert q.filters == {"r": ("r.x > 3",)}
    assert [k.name for k in q.group_keys] == ["g"]
    assert set(q.columns_of("r")) == {"x", "a"}
    assert [o.name for o in q.outputs] == ["g", "sxy", "c", "ay"]
    assert q.state_columns[0] == "_lakeivm_count"


def test_sum_and_avg_of_one_expression_share_state():
    q = parse_query("SELECT g, SUM(b) AS s, AVG(b) AS a, COUNT(b) AS n FROM s GROUP BY g", SCHEMAS)
    assert len([a for a in q.aggregates if a.sql]) == 1
    assert q.outputs[2].finalize_sql == "CASE WHEN _lakeivm_n0 = 0 THEN NULL ELSE _lakeivm_s0 / _lakeivm_n0 END"


def test_self_join_has_two_aliases_of_one_table():
    q = parse_query("SELECT COUNT(*) AS c FROM s AS s1 JOIN s AS s2 ON s1.b = s2.a", SCHEMAS)
    assert q.aliases_of("s") == ("s1", "s2")
    assert q.tables == ("s",)


def test_state_sql_weights_by_the_delta_multiplicity():
    q = parse_query("SELECT g, SUM(x) AS sx FROM r JOIN s ON r.a = s.a GROUP BY g", SCHEMAS)
    sql = state_sql(q, {"r": "delta_r", "s": "snap_s"}, delta_alias="r")
    assert "r._lakeivm_m" in sql and "delta_r AS r" in sql and "snap_s AS s" in sql
    assert "FROM snap_r AS r" in recompute_sql(q, {"r": "snap_r", "s": "snap_s"})


def test_hidden_group_key_when_not_selected():
    q = parse_query("SELECT SUM(x) AS sx FROM r GROUP BY a", SCHEMAS)
    assert [k.name for k in q.group_keys] == ["_lakeivm_g0"]


@pytest.mark.parametrize(
    "sql, message",
    [
        ("SELECT g FROM s JOIN t ON t.b = s.b FULL JOIN r ON r.a = s.a GROUP BY g", "FULL JOIN is not supported"),  # pads a join
        ("SELECT g FROM s FULL JOIN r ON r.a = s.a LEFT JOIN t ON t.b = s.b GROUP BY g", "FULL JOIN is not supported"),
        ("SELECT s.g FROM s FULL JOIN r ON r.a = s.a JOIN s AS s2 ON s2.b = s.b GROUP BY s.g", "FULL JOIN r: its other side, s, occurs twice"),
        ("SELECT g FROM s LEFT ANTI JOIN r ON r.a < s.a GROUP BY g", r"LEFT ANTI JOIN \(from \[NOT\] EXISTS or \[NOT\] IN\) r: its ON has no"),
        ("SELECT g FROM s RIGHT JOIN r ON r.a = s.a JOIN t ON t.b = s.b GROUP BY g", "RIGHT JOIN is not supported"),
        ("SELECT g FROM s LEFT JOIN r ON r.a < s.a GROUP BY g", "LEFT JOIN r: its ON has no equality"),
        ("SELECT s.g FROM s LEFT JOIN s AS s2 ON s2.a = s.a GROUP BY s.g", "LEFT JOIN s: the table occurs twice"),
        ("SELECT g, SUM(b) FROM s GROUP BY g HAVING g > 1", "HAVING is not supported"),
        ("SELECT g, SUM(b) FROM s GROUP BY g ORDER BY g LIMIT 2 OFFSET 1", r"ORDER BY \.\.\. LIMIT \(a top-k\) is not supported"),
        ("SELECT DISTINCT g, COUNT(*) FROM s GROUP BY g", "SELECT DISTINCT is not supported"),
        ("SELECT g, COUNT(DISTINCT b, g) FROM s GROUP BY g", "DISTINCT inside COUNT"),
        ("SELECT g, SUM(b) OVER (PARTITION BY g) FROM s", "window function"),
        ("SELECT g, MEDIAN(b) FROM s GROUP BY g", "aggregate MEDIAN"),
        ("SELECT g, EVERY(b > 0) FROM s GROUP BY g", "aggregate EVERY"),
        ("SELECT g, EXPLODE(ARRAY(b)) AS e FROM s", r"generator explode\(\)"),
        ("SELECT g FROM nope GROUP BY g", "unknown table 'nope'"),
        ("SELECT zz, COUNT(*) FROM s GROUP BY zz", "Column 'zz' could not be resolved"),
        ("SELECT b, COUNT(*) FROM s GROUP BY g", "neither a GROUP BY key nor an aggregate"),
        ("SELECT a FROM r INTERSECT SELECT a FROM s", "INTERSECT is not maintained incrementally"),
        ("SELECT a FROM r UNION SELECT a FROM s UNION ALL SELECT a FROM r", "UNION is not maintained incrementally"),
        ("SELECT k, SUM(v) FROM (SELECT a AS k, COUNT(*) AS v FROM r GROUP BY a UNION ALL SELECT a, b FROM s) AS u GROUP BY k",
         "branch 1 has GROUP BY"),
        ("SELECT u.k, COUNT(*) FROM (SELECT a AS k FROM r UNION ALL SELECT a FROM s) AS u JOIN t ON t.b = u.k GROUP BY u.k",
         "UNION ALL joined with other tables"),
        ("SELECT k, COUNT(DISTINCT k) FROM (SELECT a AS k FROM r UNION ALL SELECT a FROM s) AS u GROUP BY k",
         r"COUNT\(DISTINCT \.\.\.\) is not maintained incrementally over UNION ALL"),
        ("SELEC a FROM r", "does not parse"),
        ("SELECT TRANSFORM(a, x) USING 'id' AS (u, v) FROM r", r"TRANSFORM \.\.\. USING \(a script\) is not supported"),
        ("SELECT g, COUNT(*) FROM s TABLESAMPLE (10 PERCENT) GROUP BY g", "TABLESAMPLE is not supported"),
        ("SELECT g, COUNT(*) FROM s WHERE b = ? GROUP BY g", "a query parameter is not supported"),
        ("SELECT g, COUNT(*) FROM s WHERE g = '${env:AWS_SECRET_ACCESS_KEY}' GROUP BY g", r"\$\{\.\.\.\} is not allowed"),
    ],
)
def test_unsupported_sql_is_named(sql, message):
    with pytest.raises(UnsupportedQuery, match=message):
        parse_query(sql, SCHEMAS, source="views/x.yaml")


def test_error_names_the_line():
    with pytest.raises(UnsupportedQuery, match=r"views/x.yaml: line 4: FULL OUTER JOIN"):
        parse_query("SELECT g, COUNT(*)\nFROM s\nJOIN t ON t.b = s.b\nFULL OUTER JOIN r ON r.a = s.a\nGROUP BY g", SCHEMAS,
                    source="views/x.yaml")


def test_delta_query_starts_from_the_delta_along_the_join_graph():
    q = parse_query("SELECT g, SUM(y) AS sy FROM r JOIN s ON r.a = s.a JOIN t ON s.b = t.b GROUP BY g", SCHEMAS)
    sql = state_sql(q, {"r": "snap_r", "s": "snap_s", "t": "delta_t"}, delta_alias="t")
    assert sql.startswith("SELECT /*+ BROADCAST(t) */")
    assert "FROM delta_t AS t, snap_s AS s, snap_r AS r WHERE" in sql  # t, then its neighbour s, then r
    assert "r.a = s.a" in sql and "s.b = t.b" in sql


def test_java_method_in_where_is_refused_naming_function_file_and_line():
    sql = ("SELECT g, COUNT(*) AS c FROM s\n"
           "WHERE java_method('java.lang.System', 'setProperty', 'lakeivm.pwned', 'yes') IS NOT NULL\nGROUP BY g")
    with pytest.raises(UnsupportedQuery, match=r"views/x.yaml: line 2: function java_method\(\) is not allowed") as err:
        parse_query(sql, SCHEMAS, source="views/x.yaml")
    assert "compute the value into a column" in str(err.value)


@pytest.mark.parametrize(
    "expression, name",
    [
        ("reflect('java.lang.System', 'getenv', 'HOME')", "reflect"),
        ("getenv('HOME')", "getenv"),
        ("my_udf(g)", "my_udf"),
        ("db.my_udf(g)", "db.my_udf"),
        ("db.md5(g)", "db.md5"),
    ],
)
def test_functions_outside_the_vetted_set_are_refused(expression, name):
    with pytest.raises(UnsupportedQuery, match=rf"(?i)line 1: function {name}\(\) is not allowed in a view"):
        parse_query(f"SELECT g, COUNT(*) AS c FROM s WHERE {expression} IS NOT NULL GROUP BY g", SCHEMAS, source="v.yaml")


@pytest.mark.parametrize("call", ["rand()", "random()", "uuid()", "now()", "current_timestamp()", "current_date",
                                  "unix_timestamp()", "monotonically_increasing_id()", "input_file_name()"])
def test_non_deterministic_functions_are_refused_by_name(call):
    name = "current_timestamp" if call == "unix_timestamp()" else call.split("(")[0]  # what it reads
    with pytest.raises(UnsupportedQuery, match=rf"(?i)v.yaml: line 2: non-deterministic function {name}\(\) is not allowed "
                                               "in a view: "):
        parse_query(f"SELECT g, COUNT(*) AS c FROM s\nWHERE b < 3 AND {call} IS NOT NULL GROUP BY g", SCHEMAS, source="v.yaml")


def test_a_regression_feature_may_not_call_refused_functions():
    from lakeivm.views.fivm.plan import fit_query

    q = parse_query("SELECT COUNT(*) AS c FROM s", SCHEMAS)
    with pytest.raises(UnsupportedQuery, match=r"feature .*: line 1: function reflect\(\) is not allowed"):
        fit_query(q, {"features": ["reflect('java.lang.System', 'getenv', 'HOME') AS x"], "label": "b"}, SCHEMAS)
    with pytest.raises(UnsupportedQuery, match=r"feature .*: \$\{\.\.\.\} is not allowed"):
        fit_query(q, {"features": ["LENGTH('${env:HOME}') AS x"], "label": "b"}, SCHEMAS)


def test_vetted_deterministic_functions_are_accepted():
    sql = ("SELECT UPPER(TRIM(g)) AS ug, YEAR(TO_DATE(g)) AS yr, SUM(CASE WHEN s.b > 0 THEN ABS(s.b) ELSE 0 END) AS sb, "
           "AVG(COALESCE(ROUND(y, 2), FLOOR(y), CEIL(y))) AS ay, COUNT(*) AS c, MIN(LENGTH(SUBSTRING(g, 1, 2))) AS mn, "
           "MAX(IF(NULLIF(s.b, 0) IS NULL, 0, CAST(s.b AS DOUBLE))) AS mx "
           "FROM s JOIN t ON s.b = t.b "
           "WHERE LOWER(CONCAT(g, 'x')) LIKE 'a%' AND DATEDIFF(DATE_ADD(TO_DATE(g), 1), TO_DATE(g)) = 1 "
           "AND EXTRACT(MONTH FROM DATE_TRUNC('month', TO_DATE(g))) = MONTH(TO_DATE(g)) "
           "GROUP BY UPPER(TRIM(g)), YEAR(TO_DATE(g))")
    q = parse_query(sql, SCHEMAS)
    assert [o.name for o in q.outputs] == ["ug", "yr", "sb", "ay", "c", "mn", "mx"]
    hashed = parse_query("SELECT MD5(g) AS h, SHA2(g, 256) AS h2, CRC32(g) AS c, HASH(g) AS h3, XXHASH64(g) AS h4, COUNT(*) AS n "
                         "FROM s WHERE REGEXP_LIKE(g, '^a') AND g RLIKE 'b' AND SIZE(TRANSFORM(ARRAY(s.b), v -> v + 1)) = 1 "
                         "GROUP BY 1, 2, 3, 4, 5", SCHEMAS)  # Spark's deterministic built-ins (lakeivm.sql.functions)
    assert [o.name for o in hashed.outputs] == ["h", "h2", "c", "h3", "h4", "n"]


def test_the_reason_names_the_construct_that_blocks_incremental_maintenance():
    with pytest.raises(UnsupportedQuery, match=r"a window function \(MAX\(s.b\) OVER \(\.\.\.\)\) is not supported") as err:
        parse_query("SELECT DISTINCT g, MAX(b) OVER (PARTITION BY g) AS mb FROM s", SCHEMAS)  # not DISTINCT: it is maintained
    assert "DISTINCT" not in str(err.value)
    with pytest.raises(UnsupportedQuery, match=r"aggregate MEDIAN\(s.b\) is not maintained incrementally; SUM, COUNT, AVG, MIN, "
                                               r"MAX, COUNT\(DISTINCT e\) and STDDEV/VARIANCE"):
        parse_query("SELECT g, MEDIAN(b) AS md FROM s GROUP BY g", SCHEMAS)
    spread = parse_query("SELECT g, STDDEV(b) AS sd, VAR_POP(b) AS vp FROM s GROUP BY g", SCHEMAS)
    exact = "CAST(s.b AS DECIMAL(38, 0))"  # an INT: summed exactly, squares too (n·Σx² − (Σx)² does not cancel digits away)
    assert [(a.func, a.sql) for a in spread.aggregates] == [("SUM", exact), ("SUM", f"{exact} * {exact}")]
    doubles = parse_query("SELECT g, STDDEV(b * 0.5e0) AS sd FROM s GROUP BY g", SCHEMAS)
    assert [a.sql for a in doubles.aggregates] == ["CAST(s.b * 0.5e0 AS DOUBLE)", "CAST(s.b * 0.5e0 AS DOUBLE) * CAST(s.b * 0.5e0 AS DOUBLE)"]


def test_plain_ctes_and_derived_tables_are_merged_and_an_order_by_is_ignored():
    merged = parse_query("WITH t AS (SELECT a, x FROM r WHERE x > 0) SELECT d.a, SUM(d.x) AS s FROM (SELECT a, x FROM t) AS d "
                         "GROUP BY d.a ORDER BY s", SCHEMAS)
    assert merged.tables == ("r",) and not merged.has_subquery and merged.filters
    assert merged.notes == ("ORDER BY ignored: a view's rows have no order; sort when reading it",)
    with pytest.raises(UnsupportedQuery, match="a CTE that is not a plain SELECT"):
        parse_query("WITH t AS (SELECT a, SUM(x) AS s FROM r GROUP BY a) SELECT a, s FROM t", SCHEMAS)
    with pytest.raises(UnsupportedQuery, match="a derived table that is not a plain SELECT"):
        parse_query("SELECT t.a, COUNT(*) AS n FROM (SELECT DISTINCT a FROM r) AS t GROUP BY t.a", SCHEMAS)


def test_a_top_k_over_result_columns_is_kept_as_its_groups_plus_the_order_and_k():
    q = parse_query("SELECT g, SUM(x) AS sx FROM r JOIN s ON r.a = s.a GROUP BY g ORDER BY sx DESC, g LIMIT 3", SCHEMAS)
    assert (q.top, q.limit) == ((("sx", True, False), ("g", False, True)), 3)  # Spark: ASC nulls first, DESC nulls last
    assert q.tree.args.get("limit") is None and q.tree.args.get("order") is None and "LIMIT 3" in q.notes[0]
    by_expression = parse_query("SELECT g, SUM(x) AS sx FROM r JOIN s ON r.a = s.a GROUP BY g ORDER BY SUM(x) DESC NULLS FIRST LIMIT 1",
                                SCHEMAS)
    assert by_expression.top == (("sx", True, True),)
    with pytest.raises(UnsupportedQuery, match="line 1: ORDER BY .*not a result column"):
        parse_query("SELECT g, SUM(x) AS sx FROM r JOIN s ON r.a = s.a GROUP BY g ORDER BY COUNT(*) LIMIT 3", SCHEMAS)
    with pytest.raises(UnsupportedQuery, match=r"ORDER BY \.\.\. LIMIT \(a top-k\)"):
        parse_query("SELECT g, SUM(x) AS sx FROM r JOIN s ON r.a = s.a GROUP BY g ORDER BY sx LIMIT 3 OFFSET 1", SCHEMAS)


def test_a_having_over_aggregates_is_kept_as_a_hidden_column_of_every_group():
    q = parse_query("SELECT g, SUM(x) AS sx FROM r JOIN s ON r.a = s.a GROUP BY g HAVING sx > 1 AND COUNT(*) >= 2", SCHEMAS)
    assert q.having and q.tree.args.get("having") is None and q.outputs[-1].name == "_lakeivm_having"
    assert "_lakeivm_count >= 2" in q.outputs[-1].finalize_sql and "_lakeivm_s0" in q.outputs[-1].finalize_sql  # sx expanded
    with pytest.raises(UnsupportedQuery, match="HAVING is not supported"):
        parse_query("SELECT g, SUM(x) AS sx FROM r JOIN s ON r.a = s.a GROUP BY g HAVING SUM(x) > (SELECT MAX(y) FROM t)", SCHEMAS)


def test_count_distinct_of_one_expression_is_a_multiset_aggregate():
    q = parse_query("SELECT g, COUNT(DISTINCT x) AS dx, COUNT(x) AS nx FROM r JOIN s ON r.a = s.a GROUP BY g", SCHEMAS)
    (distinct,) = q.extrema
    assert distinct.func == "DISTINCT" and q.outputs[1].finalize_sql == f"COALESCE(_lakeivm_s{distinct.index}, 0)"
    with pytest.raises(UnsupportedQuery, match=r"DISTINCT inside SUM is not supported"):
        parse_query("SELECT g, SUM(DISTINCT x) AS sx FROM r JOIN s ON r.a = s.a GROUP BY g", SCHEMAS)


def test_left_join_is_recorded_and_a_lone_right_join_turned_into_one():
    left = parse_query("SELECT r.a, COUNT(s.g) AS n FROM r LEFT JOIN s ON r.a = s.a AND s.b > 0 GROUP BY r.a", SCHEMAS)
    assert left.outer == (OuterJoin("s", "a", "r", "a"),)
    delta = state_sql(left, {"r": "delta_r", "s": "snap_s"}, delta_alias="r")
    assert "FROM delta_r AS r LEFT JOIN snap_s AS s ON r.a = s.a AND s.b > 0" in delta  # the ON stays: not the delta-first WHERE
    right = parse_query("SELECT s.g, SUM(r.x) AS sx FROM s RIGHT OUTER JOIN r ON s.a = r.a GROUP BY s.g", SCHEMAS)
    assert right.outer == (OuterJoin("s", "a", "r", "a"),) and [r.alias for r in right.relations] == ["r", "s"]
    assert "RIGHT JOIN maintained as the LEFT JOIN" in right.notes[0]
    full = parse_query("SELECT COALESCE(r.a, s.a) AS k, COUNT(*) AS n FROM r FULL JOIN s ON r.a = s.a GROUP BY COALESCE(r.a, s.a)", SCHEMAS)
    assert full.outer == (OuterJoin("s", "a", "r", "a", "full"),)  # a change of either side is traced through the other
    assert [full.outer[0].padding(a) for a in ("s", "r")] == [full.outer[0], OuterJoin("r", "a", "s", "a", "full")]


def test_exists_and_in_subqueries_over_one_table_become_semi_and_anti_joins():
    q = parse_query("SELECT r.a, COUNT(*) AS n FROM r WHERE EXISTS (SELECT * FROM s WHERE s.a = r.a AND s.b > 0) "
                    "AND NOT EXISTS (SELECT 1 FROM r AS r2 WHERE r2.a = r.a AND r2.x <> r.x) "
                    "AND r.x NOT IN (SELECT t.b FROM t WHERE t.y > 1) AND r.a IN (SELECT a FROM s) GROUP BY r.a", SCHEMAS)
    assert q.outer == (OuterJoin("s", "a", "r", "a", "semi"), OuterJoin("r2", "a", "r", "a", "anti"),
                       OuterJoin("t", "b", "r", "x", "not_in"), OuterJoin("s__s0", "a", "r", "a", "semi")) and not q.has_subquery
    sql = state_sql(q, {a: f"src_{a}" for a in ("r", "s", "r2", "t", "s__s0")})
    assert "LEFT ANTI JOIN src_t AS t ON (r.x = t.b OR (r.x = t.b) IS NULL) AND t.y > 1" in sql  # NOT IN's NULL rule
    assert "LEFT SEMI JOIN src_s__s0 AS s__s0 ON r.a = s__s0.a" in sql  # s occurs twice: the second gets an alias
    for kept in ("SELECT a, COUNT(*) AS n FROM r WHERE EXISTS (SELECT * FROM s WHERE s.b > r.x) GROUP BY a",  # no equality
                 "SELECT a, COUNT(*) AS n FROM r WHERE a IN (SELECT a FROM s GROUP BY a HAVING COUNT(*) > 1) GROUP BY a"):
        assert parse_query(kept, SCHEMAS).has_subquery  # left to the nested kind (or a full recompute)


def test_union_all_is_one_query_per_branch_with_the_same_state():
    q = parse_query("SELECT k, SUM(v) AS sv FROM (SELECT a AS k, x AS v FROM r UNION ALL SELECT s.a, t.y FROM s "
                    "JOIN t ON s.b = t.b) AS u WHERE v > 0 GROUP BY k", SCHEMAS)
    assert [r.alias for r in q.relations] == ["r__u0", "s__u1", "t__u1"] and len(q.branches) == 2
    assert [b.aggregates for b in q.branches] == [(Aggregate("SUM", "r__u0.x", 0),), (Aggregate("SUM", "t__u1.y", 0),)]
    assert "WHERE t__u1.y > 0" in state_sql(q.branches[1], {"s__u1": "S", "t__u1": "T"})  # the outer WHERE, per branch
    delta = state_sql(q, {"r__u0": "R", "s__u1": "S", "t__u1": "delta_t"}, delta_alias="t__u1")
    assert "delta_t" in delta and " R " not in delta  # only the branch that reads t
    distinct = parse_query("SELECT a FROM r UNION SELECT a FROM s", SCHEMAS)
    assert distinct.implicit_keys == "distinct" and [k.name for k in distinct.group_keys] == ["a"]


def test_aggregating_ctes_and_derived_tables_split_off_as_views():
    from lakeivm.sql import derived_views

    name = lambda alias: f"v__{alias}"  # noqa: E731
    sql, views = derived_views("SELECT n, COUNT(*) AS k FROM (SELECT a, COUNT(*) AS n FROM t GROUP BY a) AS d GROUP BY n", name)
    assert sql == "SELECT n, COUNT(*) AS k FROM v__d AS d GROUP BY n" and views == {"v__d": "SELECT a, COUNT(*) AS n FROM t GROUP BY a"}
    sql, views = derived_views("WITH r AS (SELECT a, SUM(x) AS s FROM t GROUP BY a) "
                               "SELECT u.b, r.s FROM u JOIN r ON u.a = r.a WHERE r.s > (SELECT MAX(s) FROM r) OR r.s < 0", name)
    assert sql == "SELECT u.b, r.s FROM u JOIN v__r AS r ON u.a = r.a WHERE r.s > (SELECT MAX(s) FROM v__r AS r) OR r.s < 0"
    assert views == {"v__r": "SELECT a, SUM(x) AS s FROM t GROUP BY a"}
    sql, views = derived_views("SELECT COUNT(*) AS n FROM (SELECT a FROM t WHERE x > 0) AS d", name)  # plain: merged later
    assert views == {}
    kept = "WITH p AS (SELECT a FROM t) SELECT n FROM (SELECT a, COUNT(*) AS n FROM p GROUP BY a) AS d"  # carries the CTE it reads
    assert derived_views(kept, name) == ("SELECT n FROM v__d AS d",
                                         {"v__d": "WITH p AS (SELECT a FROM t) SELECT a, COUNT(*) AS n FROM p GROUP BY a"})
    assert derived_views("SELECT n FROM (SELECT a, COUNT(*) AS n FROM t GROUP BY a) AS d", lambda alias: None)[1] == {}
    nested = "SELECT n FROM (SELECT a, COUNT(*) AS n FROM (SELECT b AS a, SUM(x) AS s FROM t GROUP BY b) AS i GROUP BY a) AS d"
    assert list(derived_views(nested, name)[1]) == ["v__d"]  # i is v__d's own, split when v__d is (registry)


def test_uncorrelated_aggregating_subqueries_split_off_as_views():
    from lakeivm.sql import derived_views

    name = lambda alias: f"v__{alias}"  # noqa: E731
    sql, views = derived_views("SELECT o, COUNT(*) AS n FROM t WHERE o IN (SELECT k FROM u GROUP BY k HAVING SUM(x) > 3) "
                               "AND NOT b IN (SELECT SUM(z) FROM u GROUP BY k) GROUP BY o", name)  # Q18's IN, a NOT IN
    assert sql == ("SELECT o, COUNT(*) AS n FROM t WHERE o IN (SELECT k FROM v__in1) AND NOT b IN (SELECT value FROM v__in2) "
                   "GROUP BY o")
    assert views == {"v__in1": "SELECT k FROM u GROUP BY k HAVING SUM(x) > 3", "v__in2": "SELECT SUM(z) AS value FROM u GROUP BY k"}
    sql, views = derived_views("WITH r AS (SELECT a, SUM(x) AS s FROM t GROUP BY a) "  # Q15: a global aggregate of a split view
                               "SELECT u.b, r.s FROM u JOIN r ON u.a = r.a WHERE r.s = (SELECT MAX(s) FROM r)", name)
    assert sql == "SELECT u.b, r.s FROM u JOIN v__r AS r ON u.a = r.a CROSS JOIN v__sq1 WHERE r.s = v__sq1.value"
    assert views == {"v__r": "SELECT a, SUM(x) AS s FROM t GROUP BY a", "v__sq1": "SELECT MAX(s) AS value FROM v__r AS r"}
    kept = [
        "SELECT a FROM t WHERE x IN (SELECT k FROM u WHERE u.k = t.a GROUP BY k)",  # correlated (a qualified outer column)
        "SELECT a FROM t WHERE x < (SELECT AVG(y) FROM u WHERE k = a)",  # unqualified columns of a lake table: maybe outer (Q17)
        "SELECT a FROM t WHERE x < (SELECT AVG(u.y) FROM u GROUP BY u.k)",  # not one row
        "SELECT a FROM t WHERE x < 1 OR x > (SELECT AVG(u.y) FROM u)",  # not a top-level AND term
        "SELECT a FROM t WHERE x IN (SELECT k FROM u)",  # no aggregate: a semi-join already
    ]
    for sql in kept:
        assert derived_views(sql, name) == (sql, {}), sql
    sql, views = derived_views("SELECT a FROM t WHERE x < (SELECT AVG(u.y) AS m FROM u)", name)  # qualified by its own table
    assert sql == "SELECT a FROM t CROSS JOIN v__sq1 WHERE x < v__sq1.m" and views == {"v__sq1": "SELECT AVG(u.y) AS m FROM u"}


CORRELATED = {"t": {"a": "int", "x": "int"}, "u": {"k": "int", "j": "int", "y": "int"}}  # the tables' columns (derived_views' schemas)


def test_correlated_scalar_subqueries_decorrelate_with_the_tables_columns():
    from lakeivm.sql import derived_views

    name = lambda alias: f"v__{alias}"  # noqa: E731
    sql = "SELECT a, x FROM t WHERE x > (SELECT 0.5 * SUM(y) FROM u WHERE k = a AND j > 0)"  # TPC-H Q20's, unqualified
    assert derived_views(sql, name) == (sql, {})  # without the columns, `a` may be u's: left in place
    sql, views = derived_views(sql, name, CORRELATED)
    assert sql == "SELECT t.a AS a, t.x AS x FROM t AS t CROSS JOIN v__sq1 WHERE t.x > v__sq1.value AND t.a = v__sq1.k"
    assert views == {"v__sq1": "SELECT u.k AS k, 0.5 * SUM(u.y) AS value FROM u AS u WHERE u.j > 0 GROUP BY u.k"}
    sql, views = derived_views("SELECT a FROM t WHERE a IN (SELECT u.k FROM u, t AS w WHERE u.j = w.a)", name, CORRELATED)
    assert sql == "SELECT t.a AS a FROM t AS t WHERE t.a IN (SELECT k FROM v__in1)"  # a join first_order cannot semi-join: a view
    assert views == {"v__in1": "SELECT u.k AS k FROM u AS u CROSS JOIN t AS w WHERE u.j = w.a"}
    kept = [
        "SELECT a FROM t WHERE x > (SELECT COUNT(*) FROM u WHERE k = a)",  # 0 over no rows, not NULL: an inner join would drop rows
        "SELECT a FROM t WHERE x > (SELECT COALESCE(SUM(y), 0) FROM u WHERE k = a)",  # the same
        "SELECT a FROM t WHERE x > (SELECT SUM(y) FROM u WHERE k < a)",  # correlated by an inequality (RPAI's class)
        "SELECT a FROM t WHERE x > (SELECT SUM(y) FROM u WHERE k = a OR j = a)",  # not by equalities alone
        "SELECT a FROM t WHERE x > 0 OR x > (SELECT SUM(y) FROM u WHERE k = a)",  # not a top-level AND term
        "SELECT a FROM t WHERE x > (SELECT SUM(y) + a FROM u WHERE k = a)",  # an outer column in the aggregate's expression
        "SELECT a FROM t WHERE EXISTS (SELECT 1 FROM u WHERE k = a AND y > (SELECT SUM(x) FROM t AS w WHERE w.a = t.x))",  # t is not its SELECT's own
    ]
    for sql in kept:
        assert derived_views(sql, name, CORRELATED) == (sql, {}), sql
    both = "SELECT a FROM t WHERE a IN (SELECT u.k FROM u, t AS w WHERE u.j = w.a) AND x > (SELECT SUM(y) FROM u WHERE k = a)"
    sql, views = derived_views(both, lambda alias: f"v__{alias}" if alias.startswith("in") else None, CORRELATED)
    assert list(views) == ["v__in1"] and "FROM u AS u WHERE u.k = t.a)" in sql  # a subquery not split keeps its correlation


def test_a_decorrelated_subquery_keeps_only_the_keys_its_query_looks_up():
    """TPC-H Q2's shape: the outer table's own filters restrict the split view's keys (``_looked_up``);
    a term that reads another table, or has a subquery, is not one of them."""
    from lakeivm.sql import derived_views

    schemas = {**CORRELATED, "w": {"b": "int", "z": "int"}}
    sql = ("SELECT t.a FROM t, w WHERE t.a = w.b AND t.x = 15 AND t.x + 1 > w.z AND w.z > 0 "
           "AND t.a IN (SELECT u.j FROM u) AND t.x > (SELECT MIN(u.y) FROM u WHERE u.k = t.a)")
    _, views = derived_views(sql, lambda alias: f"v__{alias}", schemas)
    assert views == {"v__sq1": "SELECT u.k AS k, MIN(u.y) AS value FROM u WHERE u.k IN (SELECT t.a FROM t WHERE t.x = 15) "
                               "AND u.k IN (SELECT u.j FROM u) GROUP BY u.k"}, views  # t.a IN (...): u.k IN (...) too
    _, views = derived_views("SELECT t.a FROM t WHERE t.x > (SELECT MIN(u.y) FROM u WHERE u.k = t.a)", lambda alias: f"v__{alias}", schemas)
    assert views == {"v__sq1": "SELECT u.k AS k, MIN(u.y) AS value FROM u GROUP BY u.k"}  # no filter of t: every key


def _split_rows(t: list[tuple], u: list[tuple], views: dict[str, str], sql: str) -> list[tuple]:
    """The rows of ``sql`` in DuckDB over the tables t(a, x) and u(k, j, y) and the split ``views``."""
    import duckdb

    con = duckdb.connect()
    con.execute("CREATE TABLE t (a INT, x INT)")
    con.execute("CREATE TABLE u (k INT, j INT, y INT)")
    con.executemany("INSERT INTO t VALUES (?, ?)", t) if t else None
    con.executemany("INSERT INTO u VALUES (?, ?, ?)", u) if u else None
    for name, body in views.items():
        con.execute(f"CREATE VIEW {name} AS {body}")
    return sorted(con.execute(sql).fetchall(), key=repr)


@settings(max_examples=40, deadline=None)
@given(t=st.lists(st.tuples(st.one_of(st.none(), st.integers(0, 3)), st.integers(-3, 3)), max_size=8),
       u=st.lists(st.tuples(st.one_of(st.none(), st.integers(0, 3)), st.integers(0, 2), st.one_of(st.none(), st.integers(-3, 3))),
                  max_size=10),
       aggregate=st.sampled_from(["SUM(y)", "MIN(y)", "MAX(y)", "AVG(y)", "2 * SUM(y) - 1", "MAX(y) - MIN(y)"]),
       comparison=st.sampled_from(["<", "=", ">=", "<>"]))
def test_decorrelated_subqueries_give_the_rows_of_their_sql(t, u, aggregate, comparison):
    """The split views and the query reading them (``derived_views``) against the SQL as written, in
    DuckDB, on random tables with NULL keys, values and empty groups."""
    from lakeivm.sql import derived_views

    sql = (f"SELECT a, x FROM t WHERE x {comparison} (SELECT {aggregate} FROM u WHERE k = a AND j > 0) AND x > -3 "
           "AND a IN (SELECT u.k FROM u, t AS w WHERE u.j = w.a) AND a IN (SELECT z.j FROM u AS z WHERE z.y > 0)")
    rewritten, views = derived_views(sql, lambda alias: f"v_{alias}", CORRELATED)
    assert set(views) == {"v_in1", "v_sq2"} and views["v_sq2"].count(" IN (SELECT ") == 2  # the keys t's own terms look up
    assert _split_rows(t, u, views, rewritten) == _split_rows(t, u, {}, sql)


def test_state_types_from_empty_relations_of_the_tables_types_equal_those_from_the_data(spark):
    """F-IVM's exact-sum types (``FivmMaintainer._exact_sums``) come from ``typed_empty_sql``: no table read."""
    from lakeivm.sql import typed_empty_sql

    schemas = {"r": {"a": "int", "x": "decimal(15,2)", "d": "decimal(15,2)", "n": "bigint"},
               "s": {"a": "int", "y": "double", "k": "string", "day": "date"}}
    q = parse_query("SELECT k, SUM(x * (1 - d)) AS v, AVG(x) AS m, SUM(n) AS t, SUM(y) AS w, COUNT(*) AS c, MAX(day) AS last "
                    "FROM r JOIN s ON r.a = s.a GROUP BY k", schemas)
    spark.sql("SELECT 1 AS a, CAST(2.50 AS DECIMAL(15,2)) AS x, CAST(0.05 AS DECIMAL(15,2)) AS d, CAST(3 AS BIGINT) AS n"
              ).createOrReplaceTempView("typed_r")
    spark.sql("SELECT 1 AS a, 1.5D AS y, 'k' AS k, DATE'2026-01-01' AS day").createOrReplaceTempView("typed_s")
    from_data = spark.sql(state_sql(q, {"r": "typed_r", "s": "typed_s"})).schema
    typed = spark.sql(typed_empty_sql(q, {alias: tuple(schemas[alias].items()) for alias in ("r", "s")}))
    assert typed.schema.simpleString() == from_data.simpleString() and typed.count() == 0


def test_a_having_compared_with_a_global_aggregate_splits_into_groups_and_the_aggregate():
    from lakeivm.sql import COMPARED, derived_views

    name = lambda alias: f"v__{alias}"  # noqa: E731
    sql, views = derived_views("SELECT t.a, SUM(t.x) AS s FROM t GROUP BY t.a HAVING SUM(t.x) > (SELECT 0.1 * SUM(u.y) FROM u) "
                               "ORDER BY s DESC", name)  # TPC-H Q11's shape: the compared aggregate is a result column
    assert sql == "SELECT v__groups.a AS a, v__groups.s AS s FROM v__groups CROSS JOIN v__sq1 WHERE v__groups.s > v__sq1.value ORDER BY s DESC"
    assert views == {"v__sq1": "SELECT 0.1 * SUM(u.y) AS value FROM u", "v__groups": "SELECT t.a, SUM(t.x) AS s FROM t GROUP BY t.a"}
    sql, views = derived_views("SELECT t.a, COUNT(*) AS n FROM t GROUP BY t.a HAVING (SELECT MAX(u.y) FROM u) <= MIN(t.x) AND COUNT(*) > 1", name)
    assert sql == f"SELECT v__groups.a AS a, v__groups.n AS n FROM v__groups CROSS JOIN v__sq1 WHERE v__sq1.value <= v__groups.{COMPARED}"
    assert views["v__groups"] == f"SELECT t.a, COUNT(*) AS n, MIN(t.x) AS {COMPARED} FROM t GROUP BY t.a HAVING COUNT(*) > 1"
    kept = [
        "SELECT t.a, SUM(t.x) AS s FROM t GROUP BY t.a HAVING SUM(t.x) > (SELECT SUM(y) FROM u)",  # `y` may be the outer query's
        "SELECT t.a, SUM(t.x) AS s FROM t GROUP BY t.a HAVING SUM(t.x) > (SELECT SUM(u.y) FROM u WHERE u.k = t.a)",  # correlated
        "SELECT t.a, SUM(t.x) FROM t GROUP BY t.a HAVING SUM(t.x) > (SELECT SUM(u.y) FROM u)",  # a result column without a name
        "SELECT t.a, SUM(t.x) AS s FROM t GROUP BY t.a HAVING SUM(t.x) > (SELECT COUNT(*) FROM u)",  # 0, not NULL, over no rows
        "SELECT t.a, SUM(t.x) AS s FROM t GROUP BY t.a HAVING SUM(t.x) > (SELECT 1 FROM u)",  # not one row
        "SELECT t.a, SUM(t.x) AS s FROM t GROUP BY t.a HAVING SUM(t.x) > 1 OR SUM(t.x) > (SELECT SUM(u.y) FROM u)",  # not an AND term
        "SELECT t.a, SUM(t.x) AS s FROM t GROUP BY t.a HAVING SUM(t.x) > (SELECT SUM(u.y) FROM u) ORDER BY MAX(t.x) LIMIT 2",  # top-k off the result
    ]
    for sql in kept:
        assert derived_views(sql, name) == (sql, {}), sql


@settings(max_examples=40, deadline=None)
@given(t=st.lists(st.tuples(st.one_of(st.none(), st.integers(0, 3)), st.one_of(st.none(), st.integers(-3, 3))), max_size=10),
       u=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2), st.one_of(st.none(), st.integers(-3, 3))), max_size=6),
       compared=st.sampled_from(["SUM(t.x)", "COUNT(*)", "MAX(t.x) - MIN(t.x)", "AVG(t.x)"]),
       aggregate=st.sampled_from(["SUM(u.y)", "0.5 * SUM(u.y)", "MAX(u.y) - 1", "MIN(u.y)"]),
       comparison=st.sampled_from(["<", "=", ">=", "<>"]))
def test_a_split_having_gives_the_rows_of_its_sql(t, u, compared, aggregate, comparison):
    """The groups view, the aggregate and the query reading them (``derived_views``) against the SQL as
    written, in DuckDB, on random tables with NULL keys and values and an empty subquery table."""
    from lakeivm.sql import derived_views

    sql = (f"SELECT t.a AS a, SUM(t.x) AS s, COUNT(*) AS n FROM t GROUP BY t.a "
           f"HAVING {compared} {comparison} (SELECT {aggregate} FROM u WHERE u.j > 0) AND COUNT(t.x) > 0")
    rewritten, views = derived_views(sql, lambda alias: f"v_{alias}")
    assert set(views) == {"v_groups", "v_sq1"}
    assert _split_rows(t, u, views, rewritten) == _split_rows(t, u, {}, sql)


Q5_SCHEMAS = {"customer": {"c_custkey": "int", "c_nationkey": "int"}, "orders": {"o_orderkey": "int", "o_custkey": "int", "o_orderdate": "date"},
              "lineitem": {"l_orderkey": "int", "l_suppkey": "int", "l_price": "double"}, "supplier": {"s_suppkey": "int", "s_nationkey": "int"}}
Q5 = ("SELECT s_nationkey, SUM(l_price) AS revenue FROM customer, orders, lineitem, supplier WHERE c_custkey = o_custkey "
      "AND l_orderkey = o_orderkey AND l_suppkey = s_suppkey AND c_nationkey = s_nationkey AND o_orderdate >= DATE '1994-01-01' "
      "GROUP BY s_nationkey")


def test_join_order_follows_the_fewest_rows_per_key():
    """From a supplier's change, its lineitems by their supplier key (600 rows per key at SF 1), not every
    customer of its nation (6000 per key); with no sizes, FROM order among the linked relations."""
    q = parse_query(Q5, Q5_SCHEMAS)
    sizes = {"customer": (150_000, {"c_custkey": 150_000, "c_nationkey": 25}), "orders": (1_500_000, {"o_orderkey": 1_500_000, "o_custkey": 150_000}),
             "lineitem": (6_000_000, {"l_orderkey": 6_000_000, "l_suppkey": 10_000}), "supplier": (10_000, {"s_suppkey": 10_000, "s_nationkey": 25})}
    assert join_order(q, "supplier", sizes) == ["supplier", "lineitem", "orders", "customer"]
    assert join_order(q, "supplier") == ["supplier", "customer", "orders", "lineitem"]
    assert join_order(q, "orders", {**sizes, "customer": (float("inf"), {})}) == ["orders", "customer", "lineitem", "supplier"]


def test_reduced_sql_semi_joins_each_linked_relation_before_it_and_keeps_its_filters():
    q = parse_query(Q5, Q5_SCHEMAS)
    assert reduced_sql(q, "orders", "orders_v3", {"supplier": "s_delta"}) is None  # no equality links them
    sql = reduced_sql(q, "orders", "orders_v3", {"customer": "c_reduced", "lineitem": "l_reduced"})
    assert sql == ("SELECT /*+ BROADCAST(_lakeivm_k0, _lakeivm_k1) */ `orders`.`o_orderdate`, `orders`.`o_custkey`, `orders`.`o_orderkey` "
                   "FROM orders_v3 AS `orders` LEFT SEMI JOIN (SELECT DISTINCT `c_custkey` FROM c_reduced) AS _lakeivm_k0 "
                   "ON `orders`.`o_custkey` = _lakeivm_k0.`c_custkey` LEFT SEMI JOIN (SELECT DISTINCT `l_orderkey` FROM l_reduced) AS _lakeivm_k1 "
                   "ON `orders`.`o_orderkey` = _lakeivm_k1.`l_orderkey` WHERE (orders.o_orderdate >= CAST('1994-01-01' AS DATE))"), sql


def test_join_links_never_reduce_a_kept_row_by_its_outer_semi_or_anti_side():
    """A NOT EXISTS keeps exactly r's rows without a match in s: s's rows that matter are those of r's
    keys, but r's are not those of s's; the same for a LEFT JOIN's preserved side, and a FULL JOIN
    pads both."""
    schemas = {"r": {"a": "int", "x": "int"}, "s": {"a": "int", "g": "int"}, "u": {"x": "int", "c": "int"}}
    anti = parse_query("SELECT u.c, COUNT(*) AS n FROM r JOIN u ON r.x = u.x "
                       "WHERE NOT EXISTS (SELECT 1 FROM s WHERE s.a = r.a) GROUP BY u.c", schemas)
    assert join_links(anti, "s", {"r"}) == {"r": [("a", "a")]}
    assert join_links(anti, "r", {"s", "u"}) == {"u": [("x", "x")]}
    full = parse_query("SELECT r.a, COUNT(*) AS n FROM r FULL JOIN s ON r.a = s.a GROUP BY r.a", schemas)
    assert join_links(full, "r", {"s"}) == {} and join_links(full, "s", {"r"}) == {}
