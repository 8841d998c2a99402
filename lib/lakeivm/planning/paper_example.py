"""The paper's motivating example and arrival streams, for ``lakeivm bench planner`` (paper §1, §5).

R is indexed on the join attribute and S is not: a batch of R's changes scans S, which batching
amortizes, while S's changes are index lookups with nothing to batch. ``PAPER_COSTS`` are linear
costs consistent with the operating points the paper states for Figure 1, ``PAPER_DEADLINE`` its C
(docs/design/planner.md#choices-the-paper-leaves-open); one change per table per tick.
"""
from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass

from lakeivm.planning.costs import LinearCost
from lakeivm.planning.plans import Instance, Plan, State
from lakeivm.planning.policies import adapt_plan, naive_plan, online_plan
from lakeivm.planning.search import optimal_lgm_plan

PAPER_COSTS = (LinearCost(0.000107, 0.286), LinearCost(0.00025, 0.0))
PAPER_DEADLINE = 0.35


@dataclass(frozen=True)
class PlannerComparison:
    """NAIVE, ONLINE, ADAPT and A* (OPT^LGM) plans on one instance."""

    instance: Instance
    plans: Mapping[str, Plan]

    @property
    def costs(self) -> dict[str, float]:
        """Total maintenance cost of each plan, the refresh at T included."""
        return {name: float(plan.cost) for name, plan in self.plans.items()}

    def per_change(self) -> dict[str, float]:
        """Cost per change (the paper's ms/modification when costs are seconds)."""
        changes = sum(sum(d) for d in self.instance.arrivals)
        return {name: cost / changes for name, cost in self.costs.items()}

    def backlog(self, name: str) -> list[float]:
        """Predicted refresh cost f(s_{t+}) of the post-action backlog at each tick (<= C before T)."""
        _, post = self.plans[name].states()
        return [float(self.instance.cost(s)) for s in post]

    def check_invariants(self) -> None:
        """Every plan is valid and none beats A* when costs are linear (Theorem 2: OPT^LGM = OPT)."""
        for plan in self.plans.values():
            plan.check_invariants()
        best = self.costs["A*"]
        assert all(cost >= best - 1e-9 * max(1.0, best) for cost in self.costs.values())


def compare_planners(instance: Instance, estimated_horizon: int, window: int = 20) -> PlannerComparison:
    """Plan one instance four ways; ADAPT plans [0, T_0] with A* and repeats it (paper §4.2)."""
    plans = {
        "NAIVE": naive_plan(instance),
        "ONLINE": online_plan(instance, window),
        "ADAPT": adapt_plan(instance, estimated_horizon),
        "A*": optimal_lgm_plan(instance),
    }
    return PlannerComparison(instance, plans)


def simulate_paper_example(
    horizon: int = 1000,
    estimated_horizon: int = 500,
    arrivals: tuple[State, ...] | None = None,
    deadline: float = PAPER_DEADLINE,
) -> PlannerComparison:
    """The §1 example with ``PAPER_COSTS``; one change per table per tick unless given."""
    stream = arrivals if arrivals is not None else tuple((1, 1) for _ in range(horizon + 1))
    instance = Instance(PAPER_COSTS, stream, deadline, ("R", "S"))
    return compare_planners(instance, estimated_horizon)


def paper_arrivals(horizon: int, p: float, sigma: float, n: int = 2, seed: int = 0) -> tuple[State, ...]:
    """Figure 7 streams: per table and tick, with probability p, ceil(X) changes, X ~ N(1, sigma^2) | X > 0.

    The paper's "[X_t]" is read as ceil so a change tick has >= 1 change; drawn per table
    (docs/design/planner.md#choices-the-paper-leaves-open).
    Slow/fast streams use p = 0.5/0.9, stable/unstable sigma = 1/5.
    """
    rng = random.Random(seed)

    def draw() -> int:
        if rng.random() >= p:
            return 0
        x = rng.gauss(1.0, sigma)
        while x <= 0:
            x = rng.gauss(1.0, sigma)
        return math.ceil(x)

    return tuple(tuple(draw() for _ in range(n)) for _ in range(horizon + 1))
