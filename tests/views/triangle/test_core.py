"""IVM^ε single-tuple engine (§3.2, Fig. 3; rebalancing, §4) against brute force: every ε, every update, invariants."""
from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakeivm.errors import InvalidInput
from lakeivm.views.triangle.core import HEAVY, LIGHT, ROLES, TriangleIVM
from lakeivm.views.triangle.oracle import apply_changes, count_triangles

EPSILONS = (0.0, 0.25, 0.5, 0.75, 1.0)

updates = st.lists(
    st.tuples(st.sampled_from(ROLES), st.integers(0, 4), st.integers(0, 4), st.sampled_from((-2, -1, 1, 1, 2))),
    max_size=60,
)


def run_checked(ivm: TriangleIVM, stream: list[tuple[str, int, int, int]], relations: dict | None = None) -> dict[str, dict]:
    """Apply ``stream`` to ``ivm`` (holding ``relations``), asserting Q = brute force and the invariants after every update."""
    relations = relations if relations is not None else {role: {} for role in ROLES}
    for role, x, y, p in stream:
        ivm.update(role, x, y, p)
        apply_changes(relations[role], [((x, y), p)])
        assert ivm.count == count_triangles(relations["R"], relations["S"], relations["T"])
        ivm.check_invariants()
    return relations


def skewed_stream(seed: int, length: int, domain: int, hub_share: float, delete_share: float) -> list[tuple[str, int, int, int]]:
    """Inserts and (mostly exact, sometimes partial or over-) deletes with hub value 0 in every role."""
    rng = random.Random(seed)
    live: dict[str, dict] = {role: {} for role in ROLES}
    stream = []
    for _ in range(length):
        role = rng.choice(ROLES)
        if live[role] and rng.random() < delete_share:
            key = rng.choice(sorted(live[role]))
            p = -live[role][key] if rng.random() < 0.8 else -1
        else:
            x = 0 if rng.random() < hub_share else rng.randrange(domain)
            key, p = (x, rng.randrange(domain)), rng.choice((1, 1, 1, 2))
        apply_changes(live[role], [(key, p)])
        stream.append((role, *key, p))
    return stream


@pytest.mark.parametrize("epsilon", EPSILONS)
@settings(max_examples=40, deadline=None)
@given(stream=updates)
def test_random_updates_match_brute_force(epsilon: float, stream: list[tuple[str, int, int, int]]) -> None:
    run_checked(TriangleIVM(epsilon), stream)


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_skewed_growth_then_shrink_to_empty(epsilon: float) -> None:
    ivm = TriangleIVM(epsilon)
    grow = skewed_stream(seed=7, length=260, domain=12, hub_share=0.5, delete_share=0.15)
    relations = run_checked(ivm, grow)
    peak, rebuilds = ivm.base, ivm.counters.major_rebalancings
    assert peak >= 64 and ivm.count != 0
    shrink = [(role, x, y, -p) for role in ROLES for (x, y), p in sorted(relations[role].items())]
    random.Random(3).shuffle(shrink)
    run_checked(ivm, shrink, relations)
    assert ivm.size == 0 and ivm.count == 0 and ivm.base < peak // 8
    assert ivm.counters.major_rebalancings > rebuilds + 3, "shrinking past N/4 must rebuild"
    assert all(not view for view in ivm.views.values())
    run_checked(ivm, grow[:40], relations)


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_long_seeded_stream_with_multiplicities(epsilon: float) -> None:
    stream = skewed_stream(seed=11, length=500, domain=8, hub_share=0.3, delete_share=0.45)
    ivm = TriangleIVM(epsilon)
    run_checked(ivm, stream)
    if 0 < epsilon < 1:
        assert ivm.counters.minor_moves + ivm.counters.major_rebalancings > 0


def test_count_is_the_same_for_every_epsilon() -> None:
    stream = skewed_stream(seed=5, length=300, domain=10, hub_share=0.4, delete_share=0.3)
    counts = set()
    for epsilon in EPSILONS:
        ivm = TriangleIVM(epsilon)
        for update in stream:
            ivm.update(*update)
        counts.add(ivm.count)
    assert len(counts) == 1


def test_band_edges_use_hysteresis() -> None:
    """A hub crossing 3/2θ moves once; oscillating by one at either edge moves nothing (§4.1)."""
    background = {(v, v + 1000): 1 for v in range(400)}
    ivm = TriangleIVM(0.5, {"S": background})
    theta = ivm.theta
    up, down = math.ceil(1.5 * theta), math.ceil(0.5 * theta)
    for y in range(up - 1):
        ivm.update("R", "hub", y, 1)
    assert ivm.part_of("R", "hub") == LIGHT and ivm.counters.minor_moves == 0
    ivm.update("R", "hub", up - 1, 1)
    assert ivm.part_of("R", "hub") == HEAVY and ivm.counters.minor_moves == 1
    for _ in range(5):
        ivm.update("R", "hub", up - 1, -1)
        ivm.check_invariants()
        ivm.update("R", "hub", up - 1, 1)
    assert ivm.part_of("R", "hub") == HEAVY and ivm.counters.minor_moves == 1
    for y in range(up - 1, down - 1, -1):
        ivm.update("R", "hub", y, -1)
    assert ivm.part_of("R", "hub") == HEAVY and ivm.parts["R", HEAVY].degree("hub") == down
    ivm.update("R", "hub", down - 1, -1)
    assert ivm.part_of("R", "hub") == LIGHT and ivm.counters.minor_moves == 2
    for _ in range(5):
        ivm.update("R", "hub", down - 1, 1)
        ivm.update("R", "hub", down - 1, -1)
    assert ivm.counters.minor_moves == 2 and ivm.counters.major_rebalancings == 0
    ivm.check_invariants()


def test_self_loops_in_a_graph_stored_as_three_copies() -> None:
    """An edge table E joined with itself: every edge change is applied to R, S and T (App. A)."""
    rng = random.Random(2)
    edges: dict = {}
    ivm = TriangleIVM(0.5)
    for _ in range(150):
        a, b = rng.randrange(5), rng.randrange(5)
        p = -edges[a, b] if (a, b) in edges and rng.random() < 0.4 else 1
        apply_changes(edges, [((a, b), p)])
        for role in ROLES:
            ivm.update(role, a, b, p)
        assert ivm.count == count_triangles(edges, edges, edges)
    loops = {(v, v): 1 for v in range(3)}
    assert TriangleIVM(0.5, {r: loops for r in ROLES}).count == 3


def test_multiplicity_changes_keep_degree_and_size() -> None:
    ivm = TriangleIVM(0.5)
    for role, x, y in (("R", 1, 2), ("S", 2, 3), ("T", 3, 1)):
        ivm.update(role, x, y, 1)
    size, base = ivm.size, ivm.base
    ivm.update("R", 1, 2, 4)
    assert (ivm.size, ivm.base, ivm.count) == (size, base, 5)
    ivm.update("R", 1, 2, -5)
    assert ivm.size == size - 1 and ivm.count == 0 and ivm.relation("R") == {}
    ivm.check_invariants()


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_preprocessing_equals_incremental(epsilon: float) -> None:
    stream = skewed_stream(seed=13, length=300, domain=10, hub_share=0.4, delete_share=0.2)
    incremental = TriangleIVM(epsilon)
    relations = run_checked(incremental, stream)
    loaded = TriangleIVM(epsilon, relations)
    loaded.check_invariants()
    assert loaded.count == incremental.count
    assert loaded.base == 2 * loaded.size + 1


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_update_cost_is_bounded_without_rebalancing(epsilon: float) -> None:
    """Each update that triggers no rebalancing does O(2N^(1-ε) + 3N^ε + 1) loop steps (Prop. 11)."""
    stream = skewed_stream(seed=17, length=1200, domain=40, hub_share=0.35, delete_share=0.25)
    ivm = TriangleIVM(epsilon)
    checked = 0
    for update in stream:
        before, moves, rebuilds, base = ivm.counters.loop_steps, ivm.counters.minor_moves, ivm.counters.major_rebalancings, ivm.base
        ivm.update(*update)
        if (ivm.counters.minor_moves, ivm.counters.major_rebalancings) == (moves, rebuilds):
            checked += 1
            bound = 2 * (2 * base ** (1 - epsilon) + 3 * base ** epsilon + 1)
            assert ivm.counters.loop_steps - before <= bound
    assert checked > 1000
    ivm.check_invariants()


def test_rejects_bad_arguments() -> None:
    with pytest.raises(InvalidInput, match="epsilon"):
        TriangleIVM(1.5)
    with pytest.raises(InvalidInput, match="relation"):
        TriangleIVM(0.5).update("U", 1, 2, 1)
    with pytest.raises(InvalidInput, match="relations"):
        TriangleIVM(0.5, {"U": {(1, 2): 1}})
