"""IVM^ε batch delta rule against brute force: every ε, every batch split, rebalancing, self-joins."""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakeivm.datagen.graph import edge_stream, rmat_edges
from lakeivm.errors import InvalidInput
from lakeivm.testing.triangle import BatchState, apply_batch, bootstrap, consolidate, graph_changes
from lakeivm.views.triangle.core import HEAVY, LIGHT, ROLES, TriangleIVM
from lakeivm.views.triangle.oracle import apply_changes, count_graph_triangles, count_triangles

EPSILONS = (0.0, 0.25, 0.5, 0.75, 1.0)

change = st.tuples(st.sampled_from(ROLES), st.tuples(st.integers(0, 4), st.integers(0, 4)), st.sampled_from((-2, -1, 1, 1, 2)))
batches = st.lists(st.lists(change, max_size=12), max_size=12)

Change = tuple[str, tuple[int, int], int]


def run_batches(state: BatchState, stream: list[list[Change]], relations: dict | None = None) -> dict[str, dict]:
    """Apply each batch, asserting Q = brute force and the invariants after every batch."""
    relations = relations if relations is not None else {role: {} for role in ROLES}
    for batch in stream:
        grouped: dict[str, list] = {}
        for role, key, p in batch:
            grouped.setdefault(role, []).append((key, p))
            apply_changes(relations[role], [(key, p)])
        report = apply_batch(state, grouped)
        assert state.count == count_triangles(relations["R"], relations["S"], relations["T"])
        if report.major:
            assert state.base == 2 * state.size + 1
        state.check_invariants()
    return relations


def skewed_changes(seed: int, length: int, domain: int, hub_share: float, delete_share: float) -> list[Change]:
    """A valid stream of single changes (deletes of present keys, some partial) with hub value 0."""
    rng = random.Random(seed)
    live: dict[str, dict] = {role: {} for role in ROLES}
    stream = []
    for _ in range(length):
        role = rng.choice(ROLES)
        if live[role] and rng.random() < delete_share:
            key = rng.choice(sorted(live[role]))
            p = -live[role][key] if rng.random() < 0.8 else -1
        else:
            key = (0 if rng.random() < hub_share else rng.randrange(domain), rng.randrange(domain))
            p = rng.choice((1, 1, 2))
        apply_changes(live[role], [(key, p)])
        stream.append((role, key, p))
    return stream


def split(stream: list[Change], sizes: list[int]) -> list[list[Change]]:
    out, start = [], 0
    for size in sizes:
        out.append(stream[start:start + size])
        start += size
    return out + ([stream[start:]] if start < len(stream) else [])


@pytest.mark.parametrize("epsilon", EPSILONS)
@settings(max_examples=30, deadline=None)
@given(stream=batches)
def test_random_batches_match_brute_force(epsilon: float, stream: list[list[Change]]) -> None:
    run_batches(bootstrap({}, epsilon), stream)


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_result_is_independent_of_the_batch_split(epsilon: float) -> None:
    stream = skewed_changes(seed=21, length=400, domain=10, hub_share=0.4, delete_share=0.3)
    rng = random.Random(epsilon)
    splits = [[1] * len(stream), [10] * 40, [len(stream)], [rng.randint(1, 60) for _ in range(40)]]
    finals = set()
    for sizes in splits:
        state = bootstrap({}, epsilon)
        run_batches(state, split(stream, sizes))
        finals.add(state.count)
    assert len(finals) == 1


def test_one_batch_across_all_three_relations_has_its_cross_terms() -> None:
    """ΔR·ΔS·ΔT from an empty state: only the telescoped order sees the triangle
    (``docs/kinds/triangle.md#batches``)."""
    state = bootstrap({}, 0.5)
    apply_batch(state, {"R": {(1, 2): 2}, "S": {(2, 3): 3}, "T": {(3, 1): 5}})
    assert state.count == 30
    state.check_invariants()


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_major_rebalancing_both_ways(epsilon: float) -> None:
    state = bootstrap({"S": {(v, v): 1 for v in range(20)}}, epsilon)
    assert state.base == 41
    grow = [[(role, (i % 7, 100 + i), 1) for i in range(80) for role in ROLES]]
    relations = run_batches(state, grow, {"R": {}, "S": {(v, v): 1 for v in range(20)}, "T": {}})
    assert state.base == 2 * state.size + 1 == 2 * 260 + 1 and state.totals["major_rebalancings"] == 1
    shrink = [[(role, key, -p) for role in ROLES for key, p in sorted(relations[role].items())][:-10]]
    run_batches(state, shrink, relations)
    assert state.base == 2 * 10 + 1 and state.totals["major_rebalancings"] == 2
    run_batches(state, [[(role, key, -p) for role in ROLES for key, p in sorted(relations[role].items())]], relations)
    assert (state.size, state.count, state.base) == (0, 0, 1)


def test_many_values_cross_thresholds_in_two_relations_at_once() -> None:
    """Moves in R and S in the same batch both change V_RS: applied one relation after another (§7.4)."""
    background = {(1000 + v, 2000 + v): 1 for v in range(1000)}
    state = bootstrap({"T": background}, 0.5)
    relations = {"R": {}, "S": {}, "T": dict(background)}
    up = [(role, (hub, y), 1) for role in ("R", "S") for hub in range(4) for y in range(70)]
    closing = [("T", (y, hub), 1) for hub in range(4) for y in range(70)]
    report = apply_batch(state, _grouped(up + closing))
    for role, key, p in up + closing:
        apply_changes(relations[role], [(key, p)])
    assert not report.major and len(report.moved_values) >= 8
    assert {x for role, x in report.moved_values if role == "R"} >= set(range(4))
    assert state.heavy_values("R") >= set(range(4)) and state.heavy_values("S") >= set(range(4))
    state.check_invariants()
    down = [(role, (hub, y), -1) for role in ("R", "S") for hub in range(4) for y in range(3, 70)]
    report = apply_batch(state, _grouped(down))
    assert {x for role, x in report.moved_values} >= set(range(4))
    assert not (state.heavy_values("R") | state.heavy_values("S")) & set(range(4))
    for role, key, p in down:
        apply_changes(relations[role], [(key, p)])
    assert state.count == count_triangles(relations["R"], relations["S"], relations["T"])
    state.check_invariants()


def test_cancelling_changes_are_a_no_op() -> None:
    state = bootstrap({"R": {(1, 2): 1}, "S": {(2, 3): 1}, "T": {(3, 1): 1}}, 0.5)
    report = apply_batch(state, {"R": [((5, 6), 1), ((5, 6), -1)], "T": [((3, 1), 2), ((3, 1), -2)]})
    assert (report.count_delta, report.size_change, report.join_rows, state.count) == (0, 0, 0, 1)
    assert consolidate([((1, 1), 2), ((1, 1), -2), ((2, 2), 1)]) == {(2, 2): 1}


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_graph_self_join_with_self_loops(epsilon: float) -> None:
    """One edge table as R, S and T: Σ E(a,b)E(b,c)E(c,a) including loops (App. A)."""
    rng = random.Random(8)
    edges: dict = {}
    state = bootstrap(graph_changes({(0, 0): 1, (0, 1): 1}), epsilon)
    apply_changes(edges, [((0, 0), 1), ((0, 1), 1)])
    for _ in range(25):
        batch = []
        for _ in range(rng.randint(1, 8)):
            key = (rng.randrange(6), rng.randrange(6))
            p = -edges[key] if key in edges and rng.random() < 0.4 else 1
            apply_changes(edges, [(key, p)])
            batch.append((key, p))
        apply_batch(state, graph_changes(batch))
        assert state.count == count_graph_triangles(edges)
        state.check_invariants()


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_bootstrap_and_single_tuple_engine_agree(epsilon: float) -> None:
    stream = skewed_changes(seed=31, length=300, domain=10, hub_share=0.4, delete_share=0.25)
    ivm = TriangleIVM(epsilon)
    relations: dict[str, dict] = {role: {} for role in ROLES}
    for role, (x, y), p in stream:
        ivm.update(role, x, y, p)
        apply_changes(relations[role], [((x, y), p)])
    state = bootstrap(relations, epsilon)
    state.check_invariants()
    assert state.count == ivm.count
    assert all(not state.parts[role, LIGHT].size for role in ROLES) or epsilon != 0
    assert all(not state.parts[role, HEAVY].size for role in ROLES) or epsilon != 1


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_join_rows_per_step_are_bounded(epsilon: float) -> None:
    """Each Δ row fans out to ≤ 2N^(1-ε) heavy and < 3/2 N^ε light rows, plus what the batch itself added."""
    stream = skewed_changes(seed=41, length=1500, domain=60, hub_share=0.3, delete_share=0.2)
    state = bootstrap({}, epsilon)
    for batch in split(stream, [50] * 30):
        base, k = state.base, len(batch)
        report = apply_batch(state, _grouped(batch))
        assert report.join_rows <= k * (1 + 2 * base ** (1 - epsilon) + 1.5 * base ** epsilon + 2 * k)
    state.check_invariants()


def test_rejects_bad_arguments() -> None:
    with pytest.raises(InvalidInput, match="epsilon"):
        bootstrap({}, -0.1)
    with pytest.raises(InvalidInput, match="relations"):
        apply_batch(bootstrap({}), {"E": {(1, 2): 1}})


def _grouped(batch: list[Change]) -> dict[str, list]:
    grouped: dict[str, list] = {}
    for role, key, p in batch:
        grouped.setdefault(role, []).append((key, p))
    return grouped


@pytest.mark.parametrize("epsilon", (0.25, 0.5))
def test_rmat_graph_stream_has_heavy_hubs_and_matches_brute_force(epsilon: float) -> None:
    edges = rmat_edges(9, 3000, seed=9)
    graph = {e: 1 for e in edges}
    state = bootstrap(graph_changes(graph), epsilon)
    assert state.heavy_values("R") and state.parts["R", LIGHT].size
    for batch in edge_stream(edges, 9, batches=8, batch_size=100, seed=10):
        apply_batch(state, graph_changes(batch.changes()))
        apply_changes(graph, batch.changes())
        assert state.count == count_graph_triangles(graph)
    state.check_invariants()
    assert any(state.views[role] for role in ROLES)
