"""Join trees of line, star and branching specs; cyclic and disconnected specs are refused."""
from __future__ import annotations

import pytest

from lakeivm.errors import InvalidInput, UnsupportedQuery
from lakeivm.views.join_sample.spec import JoinSpec

from .shapes import SHAPES


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_tree_is_a_join_tree(name: str) -> None:
    spec = JoinSpec.from_mapping(SHAPES[name])
    assert len(spec.tree) == len(spec.names) - 1
    for attribute in spec.attributes:
        holders = {n for n in spec.names if attribute in spec.attrs(n)}
        inside = [e for e in spec.tree if set(e) <= holders]
        assert len(inside) == len(holders) - 1
    edges = spec.directed_edges()
    assert len(edges) == 2 * len(spec.tree)
    for e in edges:
        assert e.key and set(e.key) == set(spec.attrs(e.child)) & set(spec.attrs(e.parent))
        assert {edges[c].child for c in e.children} == set(spec.neighbors(e.child)) - {e.parent}
        assert all(edges[c].parent == e.child for c in e.children)
    assert JoinSpec.from_mapping(spec.to_mapping()) == spec


def test_line_and_star_trees() -> None:
    assert JoinSpec.from_mapping(SHAPES["line3"]).tree == (("R1", "R2"), ("R2", "R3"))
    assert len(JoinSpec.from_mapping(SHAPES["star3"]).tree) == 2


def test_cyclic_and_disconnected_specs_are_refused() -> None:
    with pytest.raises(UnsupportedQuery, match="cyclic"):
        JoinSpec.from_mapping({"R": ("a", "b"), "S": ("b", "c"), "T": ("c", "a")})
    with pytest.raises(UnsupportedQuery, match="disconnected"):
        JoinSpec.from_mapping({"R": ("a", "b"), "S": ("c", "d")})


def test_malformed_specs_are_refused() -> None:
    with pytest.raises(InvalidInput):
        JoinSpec.from_mapping({})
    with pytest.raises(InvalidInput):
        JoinSpec.from_mapping({"R": ("a", "a")})
    with pytest.raises(InvalidInput):
        JoinSpec.from_mapping({"R": ()})
