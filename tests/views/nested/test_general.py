"""The general nested evaluator (RPAI §4.2) against SQLite running the same SQL, after every change.

Random multisets over ``t(g, p, v, w)`` and ``u`` alike (small domains so ties, equal thresholds and
empty ranges occur; NULLs included) change by inserts and deletes; after each change the evaluator,
fed only each row's keys and term values, equals SQLite's answer to the view's SQL. Queries cover
what the shipped shapes do not: a negative constant, both sides correlated (SQ1), a correlation
between different columns (SQ2), equality plus inequality, OR/NOT, filtered subqueries, GROUP BY,
and cross products of independently filtered relations like PSP and MST (§4.3) summing other
expressions.
"""
from __future__ import annotations

import random
import sqlite3
from collections import Counter

import pytest
import sqlglot

from lakeivm.sql import DIALECT, parse_query
from lakeivm.views.nested.general import General, NotInClass, RowEvent, general_plan

SCHEMA = {"t": {"g": "int", "p": "int", "v": "int", "w": "int"}, "u": {"g": "int", "p": "int", "v": "int", "w": "int"}}
QUERIES = {
    "vwap_of_v": "SELECT SUM(t.p * t.v) AS r FROM t WHERE 0.5 * (SELECT SUM(t1.v) FROM t t1) "
                 "< (SELECT SUM(t2.v) FROM t t2 WHERE t2.p <= t.p)",
    "negative_constant": "SELECT COUNT(*) AS n FROM t WHERE -0.5 * (SELECT SUM(t1.v) FROM t t1) "
                         "< (SELECT SUM(t2.v) FROM t t2 WHERE t2.p > t.p)",
    "both_correlated": "SELECT t.g, COUNT(*) AS n, SUM(t.w) AS s FROM t WHERE (SELECT SUM(t3.v) FROM t t3 "
                       "WHERE t3.g = t.g) < 2 * (SELECT COUNT(*) FROM t t2 WHERE t2.p < t.p) GROUP BY t.g",
    "other_column_or": "SELECT SUM(t.v) AS s, AVG(t.w) AS a FROM t WHERE (SELECT COUNT(t2.w) FROM t t2 "
                       "WHERE t2.w >= t.p AND t2.v > 1) > 2 OR t.v IS NULL",
    "equality_and_range": "SELECT SUM(t.v) / 3.0 AS r FROM t WHERE t.w > (SELECT SUM(t2.v) - COUNT(*) FROM t t2 "
                          "WHERE t2.g = t.g AND t.p > t2.p)",
    "linear_combination": "SELECT COUNT(t.w) AS n FROM t WHERE 3 * (SELECT SUM(t2.v) FROM t t2 WHERE t2.p >= t.p) "
                          "+ (SELECT SUM(t1.w) FROM t t1) >= 2 * (SELECT SUM(t3.w) FROM t t3 WHERE t3.p = t.p) + 5 "
                          "AND NOT (t.v > 3)",
    # several relations (paper §4.3): a cross product, each relation filtered on its own
    "psp_like": "SELECT SUM(u.p - t.p) AS s, COUNT(*) AS n FROM t, u WHERE t.v > 0.2 * (SELECT SUM(t1.v) FROM t t1) "
                "AND u.w >= (SELECT COUNT(*) FROM u u1 WHERE u1.p <= u.p)",
    "mst_like": "SELECT t.g, SUM(u.p * u.v - t.p) AS s, AVG(t.w + u.w) AS a FROM t, u WHERE (SELECT SUM(u2.v) FROM u u2 "
                "WHERE u2.p > u.p) < 0.8 * (SELECT SUM(u1.v) FROM u u1) AND (SELECT SUM(t2.v) FROM t t2 WHERE t2.p > t.p) "
                "< 0.8 * (SELECT SUM(t1.v) FROM t t1) GROUP BY t.g",
    "other_tables_subquery": "SELECT COUNT(t.w) AS n, SUM(t.v + u.v + 1) AS s FROM t CROSS JOIN u "
                             "WHERE t.p * 10 >= (SELECT COUNT(*) FROM u u1) AND u.v IS NOT NULL",
    "one_relation_unfiltered": "SELECT SUM(t.v) AS s FROM t, u WHERE t.v > (SELECT SUM(t2.v) FROM t t2 WHERE t2.g = t.g) * 0.3",
}


def row(rng: random.Random) -> tuple:
    maybe = lambda n: None if rng.random() < 0.1 else rng.randrange(n)  # noqa: E731
    return (rng.randrange(3), rng.randrange(5), maybe(5), maybe(6))


def sqlite_rows(con: sqlite3.Connection, sql: str, params: tuple = ()) -> list[tuple]:
    return con.execute(sqlglot.transpile(sql, read=DIALECT, write="sqlite")[0], params).fetchall()


def close(a, b) -> bool:
    if a is None or b is None:
        return a is b
    return abs(float(a) - float(b)) <= 1e-9 * max(1.0, abs(float(b)))


def same(actual: list[tuple], expected: list[tuple]) -> bool:
    key = lambda r: tuple((x is None, float(x) if x is not None else 0) for x in r)  # noqa: E731
    return len(actual) == len(expected) and all(
        all(close(a, b) for a, b in zip(x, y)) for x, y in zip(sorted(actual, key=key), sorted(expected, key=key)))


@pytest.mark.parametrize("name", sorted(QUERIES))
@pytest.mark.parametrize("seed", range(4))
def test_general_evaluator_equals_sqlite_after_every_change(name, seed):
    plan = general_plan(parse_query(QUERIES[name], SCHEMA))
    evaluator = General(plan)
    tables = [r.table for r in plan.relations]
    con = sqlite3.connect(":memory:")
    for table in SCHEMA:
        con.execute(f"CREATE TABLE {table} (g, p, v, w)")
    rng, live = random.Random(seed), {table: Counter() for table in SCHEMA}
    nonempty = 0
    for _ in range(40):
        changes = []
        for _ in range(rng.randint(1, 3)):
            table = rng.choice(tables)
            if live[table] and rng.random() < 0.35:
                old = rng.choice(sorted(live[table], key=repr))
                live[table][old] -= 1
                live[table] += Counter()
                changes.append((table, old, -1))
            else:
                new = row(rng)
                live[table][new] += 1
                changes.append((table, new, 1))
        for table, values, sign in changes:
            i = tables.index(table)
            relation = plan.relations[i]
            computed_sql = ", ".join([*(f"`{k}`" for k in relation.keys), *(sql for _, sql in relation.terms)]) or "NULL"
            (computed,) = sqlite_rows(con, f"WITH {table}(g, p, v, w) AS (VALUES (?, ?, ?, ?)) SELECT {computed_sql} FROM {table}",
                                      values)
            computed = computed if relation.keys or relation.terms else ()
            evaluator.apply(RowEvent(computed[:len(relation.keys)], computed[len(relation.keys):], sign, i))
        for table, rows in live.items():
            con.execute(f"DELETE FROM {table}")
            con.executemany(f"INSERT INTO {table} VALUES (?, ?, ?, ?)", list(rows.elements()))
        expected = sqlite_rows(con, QUERIES[name])
        actual = evaluator.result()
        assert same(actual, expected), (name, {t: sorted(r.elements(), key=repr) for t, r in live.items()}, actual, expected)
        nonempty += any(v not in (None, 0) for r in expected for v in r)
    assert nonempty >= 10, "the stream should reach non-trivial results"


def test_loading_stored_sums_equals_replaying_rows():
    plan = general_plan(parse_query(QUERIES["both_correlated"], SCHEMA))
    (relation,) = plan.relations
    rng = random.Random(3)
    replayed, loaded = General(plan), General(plan)
    stored: dict[tuple, list] = {}
    for _ in range(60):
        keys = tuple(rng.randrange(4) for _ in relation.keys)
        terms = tuple(rng.randrange(4) for _ in relation.terms)
        replayed.apply(RowEvent(keys, terms))
        cell = stored.setdefault(keys, [0] * len(relation.sums))
        for i, value in enumerate((1, *terms)):
            cell[i] += value
    loaded.load(0, stored.items())
    assert replayed.result() == loaded.result()


@pytest.mark.parametrize("sql_text, construct", [
    ("SELECT SUM(t.v) AS s FROM t WHERE (SELECT MAX(t2.v) FROM t t2 WHERE t2.p <= t.p) > 1", "not streamable"),
    ("SELECT SUM(t.v) AS s FROM t WHERE (SELECT SUM(t2.v) FROM t t2 WHERE t2.p <= t.p AND t2.w < t.w) > 1", "2 inequalities"),
    ("SELECT SUM(t.v) AS s FROM t WHERE (SELECT SUM(t2.v) FROM t t2 WHERE t2.p + 1 <= t.p) > 1", "compares expressions"),
    ("SELECT SUM(t.v) AS s FROM t WHERE (SELECT AVG(t2.v) FROM t t2 WHERE t2.p <= t.p) > 1", "AVG"),
    ("SELECT SUM(t.v) AS s FROM t WHERE (SELECT SUM(t2.v) FROM t t2 WHERE t2.p <= t.p) / 2 > 1", "division"),
    ("SELECT SUM(t.v) AS s FROM t WHERE (SELECT SUM(t2.v) FROM t t2 WHERE t2.p <= t.p "
     "AND t2.v > (SELECT SUM(t3.v) FROM t t3)) > 1", "inside a nested aggregate"),
    ("SELECT SUM(t.v) AS s FROM t WHERE (SELECT SUM(t2.v) FROM t t2 WHERE t2.p <= t.p) > 1e2", "DOUBLE"),
])
def test_outside_the_class_names_the_construct(sql_text, construct):
    with pytest.raises(NotInClass, match=construct):
        general_plan(parse_query(sql_text, SCHEMA))


def test_double_columns_are_refused_as_inexact():
    plan = general_plan(parse_query(QUERIES["vwap_of_v"], SCHEMA))
    assert plan.inexact(SCHEMA) is None
    assert "t.v is DOUBLE" in plan.inexact({"t": {**SCHEMA["t"], "v": "double"}})


def _monotone_queries(rng: random.Random, n: int) -> list[str]:
    out = []
    for _ in range(n):
        agg = rng.choice(["SUM(t2.v)", "COUNT(*)", "COUNT(t2.w)", "SUM(t2.w)"])
        inner = rng.choice(["<", "<=", ">", ">="])
        cmp = rng.choice(["<", "<=", ">", ">="])
        c = rng.choice(["", "2 * ", "-1 * ", "0.5 * "])
        q = f"{c}(SELECT {agg} FROM t t2 WHERE t2.p {inner} t.p){rng.choice(['', ' + 1', ' - (SELECT COUNT(*) FROM t t3)'])}"
        other = rng.choice(["(SELECT SUM(t1.v) FROM t t1) * 0.5", "3", "(SELECT COUNT(*) FROM t t1) - 2"])
        where = f"{q} {cmp} {other}" if rng.random() < 0.5 else f"{other} {cmp} {q}"
        out.append(f"SELECT SUM(t.w) AS s, COUNT(*) AS n, AVG(t.v) AS a FROM t WHERE {where}")
    return out


@pytest.mark.parametrize("seed", range(6))
def test_the_monotone_range_equals_the_sweep(seed):
    """Paper §4.3's case (one comparison with a SUM/COUNT correlated by one inequality on the only key
    column): the range found in the ordered index equals the general sweep after every change, with
    NULL keys, NULL values and -- where the range does not apply -- negative weights (then it sweeps)."""
    rng = random.Random(seed)
    for sql_text in _monotone_queries(rng, 10):
        plan = general_plan(parse_query(sql_text, SCHEMA))
        (relation,) = plan.relations
        fast, sweep = General(plan), General(plan)
        assert fast._monotone[0] is not None, sql_text
        sweep._monotone = [None]
        con = sqlite3.connect(":memory:")
        computed_sql = ", ".join([*(f"`{k}`" for k in relation.keys), *(sql for _, sql in relation.terms)])
        live: Counter = Counter()
        for step in range(30):
            if live and rng.random() < 0.35:
                values, sign = rng.choice(sorted(live, key=repr)), -1
            else:
                values, sign = (rng.randrange(3), None if rng.random() < 0.1 else rng.randrange(6),
                                rng.randrange(-2 if seed % 2 else 0, 5), None if rng.random() < 0.1 else rng.randrange(4)), 1
            live[values] += sign
            live += Counter()
            (computed,) = sqlite_rows(con, f"WITH t(g, p, v, w) AS (VALUES (?, ?, ?, ?)) SELECT {computed_sql} FROM t", values)
            event = RowEvent(computed[:len(relation.keys)], computed[len(relation.keys):], sign)
            fast.apply(event)
            sweep.apply(event)
            assert fast.result() == sweep.result(), (sql_text, step, sorted(live.elements(), key=repr))
