"""Variables, derived and explicit variable orders, cyclicity and product rejection."""
from __future__ import annotations

import pytest

from lakeivm.errors import UnsupportedQuery
from lakeivm.sql import parse_query
from lakeivm.views.fivm.vorder import aggregate_variables, check_acyclic, derive_order, parse_order, variables_of

RST = {"r": {"a": "int", "b": "int"}, "s": {"a": "int", "c": "int", "e": "int"}, "t": {"c": "int", "d": "int"}}
EX11 = "SELECT s.a, s.c, SUM(r.b * t.d * s.e) FROM r JOIN s ON r.a = s.a JOIN t ON s.c = t.c GROUP BY s.a, s.c"


def _shape(node) -> tuple:
    return (node.variable, tuple(sorted(node.relations)), tuple(_shape(c) for c in node.children))


def test_variables_are_join_classes() -> None:
    variables, columns = variables_of(parse_query(EX11, RST))
    assert {v.name: set(v.members) for v in variables.values() if len(v.members) > 1} == {
        "a": {("r", "a"), ("s", "a")},
        "c": {("s", "c"), ("t", "c")},
    }
    assert dict(columns["s"]) == {"a": "a", "c": "c", "e": "e"}


def test_clashing_column_names_get_alias_prefix() -> None:
    schemas = {"x": {"id": "int"}, "y": {"id": "int", "xid": "int"}}
    q = parse_query("SELECT SUM(y.id) FROM x JOIN y ON x.id = y.xid", schemas)
    assert sorted(v.name for v in variables_of(q)[0].values()) == ["x_id", "y_id"]


def test_derived_order_of_fig2_and_ex11() -> None:
    count = parse_query("SELECT COUNT(*) FROM r JOIN s ON r.a = s.a JOIN t ON s.c = t.c", RST)
    assert _shape(derive_order(count).root) == ("a", ("r",), (("c", ("s", "t"), ()),))
    order = derive_order(parse_query(EX11, RST))
    assert order.free == ("a", "c")
    assert _shape(order.root) == ("a", ("r",), (("c", ("s", "t"), ()),))


def test_free_variables_go_on_top() -> None:
    chain = {"r": {"a": "int", "b": "int"}, "s": {"b": "int", "c": "int"}, "t": {"c": "int", "d": "int"}}
    q = parse_query("SELECT r.a, t.d, COUNT(*) FROM r JOIN s ON r.b = s.b JOIN t ON s.c = t.c GROUP BY r.a, t.d", chain)
    order = derive_order(q)
    top = order.root
    assert {top.variable, top.children[0].variable} == {"a", "d"}
    order.check_invariants()


def test_explicit_order_with_private_variables_compressed() -> None:
    q = parse_query(EX11, RST)
    order = parse_order(q, {"s.a": ["b", {"c": ["d", "e"]}]})
    assert _shape(order.root) == _shape(derive_order(q).root)
    with pytest.raises(UnsupportedQuery, match="misses"):
        parse_order(q, {"a": ["b"]})
    with pytest.raises(UnsupportedQuery, match="unknown variable"):
        parse_order(q, {"a": ["zz"]})
    with pytest.raises(UnsupportedQuery, match="one root-to-leaf path"):
        parse_order(q, {"b": ["a", "c"]})


def test_cyclic_joins_rejected_and_triangles_pointed_to_triangle_kind() -> None:
    tri = {"r": {"a": "int", "b": "int"}, "s": {"b": "int", "c": "int"}, "t": {"c": "int", "a": "int", "x": "int"}}
    q = parse_query("SELECT SUM(t.x) FROM r JOIN s ON r.b = s.b JOIN t ON s.c = t.c AND t.a = r.a", tri)
    with pytest.raises(UnsupportedQuery, match="kind: triangle"):
        derive_order(q)
    four = {n: {"x": "int", "y": "int"} for n in "pqrs"}
    cycle = "SELECT COUNT(*) FROM p JOIN q ON p.y = q.x JOIN r ON q.y = r.x JOIN s ON r.y = s.x AND s.y = p.x"
    with pytest.raises(UnsupportedQuery, match="cyclic") as err:
        check_acyclic(parse_query(cycle, four))
    assert "triangle" not in str(err.value)


def test_cartesian_product_and_expression_group_key_rejected() -> None:
    q = parse_query("SELECT COUNT(*) FROM r, t", RST)
    with pytest.raises(UnsupportedQuery, match="Cartesian"):
        derive_order(q)
    q = parse_query("SELECT r.a + 1, COUNT(*) FROM r GROUP BY r.a + 1", RST)
    with pytest.raises(UnsupportedQuery, match="plain column"):
        derive_order(q)


def test_single_relation_has_empty_order() -> None:
    order = derive_order(parse_query("SELECT SUM(r.b) FROM r", RST))
    assert order.root is None and order.relations == ("r",)


def test_aggregate_variables_for_sum_vector_ring() -> None:
    sql = "SELECT s.a, COUNT(*), SUM(r.b * t.d * s.e), AVG(t.d) FROM r JOIN s ON r.a = s.a JOIN t ON s.c = t.c GROUP BY s.a"
    q = parse_query(sql, RST)
    assert aggregate_variables(q, derive_order(q)) == (frozenset(), frozenset(), frozenset("bde"), frozenset("d"))
    for bad in ["SUM(r.b + t.d)", "SUM(s.a * r.b)", "SUM(r.b * r.b)", "MAX(r.b)"]:
        q = parse_query(f"SELECT s.a, {bad} FROM r JOIN s ON r.a = s.a JOIN t ON s.c = t.c GROUP BY s.a", RST)
        with pytest.raises(UnsupportedQuery):
            aggregate_variables(q, derive_order(q))
