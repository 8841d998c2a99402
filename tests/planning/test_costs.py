"""Cost models: robust fit, clamping to a monotone subadditive line, prior until enough runs."""
from __future__ import annotations

import random

import pytest

from lakeivm.errors import InvalidInput
from lakeivm.planning.costs import Calibration, CostModel, LinearCost, TwoPathCost, fit_cost_model, is_linear

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


def test_one_batch_size_cheaper_than_the_prior_slope_says_is_met_by_the_line() -> None:
    """A prior slope steeper than the runs themselves (0.2 s for 20,000 rows against 1e-4 s a row)
    would predict above the measured seconds at the measured size: the line goes through them."""
    model = fit_cost_model([(20_000, 0.2)], LinearCost(1e-4, 2.0), min_observations=1)
    assert model.fitted and model.predict(20_000) == pytest.approx(0.2)
    assert model.predict(60_000) == pytest.approx(0.6)  # proportional, not 1e-4 * 60,000 = 6 s
    _assert_monotone_subadditive(model)


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


# The engine's two read paths (limits.small_delta_rows): F-IVM at TPC-H SF 1, partsupp batches timed
# by `lakeivm calibrate` (2026-11-29): flat ~0.3 s up to 16k change rows, 1.4-1.6 s from 32k.
STEP = 20_000
MEASURED = [(2 ** j, 0.30 + 0.01 * (j % 3)) for j in range(15)] + [(32_768, 1.43), (65_536, 1.60), (40_000, 1.50)]


def test_a_line_per_read_path_once_the_large_path_is_measured() -> None:
    one_line = fit_cost_model(MEASURED, PRIOR)
    two = fit_cost_model(MEASURED, PRIOR, threshold=STEP)
    assert isinstance(two, TwoPathCost) and not is_linear(two)
    assert one_line(30_000) < 0.6  # one line misses the step by ~1 s
    assert two(16_384) == pytest.approx(0.31, abs=0.02) and two(30_000) == pytest.approx(1.45, abs=0.1)
    assert two(STEP) <= two(STEP + 1) and two(0) == 0.0  # monotone across the step
    assert fit_cost_model(MEASURED[:-2], PRIOR, threshold=STEP) == fit_cost_model(MEASURED[:-2], PRIOR)  # one run above: one line


def test_a_calibrated_two_path_prior_holds_until_runs_replace_each_path() -> None:
    calibrated = Calibration(1e-6, 0.3, 15, STEP, 5e-6, 1.3, 2)
    prior = calibrated.cost()
    fitted = fit_cost_model(MEASURED, PRIOR, min_observations=2, threshold=STEP)
    stored = Calibration.of(fitted)  # as _system/costs keeps it
    assert stored.above == STEP and stored.samples == 15 and stored.samples_large == 3
    assert all(stored.cost()(k) == pytest.approx(fitted(k)) for k in (1, 5000, STEP, STEP + 1, 50_000))
    unfitted = fit_cost_model([], prior, threshold=STEP)
    assert unfitted(10_000) == pytest.approx(0.31) and unfitted(30_000) == pytest.approx(1.3 + 0.15)
    small_runs = fit_cost_model([(1000, 0.5), (2000, 0.5), (4000, 0.5)], prior, threshold=STEP)
    assert small_runs(4000) == pytest.approx(0.5) and small_runs(30_000) == pytest.approx(1.45)  # the large path still the prior's
    assert Calibration(2e-6, 0.4, 5).cost() == LinearCost(2e-6, 0.4)
