"""View trees of the paper's worked examples (Fig. 2, Ex. 1.1, 4.2, 7.1) as golden tests.

Expected keys and stored sets are transcribed from the paper's text: Fig. 2b / Ex. 3.2 (views and
keys), Ex. 4.2 (μ for U = {T}, U ⊇ {R, S}, U = ∅), Ex. 1.1 with A, C free (Fig. 5's μ for each
relation updatable alone) and Ex. 7.1 (matrix chain, identical views at X5 and X1 dropped).
"""
from __future__ import annotations

import pytest

from lakeivm.errors import InvalidInput
from lakeivm.sql import parse_query
from lakeivm.views.fivm.tree import build_view_tree
from lakeivm.views.fivm.vorder import derive_order, parse_order

RST = {"r": {"a": "int", "b": "int"}, "s": {"a": "int", "c": "int", "e": "int"}, "t": {"c": "int", "d": "int"}}
FIG2 = "SELECT SUM(r.b * s.e * t.d) FROM r JOIN s ON r.a = s.a JOIN t ON s.c = t.c"
EX11 = "SELECT s.a, s.c, SUM(r.b * t.d * s.e) FROM r JOIN s ON r.a = s.a JOIN t ON s.c = t.c GROUP BY s.a, s.c"
# Paper view name -> our view id, for the Fig. 2 order A - {B - R, C - {D - T, E - S}}.
PAPER = {"V_RST@A": "at_a", "V_ST@C": "at_c", "V_R@B": "leaf_r", "V_S@E": "leaf_s", "V_T@D": "leaf_t"}


def _fig2_tree(sql: str, updatable: set[str]):
    order = parse_order(parse_query(sql, RST), {"a": ["b", {"c": ["d", "e"]}]})
    return build_view_tree(order, updatable)


def test_fig2_views_and_keys() -> None:
    tree = _fig2_tree(FIG2, set())
    keys = {paper: set(tree.views[ours].keys) for paper, ours in PAPER.items()}
    assert keys == {"V_RST@A": set(), "V_ST@C": {"a"}, "V_R@B": {"a"}, "V_S@E": {"a", "c"}, "V_T@D": {"c"}}
    summed = {paper: tree.views[ours].marginalized for paper, ours in PAPER.items()}
    assert summed == {"V_RST@A": ("a",), "V_ST@C": ("c",), "V_R@B": ("b",), "V_S@E": ("e",), "V_T@D": ("d",)}
    assert tree.root.id == "at_a" and set(tree.root.lifted) == {"a", "b", "c", "d", "e"}
    assert [c.id for c in tree.views["at_c"].children] == ["leaf_s", "leaf_t"]


@pytest.mark.parametrize(
    ("updatable", "stored"),
    [
        ({"t"}, {"V_RST@A", "V_S@E", "V_R@B"}),
        ({"r", "s", "t"}, set(PAPER)),
        ({"r", "s"}, {"V_RST@A", "V_R@B", "V_ST@C", "V_T@D"}),
        (set(), {"V_RST@A"}),
    ],
)
def test_ex42_materialized_views(updatable: set[str], stored: set[str]) -> None:
    assert _fig2_tree(FIG2, updatable).stored == {PAPER[v] for v in stored}


@pytest.mark.parametrize(
    ("updatable", "stored"),
    [({"r"}, {"V_RST@A", "V_ST@C"}), ({"s"}, {"V_RST@A", "V_R@B", "V_T@D"}), ({"t"}, {"V_RST@A", "V_R@B", "V_S@E"})],
)
def test_ex11_free_variables(updatable: set[str], stored: set[str]) -> None:
    tree = build_view_tree(derive_order(parse_query(EX11, RST)), updatable)
    assert set(tree.root.keys) == {"a", "c"} and set(tree.views["at_c"].keys) == {"a", "c"}
    assert tree.views["at_c"].marginalized == () and tree.root.marginalized == ()
    assert tree.stored == {PAPER[v] for v in stored}


def test_path_to_root_and_siblings() -> None:
    tree = _fig2_tree(FIG2, {"t"})
    steps = tree.path_to_root("t")
    assert [(s.child.id, s.view.id, [x.id for x in s.siblings]) for s in steps] == [
        ("leaf_t", "at_c", ["leaf_s"]),
        ("at_c", "at_a", ["leaf_r"]),
    ]
    with pytest.raises(InvalidInput):
        tree.path_to_root("nope")
    with pytest.raises(InvalidInput):
        build_view_tree(tree.order, {"nope"})


def test_ex71_matrix_chain_drops_identical_views() -> None:
    schemas = {f"a{i}": {f"x{i}": "int", f"x{i + 1}": "int", "v": "double"} for i in range(1, 5)}
    sql = (
        "SELECT a1.x1, a4.x5, SUM(a1.v * a2.v * a3.v * a4.v) FROM a1 JOIN a2 ON a1.x2 = a2.x2 "
        "JOIN a3 ON a2.x3 = a3.x3 JOIN a4 ON a3.x4 = a4.x4 GROUP BY a1.x1, a4.x5"
    )
    order = parse_order(parse_query(sql, schemas), {"x1": {"x5": {"x3": ["x2", "x4"]}}})
    tree = build_view_tree(order, {"a2"})
    inner = {v.id: (set(v.keys), v.marginalized) for v in tree.views.values() if v.relation is None}
    assert inner == {"at_x3": ({"x1", "x5"}, ("x3",)), "at_x2": ({"x1", "x3"}, ("x2",)), "at_x4": ({"x3", "x5"}, ("x4",))}
    assert tree.root.id == "at_x3"
    assert tree.stored == {"at_x3", "at_x4", "leaf_a1"}


def test_render_names_keys_and_storage() -> None:
    text = _fig2_tree(FIG2, {"t"}).render()
    lines = text.splitlines()
    assert lines[0] == "V_rst@a[] sums out a  (at_a, stored)"
    assert "  V_st@c[a] sums out c  (at_c, not stored)" in lines
    assert "    V_t@d[c] sums out d  (leaf_t, not stored)" in lines
    assert len(lines) == 5


def test_single_relation_tree_is_its_leaf() -> None:
    tree = build_view_tree(derive_order(parse_query("SELECT r.a, SUM(r.b) FROM r GROUP BY r.a", RST)), {"r"})
    assert tree.root.id == "leaf_r" and tree.root.keys == ("a",) and tree.stored == {"leaf_r"}
