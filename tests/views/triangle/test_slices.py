"""A batch run over a fetched slice has exactly the effect of the batch on the whole state."""
from __future__ import annotations

import copy
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakeivm.datagen.graph import edge_stream, rmat_edges
from lakeivm.views.triangle.batch import BatchState, apply_batch, bootstrap, consolidate, graph_changes
from lakeivm.views.triangle.core import HEAVY, LIGHT, ROLES
from lakeivm.views.triangle.slices import answer, first_requests, run_on_slice, second_requests

EPSILONS = (0.0, 0.25, 0.5, 0.75, 1.0)


def rows(state: BatchState) -> dict:
    return {(role, part, x, y): p for (role, part), rel in state.parts.items() for (x, y), p in rel.items()}


def views(state: BatchState) -> dict:
    return {(role, x, z): c for role, view in state.views.items() for (x, z), c in view.items()}


def difference(after: dict, before: dict) -> dict:
    out = {k: after.get(k, 0) - before.get(k, 0) for k in after.keys() | before.keys()}
    return {k: v for k, v in out.items() if v}


def check_batch(state: BatchState, batch: dict) -> tuple[int, int]:
    """Run ``batch`` over a slice of ``state`` and on the whole of it (in place); both must agree.
    Returns the slice's row count and the state's, to show the slice is a small part."""
    changes = {role: consolidate(batch.get(role, {})) for role in ROLES}
    whole = copy.deepcopy(state)
    fetched = answer(first_requests(changes), whole)
    fetched.update(answer(second_requests(changes, fetched, state.theta, state.epsilon), whole))
    run = run_on_slice(changes, fetched, state.base, state.epsilon, state.size)
    rows_before, views_before, count_before = rows(state), views(state), state.count
    report = apply_batch(state, changes)
    assert run.count_delta == state.count - count_before
    assert run.major == report.major
    assert run.size == state.size
    if report.major:  # the caller rebuilds the parts from the relations: only those must agree
        relation = lambda d: consolidate(((r, x, y), p) for (r, _, x, y), p in d.items())  # noqa: E731
        assert relation(run.rel_delta) == relation(difference(rows(state), rows_before))
    else:
        assert run.moved == report.moved_values
        assert run.rel_delta == difference(rows(state), rows_before)
        assert run.view_delta == difference(views(state), views_before)
    return len(fetched.rows), len(rows_before)


change = st.tuples(st.sampled_from(ROLES), st.tuples(st.integers(0, 5), st.integers(0, 5)), st.sampled_from((-2, -1, 1, 1, 2)))


@pytest.mark.parametrize("epsilon", EPSILONS)
@settings(max_examples=40, deadline=None)
@given(start=st.lists(change, max_size=40), stream=st.lists(st.lists(change, max_size=15), max_size=6))
def test_random_batches_over_a_slice_equal_the_whole(epsilon, start, stream):
    relations: dict = {role: {} for role in ROLES}
    for role, key, p in start:
        relations[role][key] = relations[role].get(key, 0) + abs(p)
    state = bootstrap(relations, epsilon)
    for batch in stream:
        grouped: dict = {}
        for role, key, p in batch:
            grouped.setdefault(role, []).append((key, p))
        check_batch(state, grouped)


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_skewed_stream_with_moves_both_ways(epsilon):
    """A hub gains many edges, then loses them, so it crosses the band both ways."""
    rng = random.Random(5)
    state = bootstrap({role: {(rng.randrange(1, 100), rng.randrange(100)): 1 for _ in range(100)} for role in ROLES}, epsilon)
    moves = []
    for step in range(8):
        if step < 4:
            batch = {role: {(0, rng.randrange(1000)): 1 for _ in range(15)} for role in ROLES}
        else:
            batch = {role: {key: -p for key, p in state.relation(role).items() if key[0] == 0 and rng.random() < 0.7}
                     for role in ROLES}
        for role in ROLES:  # background changes elsewhere, so the size stays in its band
            batch[role].update({(rng.randrange(1, 100), rng.randrange(100)): 1 for _ in range(5)})
        check_batch(state, batch)
        moves.append(state.totals["minor_moves"])
    if epsilon in (0.25, 0.5):  # (at ¾, θ ≈ 120 is beyond the hub's degree)
        assert 0 < moves[3] < moves[-1], moves


@pytest.mark.parametrize("epsilon", (0.25, 0.5))
def test_rmat_graph_batches_read_a_small_slice(epsilon):
    edges = set(rmat_edges(11, 6000, seed=3))
    state = bootstrap(graph_changes({e: 1 for e in edges}), epsilon)
    assert state.parts["R", HEAVY].size and state.parts["R", LIGHT].size
    sliced, whole = [], 0
    for batch in edge_stream(sorted(edges), 11, 4, 40, seed=4):
        changes = {**{e: 1 for e in batch.inserts}, **{e: -1 for e in batch.deletes}}
        fetched, whole = check_batch(state, graph_changes(changes))
        sliced.append(fetched)
    assert max(sliced) < whole / 4, (sliced, whole)
