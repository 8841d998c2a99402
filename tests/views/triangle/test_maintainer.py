"""The IVM^ε Spark maintainer against the view's SQL after random edge streams, for several ε.

After every run: the count equals the SQL on the snapshots at the run's watermarks, and the stored
state satisfies IVM^ε's invariants (each value in one part, the slack-½ band, ⌊N/4⌋ ≤ |D| < N,
every auxiliary view equal to its definition over the stored parts).
"""
from __future__ import annotations

import random
from collections import Counter, defaultdict

import pytest

from lakeivm.run.audit import audit
from lakeivm.run.engine import InjectedFailure, run_view
from lakeivm.limits import Limits
from lakeivm.catalog.registry import classify, spec_from_dict
from lakeivm.sql import parse_query
from lakeivm.views.triangle.shape import NEXT, ROLES, triangle_shape
from tests.helpers import sql

EDGES = {"edges": {"src": "bigint", "dst": "bigint"}}
GRAPH_SQL = ("SELECT COUNT(*) AS triangles FROM edges e1 JOIN edges e2 ON e1.dst = e2.src "
             "JOIN edges e3 ON e2.dst = e3.src AND e3.dst = e1.src")
THREE_SQL = "SELECT COUNT(*) AS n FROM r JOIN s ON r.b = s.b JOIN t ON s.c = t.c AND t.a = r.a"


def test_shape_orients_the_cycle():
    shape = triangle_shape(parse_query(GRAPH_SQL, EDGES))
    assert [(s.alias, s.x, s.y) for s in shape.sides] == [("e1", "src", "dst"), ("e2", "src", "dst"), ("e3", "src", "dst")]
    schemas = {t: {c: "int" for c in cols} for t, cols in {"r": "ab", "s": "bc", "t": "ca"}.items()}
    shape = triangle_shape(parse_query(THREE_SQL, schemas))
    assert [(s.table, s.x, s.y) for s in shape.sides] == [("r", "a", "b"), ("s", "b", "c"), ("t", "c", "a")]
    assert shape.output == "n"


@pytest.mark.parametrize("sql_text", [
    "SELECT COUNT(*) FROM edges e1 JOIN edges e2 ON e1.dst = e2.src JOIN edges e3 ON e2.dst = e3.src",  # a path
    "SELECT COUNT(*) FROM edges e1 JOIN edges e2 ON e1.src = e2.src JOIN edges e3 ON e1.src = e3.src",  # a star
    GRAPH_SQL.replace("COUNT(*) AS triangles", "SUM(e1.src) AS s"),
    GRAPH_SQL + " WHERE e1.src < e1.dst",
])
def test_other_shapes_are_not_triangles(sql_text):
    query = parse_query(sql_text, EDGES)
    assert triangle_shape(query) is None
    assert classify(spec_from_dict({"name": "v", "sql": sql_text, "deadline": 60}), EDGES)[0] in ("first_order", "fivm")
    with pytest.raises(Exception, match="kind triangle needs a triangle count"):
        classify(spec_from_dict({"name": "v", "sql": sql_text, "deadline": 60, "kind": "triangle"}), EDGES)


def random_edges(rng: random.Random, n: int, nodes: int = 10) -> list[tuple[int, int]]:
    """Edges with a hub (node 0) so some values are heavy at small N."""
    return [(0 if rng.random() < 0.3 else rng.randrange(nodes), rng.randrange(nodes)) for _ in range(n)]


def change_edges(lake, rng: random.Random, table: str, columns: tuple[str, str]) -> None:
    """One batch of commits: inserts (hub-biased) and deletes of existing edges."""
    a, b = columns
    for _ in range(rng.randint(1, 3)):
        if rng.random() < 0.6:
            rows = ", ".join(f"({x}, {y})" for x, y in random_edges(rng, rng.randint(1, 12)))
            sql(lake, f"INSERT INTO {{t}} ({a}, {b}) VALUES {rows}", table)
        else:
            existing = [tuple(r) for r in lake.read(lake.table_path(table)).select(a, b).collect()]
            for x, y in rng.sample(existing, min(len(existing), rng.randint(1, 8))):
                sql(lake, f"DELETE FROM {{t}} WHERE {a} = {x} AND {b} = {y}", table)


def check_invariants(lake, view: str) -> None:
    """IVM^ε's state invariants (Def. 9), recomputed in Python from the stored Delta tables."""
    stored = lake.read(lake.view_path(view)).first()
    base, size, epsilon = stored["_lakeivm_base"], stored["_lakeivm_size"], stored["_lakeivm_epsilon"]
    theta = base ** epsilon
    stored_rel = summed(lake, view, "rel", ("role", "x", "y", "part"), "_lakeivm_m")  # a large state is a bag of changes
    stored_w = summed(lake, view, "w", ("role", "x", "z"), "cnt")
    rel = {r: [(x["x"], x["y"], x["part"], x["_lakeivm_m"]) for x in stored_rel if x["role"] == r] for r in ROLES}
    assert size == sum(len(rows) for rows in rel.values())
    assert base // 4 <= size < base, (base, size)
    for role, rows in rel.items():
        assert len({(x, y) for x, y, _, _ in rows}) == len(rows), "a key stored twice"
        assert all(m > 0 for *_, m in rows), "a non-positive multiplicity"
        parts, degree = defaultdict(set), Counter()
        for x, _, part, _ in rows:
            parts[x].add(part)
            degree[x, part] += 1
        assert all(len(p) == 1 for p in parts.values()), "a value split across parts"
        for (x, part), d in degree.items():
            assert d >= 0.5 * theta if part == "h" else d < 1.5 * theta, (role, x, part, d, theta)
    for role in ROLES:
        expected = Counter()
        for x, y, part, m in rel[role]:
            for y2, z, part2, m2 in rel[NEXT[role]]:
                if part == "h" and part2 == "l" and y == y2 and y is not None:  # a NULL vertex joins nothing, as in SQL
                    expected[x, z] += m * m2
        stored_view = {(w["x"], w["z"]): w["cnt"] for w in stored_w if w["role"] == role}
        assert stored_view == {k: c for k, c in expected.items() if c}, f"view w_{role} differs from its definition"


def summed(lake, view: str, name: str, keys: tuple[str, ...], payload: str) -> list:
    """A stored state table's rows summed per key, zero sums dropped."""
    from pyspark.sql import functions as F

    rows = lake.read(lake.view_path(view, f"aux/{name}")).groupBy(*keys).agg(F.sum(payload).alias(payload))
    return rows.where(F.col(payload) != 0).collect()


def assert_exact(lake, spec) -> None:
    report = audit(lake, spec)
    assert report.ok, str(report)
    check_invariants(lake, spec.name)


@pytest.mark.parametrize("epsilon, state", [pytest.param(0.0, "local", marks=pytest.mark.slow), (0.5, "local"), (0.5, "scan"),
                                            (0.5, "merge"), pytest.param(0.5, "spark", marks=pytest.mark.slow),
                                            pytest.param(1.0, "local", marks=pytest.mark.slow)])
def test_graph_triangles_match_sql_after_random_streams(lake, spark, monkeypatch, epsilon, state):
    """The state's four ways: ``local``, read and rewritten whole by delta-rs; ``scan`` (larger than
    ``limits.local_state_rows``), a bag of appended changes scanned by delta-rs; ``merge``, a lake
    whose large state has deletion vectors, fetched by Spark and MERGEd; ``spark``, a bag too large
    for delta-rs to scan (``limits.scan_rows``), fetched by Spark."""
    from lakeivm.views.triangle import maintainer

    if state != "local":
        monkeypatch.setattr(lake, "limits", Limits(local_state_rows=0, scan_rows=0 if state == "spark" else Limits.scan_rows))
    if state == "merge":
        monkeypatch.setattr(maintainer, "_appends", lambda table: False)
    if state == "scan":
        monkeypatch.setattr("lakeivm.views.state.COMPACT_COMMITS", 2)  # compacted (in this process) every second run
    rng = random.Random(int(epsilon * 4) + 7)
    lake.create_table("edges", spark.createDataFrame(random_edges(rng, 40), "src bigint, dst bigint"))
    spec = spec_from_dict({"name": "tri", "sql": GRAPH_SQL, "deadline": 60, "epsilon": epsilon})
    run_view(lake, spec)
    assert_exact(lake, spec)
    for _ in range(1 if state in ("merge", "spark") else 3):  # CI budget: one batch (then the deletion below) on Spark
        change_edges(lake, rng, "edges", ("src", "dst"))
        row = run_view(lake, spec)
        assert row.kind == "triangle"
        assert_exact(lake, spec)
    if state in ("scan", "spark"):  # a bag: changes appended, then rewritten summed
        from deltalake import DeltaTable

        modes = [c.get("operationParameters", {}).get("mode") for c in DeltaTable(lake.view_path("tri", "aux/rel")).history()]
        assert "Append" in modes and (state == "spark" or modes.count("Overwrite") >= 2), modes
    sql(lake, "DELETE FROM {t}", "edges")  # shrink to nothing: major rebalancing down to N = 1
    run_view(lake, spec)
    assert_exact(lake, spec)
    assert lake.read(lake.view_path("tri")).first()["triangles"] == 0


@pytest.mark.parametrize("state", ["local", "scan"])
def test_null_vertices_join_nothing_as_in_sql(lake, spark, monkeypatch, state):
    """Edges with a NULL end are stored (they count in |D| and degrees) but close no triangle,
    as the view's SQL has it: a NULL cycle (NULL, NULL) is no loop."""
    if state == "scan":
        monkeypatch.setattr(lake, "limits", Limits(local_state_rows=0))
    rng = random.Random(11)
    edges = random_edges(rng, 40) + [(None, 0), (0, None), (None, None), (None, 3), (3, None)]
    lake.create_table("edges", spark.createDataFrame(edges, "src bigint, dst bigint"))
    spec = spec_from_dict({"name": "tri", "sql": GRAPH_SQL, "deadline": 60, "epsilon": 0.5})
    run_view(lake, spec)
    assert_exact(lake, spec)
    for batch in (["(NULL, 1)", "(1, NULL)", "(NULL, NULL)", "(0, 1)", "(1, 0)"], ["(NULL, 0)", "(0, 0)", "(2, NULL)"]):
        sql(lake, f"INSERT INTO {{t}} VALUES {', '.join(batch)}", "edges")
        sql(lake, "DELETE FROM {t} WHERE src IS NULL AND dst = 3", "edges")
        assert run_view(lake, spec).kind == "triangle"
        assert_exact(lake, spec)


@pytest.mark.heavy(86)
def test_three_relations_with_asymmetric_plans_and_a_quarter_epsilon(lake, spark):
    rng = random.Random(3)
    for table, cols in {"r": ("a", "b"), "s": ("b", "c"), "t": ("c", "a")}.items():
        lake.create_table(table, spark.createDataFrame(random_edges(rng, 30, nodes=6), f"{cols[0]} bigint, {cols[1]} bigint"))
    spec = spec_from_dict({"name": "tri3", "sql": THREE_SQL, "deadline": 60, "epsilon": 0.25})
    run_view(lake, spec)
    for tables in (("r",), ("s", "t"), ("t",), None):  # the last catches up every table after the asymmetric runs
        for table, cols in {"r": ("a", "b"), "s": ("b", "c"), "t": ("c", "a")}.items():
            change_edges(lake, rng, table, cols)
        run_view(lake, spec, tables=tables)
        assert_exact(lake, spec)


def test_every_epsilon_and_every_split_of_a_stream_give_the_same_result(lake, spark):
    """One stream of three batches, applied batch by batch (ε = ½) or in one run (ε = 0, 1): the
    same count and the same stored relations (the parts may differ: they depend on the history)."""
    rng = random.Random(11)
    lake.create_table("edges", spark.createDataFrame(random_edges(rng, 40), "src bigint, dst bigint"))
    specs = {name: spec_from_dict({"name": name, "sql": GRAPH_SQL, "deadline": 60, "epsilon": epsilon})
             for name, epsilon in (("each_half", 0.5), ("once_zero", 0.0), ("once_one", 1.0))}
    for spec in specs.values():
        run_view(lake, spec)
    for _ in range(3):
        change_edges(lake, rng, "edges", ("src", "dst"))
        run_view(lake, specs["each_half"])
    for name in ("once_zero", "once_one"):
        run_view(lake, specs[name])

    def relations(view: str) -> set:
        return {(r["role"], r["x"], r["y"], r["_lakeivm_m"]) for r in lake.read(lake.view_path(view, "aux/rel")).collect()}

    counts = {name: lake.read(lake.view_path(name)).first()["triangles"] for name in specs}
    assert len(set(counts.values())) == 1, counts
    assert len({frozenset(relations(name)) for name in specs}) == 1
    for spec in specs.values():
        assert_exact(lake, spec)


def test_large_batches_epsilon_changes_and_crashes_stay_exact(lake, spark, monkeypatch):
    """The paths besides the driver-side batch: a batch over ``limits.driver_rows`` keys (rebuilt on Spark), a
    changed ε (parts and views rebuilt for it), and crashes at every write point, each followed by
    a rerun that first restores the state the last commit names."""
    rng = random.Random(19)
    lake.create_table("edges", spark.createDataFrame(random_edges(rng, 40), "src bigint, dst bigint"))
    spec = spec_from_dict({"name": "tri", "sql": GRAPH_SQL, "deadline": 60, "epsilon": 0.5})
    run_view(lake, spec)
    monkeypatch.setattr(lake, "limits", Limits(driver_rows=0))  # every batch is "too large"
    change_edges(lake, rng, "edges", ("src", "dst"))
    run_view(lake, spec)
    assert_exact(lake, spec)
    monkeypatch.undo()
    quarter = spec_from_dict({"name": "tri", "sql": GRAPH_SQL, "deadline": 60, "epsilon": 0.25})
    change_edges(lake, rng, "edges", ("src", "dst"))
    run_view(lake, quarter)
    assert_exact(lake, quarter)
    assert lake.read(lake.view_path("tri")).first()["_lakeivm_epsilon"] == 0.25
    change_edges(lake, rng, "edges", ("src", "dst"))
    for point in ("apply:edges", "flush:rel", "flush:w"):
        with pytest.raises(InjectedFailure):
            run_view(lake, quarter, fail_at=point)
    run_view(lake, quarter)
    assert_exact(lake, quarter)
