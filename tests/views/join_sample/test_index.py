"""The dynamic join index against brute force: every ΔJ holds exactly the new join results (§4).

How the tests check it: ``docs/kinds/join_sample.md#how-it-is-tested``.
"""
from __future__ import annotations

import random
from collections import Counter

import pytest

from lakeivm.errors import InvalidInput
from lakeivm.views.join_sample.index import JoinIndex, exact_counts
from lakeivm.views.join_sample.spec import JoinSpec

from .oracles import brute_force_join
from .shapes import SHAPES, random_stream


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("name", sorted(SHAPES))
def test_every_delta_equals_the_brute_force_delta(name: str, seed: int) -> None:
    check_stream(name, seed)


def test_padding_is_exercised() -> None:
    """The random instances do contain dummies, so the ⊥ paths of Retrieve are tested."""
    assert check_stream("line4", 0) > 0 and check_stream("branch", 1) > 0


def check_stream(name: str, seed: int) -> int:
    """Insert a random stream, comparing each ΔJ with brute force; return the dummies seen."""
    shape = SHAPES[name]
    spec = JoinSpec.from_mapping(shape)
    index = JoinIndex(spec)
    rows: dict[str, dict] = {rel: {} for rel in shape}
    before: set = set()
    dummies = 0
    for rel, rid, row in random_stream(shape, seed, per_relation=9, domain=3):
        delta = index.insert(rel, rid, row)
        rows[rel][rid] = row
        after = brute_force_join(shape, rows)
        real = delta.real_results()
        assert Counter(real) == Counter(after - before), "ΔJ's real results differ from ΔQ"
        density_bound = 0.5 ** (2 * len(spec.tree))
        assert not real or len(real) >= density_bound * delta.size
        dummies += delta.size - len(real)
        index.check_invariants()
        before = after
    return dummies


def test_line2_has_no_dummies_and_exact_sizes() -> None:
    """Warm-up of §4.1: for R1 ⋈ R2 the delta of (a, b) is exactly R2 ⋉ b."""
    shape = SHAPES["line2"]
    index = JoinIndex(JoinSpec.from_mapping(shape))
    for rel, rid, row in random_stream(shape, 3, per_relation=12, domain=4):
        delta = index.insert(rel, rid, row)
        assert len(delta.real_results()) == delta.size


def test_exact_counts_match_brute_force() -> None:
    shape = SHAPES["branch"]
    spec = JoinSpec.from_mapping(shape)
    index = JoinIndex(spec)
    rows: dict[str, dict] = {rel: {} for rel in shape}
    for rel, rid, row in random_stream(shape, 11, per_relation=8, domain=3):
        index.insert(rel, rid, row)
        rows[rel][rid] = row
    counts = exact_counts(index)
    for i, edge in enumerate(spec.directed_edges()):
        side = _subtree(spec, edge.child, edge.parent)
        results = brute_force_join({r: shape[r] for r in side}, rows)
        per_key: Counter = Counter()
        for ids in results:
            child_row = rows[edge.child][ids[side.index(edge.child)]]
            per_key[tuple(child_row[p] for p in edge.child_key)] += 1
        assert counts[i] == dict(per_key)


def test_duplicate_row_id_and_bad_arity_are_refused() -> None:
    index = JoinIndex(JoinSpec.from_mapping(SHAPES["line2"]))
    index.insert("R1", 1, (0, 0))
    with pytest.raises(InvalidInput, match="already inserted"):
        index.insert("R1", 1, (0, 1))
    with pytest.raises(InvalidInput, match="values for attributes"):
        index.insert("R2", 1, (0,))
    with pytest.raises(InvalidInput, match="unknown relation"):
        index.insert("R9", 1, (0, 1))


def _subtree(spec: JoinSpec, node: str, parent: str) -> list[str]:
    out = [node]
    for n in spec.neighbors(node):
        if n != parent:
            out += _subtree(spec, n, node)
    return out


def test_self_join_slots_updated_one_at_a_time_count_each_result_once() -> None:
    """One edge table behind three star slots, each new edge inserted slot by slot
    (``docs/kinds/join_sample.md#rows-slots-and-order``)."""
    rnd = random.Random(5)
    edges = sorted({(rnd.randrange(4), rnd.randrange(6)) for _ in range(14)})
    rnd.shuffle(edges)
    index = JoinIndex(JoinSpec.from_mapping(SHAPES["star3"]))
    produced: Counter = Counter()
    for eid, edge in enumerate(edges):
        for slot in ("S1", "S2", "S3"):
            produced.update(index.insert(slot, eid, edge).real_results())
    expected = {(a, b, c) for a, ea in enumerate(edges) for b, eb in enumerate(edges) for c, ec in enumerate(edges)
                if ea[0] == eb[0] == ec[0]}
    assert set(produced) == expected and all(n == 1 for n in produced.values())


def test_skewed_line4_deltas_add_up_to_the_join() -> None:
    """Heavy keys make cnt~ double many times (Alg. 7 propagation); the deltas still partition Q exactly."""
    rnd = random.Random(9)
    shape = SHAPES["line4"]
    stream = [(rel, i, (int(rnd.paretovariate(1.2)) % 12, int(rnd.paretovariate(1.2)) % 12))
              for i in range(30) for rel in shape]
    rnd.shuffle(stream)
    index = JoinIndex(JoinSpec.from_mapping(shape))
    rows: dict[str, dict] = {rel: {} for rel in shape}
    produced: Counter = Counter()
    for rel, rid, row in stream:
        produced.update(index.insert(rel, rid, row).real_results())
        rows[rel][rid] = row
    index.check_invariants()
    expected = brute_force_join(shape, rows)
    assert len(expected) > 1000 and set(produced) == expected and max(produced.values()) == 1
