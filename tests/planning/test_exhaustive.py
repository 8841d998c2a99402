"""The DP optimum against enumeration of every plan on tiny instances.

The exact optimum the tests compare the planners with (``docs/design/planner.md#choices-the-paper-leaves-open``).
"""
from __future__ import annotations

import itertools
import math
import random

from lakeivm.planning.exhaustive import optimal_plan
from lakeivm.planning.plans import Instance, State, add_state, sub_state
from tests.planning.instances import random_instance


def _every_plan_cost(instance: Instance) -> float:
    """Minimum cost over all valid action sequences, by plain recursion."""

    def best(t: int, post: State) -> float:
        pre = add_state(post, instance.arrivals[t])
        if t == instance.horizon:
            return instance.cost(pre)
        result = math.inf
        for p in itertools.product(*(range(k + 1) for k in pre)):
            after = sub_state(pre, p)
            if not instance.is_full(after):
                result = min(result, instance.cost(p) + best(t + 1, after))
        return result

    return best(0, (0,) * instance.n)


def test_dp_matches_enumeration() -> None:
    rng = random.Random(3)
    for _ in range(150):
        inst = random_instance(rng, n_max=2, t_max=4, d_max=2)
        plan = optimal_plan(inst)
        plan.check_invariants()
        assert math.isclose(plan.cost, _every_plan_cost(inst), rel_tol=1e-9, abs_tol=1e-9)
