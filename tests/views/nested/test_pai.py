"""The PAI map against a brute force over per-group shares."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakeivm.errors import InvalidInput
from lakeivm.views.nested.pai import PaiMap

op = st.tuples(st.integers(0, 5), st.integers(-2, 2), st.integers(-1, 1), st.integers(-3, 3))


@settings(max_examples=80, deadline=None)
@given(ops=st.lists(op, max_size=50), probes=st.lists(st.integers(-6, 6), min_size=1, max_size=4))
def test_pai_matches_brute_force(ops, probes) -> None:
    pai, groups = PaiMap(2), {}
    for group, key_delta, count, value in ops:
        pai.add(group, key_delta, (count, value))
        key, (c, v) = groups.get(group, (0, (0, 0)))
        groups[group] = (key + key_delta, (c + count, v + value))
        for k in probes + [key for key, _ in groups.values()]:
            shares = [vals for key, vals in groups.values() if key == k]
            assert pai.at(k) == (sum(s[0] for s in shares), sum(s[1] for s in shares))
        for g, share in groups.items():
            assert pai.group(g) == share
        assert len(pai) == sum(1 for key, vals in groups.values() if key != 0 or any(vals))
        pai.check_invariants()


def test_tied_groups_are_not_merged() -> None:
    """Two groups at the same key; moving one leaves the other's share behind
    (``docs/kinds/nested.md#tied-aggregate-values``)."""
    pai = PaiMap(2)
    pai.add("a", 5, (1, 10))
    pai.add("b", 5, (1, 0))
    assert pai.at(5) == (2, 10)
    pai.add("b", 3, (1, 7))
    assert pai.at(5) == (1, 10) and pai.at(8) == (2, 7)
    pai.add("a", -5, (-1, -10))
    assert pai.at(5) == (0, 0) and pai.at(0) == (0, 0) and len(pai) == 1
    pai.check_invariants()


def test_null_rejected() -> None:
    with pytest.raises(InvalidInput, match="NULL"):
        PaiMap(1).add("a", None, (1,))
    with pytest.raises(InvalidInput, match="1 contributions"):
        PaiMap(1).add("a", 1, (1, 2))
