"""The paper's §1 example (Figure 1) with linear costs fitted to it, and the arrival streams of §5
(Figure 7); the fit: ``docs/design/planner.md#choices-the-paper-leaves-open``."""
from __future__ import annotations

import pytest

from lakeivm.planning.costs import LinearCost
from lakeivm.planning.paper_example import PAPER_COSTS, paper_arrivals, simulate_paper_example
from lakeivm.planning.plans import Instance
from lakeivm.planning.policies import naive_plan


def test_fitted_costs_reproduce_the_papers_operating_points() -> None:
    r, s = PAPER_COSTS
    assert r(180) + s(180) == pytest.approx(0.35, abs=0.005)
    assert r(600) == pytest.approx(0.35, abs=0.005)


@pytest.mark.parametrize("horizon", [1000, 3000])
def test_asymmetric_plans_cost_about_half_of_symmetric(horizon: int) -> None:
    result = simulate_paper_example(horizon)
    result.check_invariants()
    per_change = result.per_change()
    assert 0.00098 <= per_change["NAIVE"] <= 0.00105
    assert 0.00046 <= per_change["A*"] <= 0.00054
    assert 0.44 <= result.costs["A*"] / result.costs["NAIVE"] <= 0.56
    for name in ("ONLINE", "ADAPT"):
        assert result.costs[name] <= 1.1 * result.costs["A*"]
    assert all(cost <= 0.35 + 1e-12 for cost in result.backlog("ONLINE")[:-1])
    assert result.backlog("NAIVE")[-1] == 0.0


@pytest.mark.parametrize("p, sigma", [(0.5, 1.0), (0.5, 5.0), (0.9, 1.0), (0.9, 5.0)])
def test_non_uniform_streams_keep_every_plan_valid_and_naive_worst(p: float, sigma: float) -> None:
    arrivals = paper_arrivals(600, p, sigma, seed=3)
    result = simulate_paper_example(arrivals=arrivals, estimated_horizon=200)
    result.check_invariants()
    assert max(result.costs, key=result.costs.get) == "NAIVE"


def test_arrival_generator_matches_its_parameters() -> None:
    stream = paper_arrivals(4000, 0.5, 1.0, n=2, seed=1)
    ticks = [d for step in stream for d in step]
    busy = [d for d in ticks if d]
    assert len(busy) / len(ticks) == pytest.approx(0.5, abs=0.03)
    assert min(busy) >= 1 and paper_arrivals(50, 0.9, 5.0, seed=4) == paper_arrivals(50, 0.9, 5.0, seed=4)


def test_naive_matches_the_closed_form_on_the_symmetric_cycle() -> None:
    """One change per table per tick: NAIVE flushes when f_R(k) + f_S(k) first exceeds C."""
    inst = Instance(PAPER_COSTS, tuple((1, 1) for _ in range(1000)), 0.35)
    r, s = PAPER_COSTS
    k = next(k for k in range(1, 1000) if r(k) + s(k) > 0.35)
    flushes = [t for t, p in enumerate(naive_plan(inst).actions[:-1]) if any(p)]
    assert flushes[0] == k - 1 and all(b - a == k for a, b in zip(flushes, flushes[1:]))
    assert isinstance(r, LinearCost)
