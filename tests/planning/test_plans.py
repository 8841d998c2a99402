"""Replay, validity predicates, NAIVE and the readable plan text (paper §2)."""
from __future__ import annotations

import random

import pytest

from lakeivm.errors import InvalidInput
from lakeivm.planning.costs import LinearCost
from lakeivm.planning.plans import Instance, Plan, is_greedy, is_lazy, is_lgm, violations
from lakeivm.planning.policies import naive_plan
from tests.planning.instances import random_instance

TWO = Instance((LinearCost(1, 0), LinearCost(1, 0)), ((1, 1), (1, 1), (1, 1)), 3, ("R", "S"))


def test_states_follow_the_recurrence() -> None:
    plan = Plan(TWO, ((0, 0), (2, 0), (1, 3)), ("", "forced", "refresh"), "hand")
    pre, post = plan.states()
    assert pre == [(1, 1), (2, 2), (1, 3)]
    assert post == [(1, 1), (0, 2), (0, 0)]
    plan.check_invariants()
    assert plan.cost == 2 + 4


def test_violations_name_the_problem() -> None:
    assert any("> C" in v for v in violations(TWO, ((0, 0), (0, 0), (3, 3))))
    assert any("outside" in v for v in violations(TWO, ((2, 0), (0, 0), (1, 3))))
    assert any("leaves" in v for v in violations(TWO, ((0, 0), (2, 2), (0, 1))))
    with pytest.raises(InvalidInput, match="actions"):
        violations(TWO, ((0, 0),))


def test_untouched_tables_cost_nothing() -> None:
    inst = Instance((LinearCost(1, 100), LinearCost(1, 0)), ((0, 1),), 1000)
    assert inst.cost((0, 5)) == 5


def test_naive_flushes_everything_when_full_and_is_lazy_greedy() -> None:
    plan = naive_plan(TWO)
    assert plan.actions == ((0, 0), (2, 2), (1, 1))
    assert is_lazy(TWO, plan.actions) and is_greedy(TWO, plan.actions)
    assert not is_lgm(TWO, plan.actions)


def test_naive_is_always_valid() -> None:
    rng = random.Random(11)
    for _ in range(300):
        naive_plan(random_instance(rng)).check_invariants()


def test_plan_prints_each_action_with_counts_and_reason() -> None:
    text = str(naive_plan(TWO))
    assert text.splitlines()[0].startswith("NAIVE: cost 6")
    assert "t=1: apply R x2, S x2" in text and "symmetric flush" in text
    assert "t=2: apply R x1, S x1" in text and "refresh" in text
    assert "t=0" not in text


def test_malformed_instances_are_rejected() -> None:
    with pytest.raises(InvalidInput):
        Instance((LinearCost(1, 0),), ((1, 2),), 1)
    with pytest.raises(InvalidInput):
        Instance((LinearCost(1, 0),), ((-1,),), 1)
    with pytest.raises(InvalidInput):
        Instance((LinearCost(1, 0),), ((1,),), -1)
