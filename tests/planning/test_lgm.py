"""LGM actions and the proof transformations of §3: Lemmas 1-6 on random valid plans."""
from __future__ import annotations

import itertools
import random

from lakeivm.planning.costs import LinearCost
from lakeivm.planning.lgm import empty_tables, make_lazy_plan, make_lgm_plan, minimal_greedy_sets
from lakeivm.planning.plans import Instance, Plan, is_lazy, is_lgm
from tests.planning.instances import random_instance, random_valid_plan

EPS = 1e-9


def test_minimal_sets_match_the_definition() -> None:
    rng = random.Random(5)
    for _ in range(300):
        n = rng.randint(1, 4)
        costs = tuple(LinearCost(rng.choice([1, 2]), rng.choice([0, 3])) for _ in range(n))
        inst = Instance(costs, ((0,) * n,), rng.randint(0, 15))
        pending = tuple(rng.randint(0, 4) for _ in range(n))
        got = set(minimal_greedy_sets(inst.is_full, pending))
        nonempty = [i for i in range(n) if pending[i]]
        subsets = [frozenset(c) for r in range(len(nonempty) + 1) for c in itertools.combinations(nonempty, r)]
        valid = {s for s in subsets if not inst.is_full(empty_tables(pending, s))}
        expected = {s for s in valid if not any(v < s for v in valid)}
        assert got == expected


def test_t4_make_lazy_plan_is_valid_lazy_and_no_dearer() -> None:
    rng = random.Random(4)
    for _ in range(400):
        inst = random_instance(rng)
        plan = random_valid_plan(inst, rng)
        lazy = make_lazy_plan(plan)
        lazy.check_invariants()
        assert is_lazy(inst, lazy.actions)
        assert lazy.cost <= plan.cost + EPS


def test_t5_t6_make_lgm_plan_valid_lgm_within_twice_and_fewer_linear_actions() -> None:
    rng = random.Random(5)
    worst = 0.0
    for trial in range(600):
        family = "linear" if trial % 2 else None
        inst = random_instance(rng, family)
        plan = random_valid_plan(inst, rng)
        order = list(range(inst.n))
        rng.shuffle(order)
        lgm = make_lgm_plan(plan, order)
        lgm.check_invariants()
        assert is_lgm(inst, lgm.actions)
        assert lgm.cost <= 2 * plan.cost + EPS
        if plan.cost:
            worst = max(worst, lgm.cost / plan.cost)
        if family == "linear":
            for i in range(inst.n):
                assert _touches(lgm, i) <= _touches(plan, i)
    assert worst > 1.0


def _touches(plan: Plan, table: int) -> int:
    return sum(1 for p in plan.actions if p[table])


def _batches(plan: Plan, table: int) -> list[tuple[int, int, int]]:
    """FIFO batches of one table as (start, end, size) intervals of its cumulative arrival stream."""
    batches, done = [], 0
    for p in plan.actions:
        if p[table]:
            batches.append((done, done + p[table], p[table]))
            done += p[table]
    return batches


def test_t7_overlap_graph_lemmas_3_and_4() -> None:
    rng = random.Random(7)
    for _ in range(500):
        inst = random_instance(rng)
        plan = random_valid_plan(inst, rng)
        lgm = make_lgm_plan(plan)
        for i, f in enumerate(inst.costs):
            ps, qs = _batches(plan, i), _batches(lgm, i)
            overlaps = {q: [p for p in ps if p[0] < q[1] and q[0] < p[1]] for q in qs}
            for p in ps:
                assert sum(1 for q in qs if p in overlaps[q]) <= 2
            for q, neighbours in overlaps.items():
                assert f(q[2]) <= sum(f(p[2]) for p in neighbours) + EPS
