"""Cost models: robust fit, clamping to a monotone subadditive line, prior until enough runs."""
from __future__ import annotations

import random

import pytest

from lakeivm.errors import InvalidInput
from lakeivm.planning.costs import CostModel, LinearCost, fit_cost_model, is_linear

PRIOR = LinearCost(0.001, 5.0)


def _runs(a: float, b: float, sizes: list[int], noise: float, seed: int) -> list[tuple[int, float]]:
    rng = random.Random(seed)
    return [(k, a * k + b + rng.uniform(-noise, noise)) for k in sizes]


def test_recovers_the_line_from_noisy_runs() -> None:
    model = fit_cost_model(_runs(0.002, 3.0, [2**j for j in range(12)] * 3, 0.05, seed=1), PRIOR)
    assert model.fitted
    assert model.a == pytest.approx(0.002, rel=0.05)
    assert model.b == pytest.approx(3.0, abs=0.1)


def test_outliers_do_not_move_the_fit() -> None:
    runs = _runs(0.002, 3.0, [2**j for j in range(12)] * 2, 0.0, seed=2)
    clean = fit_cost_model(runs, PRIOR)
    dirty = fit_cost_model(runs + [(64, 500.0), (128, 900.0), (4, 300.0)], PRIOR)
    assert dirty.a == pytest.approx(clean.a, rel=0.05)
    assert dirty.b == pytest.approx(clean.b, abs=0.2)
    least_squares_slope = _least_squares_slope(runs + [(64, 500.0), (128, 900.0), (4, 300.0)])
    assert abs(least_squares_slope - clean.a) > 10 * abs(dirty.a - clean.a)


def _least_squares_slope(runs: list[tuple[int, float]]) -> float:
    xs = [k for k, _ in runs]
    ys = [s for _, s in runs]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def test_decreasing_runs_clamp_to_a_constant() -> None:
    model = fit_cost_model([(1, 9.0), (10, 8.0), (100, 7.0), (1000, 6.0)], PRIOR)
    assert model.a == 0.0 and model.b == pytest.approx(7.5)
    _assert_monotone_subadditive(model)


def test_negative_intercept_clamps_through_the_origin() -> None:
    model = fit_cost_model([(10, 0.5), (100, 9.5), (1000, 99.5), (10000, 999.5)], PRIOR)
    assert model.b == 0.0 and model.a > 0
    _assert_monotone_subadditive(model)


def test_random_fits_are_monotone_and_subadditive() -> None:
    rng = random.Random(7)
    for _ in range(200):
        runs = [(rng.randint(1, 1000), rng.uniform(0, 50)) for _ in range(rng.randint(0, 12))]
        model = fit_cost_model(runs, PRIOR)
        model.check_invariants()
        _assert_monotone_subadditive(model)


def _assert_monotone_subadditive(model: CostModel) -> None:
    assert model.predict(0) == 0.0
    for x in range(0, 60, 7):
        assert model.predict(x + 1) >= model.predict(x)
        for y in range(0, 60, 11):
            assert model.predict(x + y) <= model.predict(x) + model.predict(y) + 1e-9


def test_prior_until_enough_runs() -> None:
    runs = [(100, 1.0), (200, 2.0)]
    model = fit_cost_model(runs, PRIOR)
    assert not model.fitted and model.observations == 2
    assert model.predict(100) == PRIOR(100)
    model = fit_cost_model(runs + [(400, 4.0)], PRIOR)
    assert model.fitted and model.predict(300) == pytest.approx(3.0)


def test_zero_row_runs_are_ignored_and_f0_is_zero() -> None:
    model = fit_cost_model([(0, 4.0), (0, 4.0), (0, 4.0), (10, 1.0)], PRIOR)
    assert model.observations == 1 and not model.fitted
    assert model.predict(0) == 0.0 and is_linear(model)


def test_one_batch_size_keeps_the_prior_slope() -> None:
    model = fit_cost_model([(50, 6.0), (50, 6.2), (50, 5.8)], PRIOR)
    assert model.a == PRIOR.a and model.b == pytest.approx(6.0 - PRIOR.a * 50)


@pytest.mark.parametrize("run", [(-1, 1.0), (1, -1.0), (1, float("nan"))])
def test_bad_observations_are_rejected(run: tuple[float, float]) -> None:
    with pytest.raises(InvalidInput, match="observation"):
        fit_cost_model([run], PRIOR)


def test_negative_coefficients_are_rejected() -> None:
    with pytest.raises(InvalidInput, match="a >= 0"):
        LinearCost(-1.0, 0.0)


def test_theil_sen_equals_scipy() -> None:
    import numpy as np
    from scipy import stats

    from lakeivm.planning.costs import _theil_sen

    rng = np.random.default_rng(0)
    for n in (2, 3, 5, 17, 50):
        x = rng.integers(1, 20, n).astype(float)
        x[0], x[-1] = 1.0, 30.0  # at least two distinct sizes, as fit_cost_model guarantees
        y = rng.random(n) * 10
        slope, intercept, _, _ = stats.theilslopes(y, x)
        assert np.allclose(_theil_sen(x, y), (slope, intercept))
