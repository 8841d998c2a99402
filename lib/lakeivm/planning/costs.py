"""Per-(view, table) cost models f(k) = a*k + b, fitted robustly from measured runs (paper §3.3).

A cost function maps a batch size k (changes of one source table) to the seconds its
maintenance takes. The planner needs it monotone and subadditive with f(0) = 0 (paper §2);
an affine model with a >= 0 and b >= 0 is both, so the fit clamps to that region. Why clamped, and
why refitted from recent runs: docs/design/planner.md#choices-the-paper-leaves-open and
docs/design/planner.md#from-the-model-to-a-pipeline.
Any callable ``int -> float`` is a cost function; one with ``linear = True`` promises the affine
shape, which lets the planner skip weighing NAIVE's symmetric flush (for linear costs
OPT^LGM = OPT <= NAIVE, paper Theorem 2).

The engine reads a change range in one of two ways (the lake's ``limits.small_delta_rows``): a
small one in this process (delta-rs + Arrow), a larger one with Spark. Their costs are two lines
with a step between them, which one line fits badly: drawn across the step, it under-predicts the batches just
above it. Given that boundary, a fit is a ``TwoPathCost`` once the large path has been measured: a
line per path.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from lakeivm.errors import InvalidInput

CostFunction = Callable[[int], float]

MIN_OBSERVATIONS = 3


def is_linear(cost: CostFunction) -> bool:
    """Whether a cost function declares itself affine (a*k + b for k >= 1, f(0) = 0)."""
    return bool(getattr(cost, "linear", False))


@dataclass(frozen=True)
class LinearCost:
    """f(k) = a*k + b for k >= 1 and f(0) = 0 (paper §3.3); O(1) per evaluation."""

    a: float
    b: float
    linear: bool = True

    def __post_init__(self) -> None:
        self.check_invariants()

    def __call__(self, k: float) -> float:
        return self.a * k + self.b if k > 0 else 0.0

    def check_invariants(self) -> None:
        """a, b finite and >= 0, so f is monotone and subadditive (paper §2, §3.3)."""
        if not (math.isfinite(self.a) and math.isfinite(self.b) and self.a >= 0 and self.b >= 0):
            raise InvalidInput(
                f"linear cost needs finite a >= 0 and b >= 0, got a={self.a}, b={self.b}; "
                "clamp the fit (fit_cost_model does) before planning"
            )


@dataclass(frozen=True)
class CostModel:
    """A fitted f(k) = a*k + b for one (view, table), with the prior it falls back to.

    ``observations`` counts the runs the fit used; below ``min_observations`` the model predicts
    with the prior. Evaluating costs O(1); fitting (``fit_cost_model``) costs O(m^2) for m runs
    (Theil-Sen over all pairs).
    """

    a: float
    b: float
    prior: LinearCost
    observations: int = 0
    min_observations: int = MIN_OBSERVATIONS
    linear: bool = True

    def __post_init__(self) -> None:
        self.check_invariants()

    @property
    def fitted(self) -> bool:
        """Whether enough runs exist for the fit to replace the prior."""
        return self.observations >= self.min_observations

    def predict(self, k: float) -> float:
        """Predicted seconds for a batch of k changes; f(0) = 0 (no job, no fixed cost)."""
        if k < 0:
            raise InvalidInput(f"batch size must be >= 0, got {k}")
        if k == 0:
            return 0.0
        if not self.fitted:
            return self.prior(k)
        return self.a * k + self.b

    def __call__(self, k: float) -> float:
        return self.predict(k)

    def check_invariants(self) -> None:
        """Both the fit and the prior are monotone and subadditive: finite, a >= 0, b >= 0."""
        LinearCost(self.a, self.b)
        self.prior.check_invariants()
        assert self.observations >= 0 and self.min_observations >= 1


@dataclass(frozen=True)
class TwoPathCost:
    """f(k) = small(k) for k <= ``threshold`` changes, else large(k), never below small(threshold).

    Monotone, but not subadditive (two batches under the step can cost less than one above it), so
    not ``linear``: the planner weighs NAIVE's symmetric flush too
    (docs/design/planner.md#choices-the-paper-leaves-open). O(1) per evaluation.
    """

    small: CostFunction
    large: CostFunction
    threshold: int
    linear: bool = False

    def __call__(self, k: float) -> float:
        if k <= self.threshold:
            return self.small(k)
        return max(self.large(k), self.small(self.threshold))


class Calibration(NamedTuple):
    """A calibrated cost as ``_system/costs`` stores it: the line of the small path (``a``, ``b``
    from ``samples`` batches) and, once measured, the line of batches above ``above`` changes."""

    a: float
    b: float
    samples: int
    above: int | None = None
    a_large: float = 0.0
    b_large: float = 0.0
    samples_large: int = 0

    @classmethod
    def of(cls, model: CostFunction) -> Calibration:
        """``model`` as stored; a large path it has not measured (the prior, stood in) is left out."""
        if isinstance(model, TwoPathCost) and getattr(model.large, "observations", 1) == 0:
            model = model.small
        if isinstance(model, TwoPathCost):
            small, large = model.small, model.large
            return cls(small.a, small.b, small.observations, model.threshold, large.a, large.b, large.observations)
        return cls(model.a, model.b, getattr(model, "observations", 0))

    def cost(self) -> CostFunction:
        small = LinearCost(self.a, self.b)
        return small if self.above is None else TwoPathCost(small, LinearCost(self.a_large, self.b_large), self.above)


def fit_cost_model(
    observations: Sequence[tuple[float, float]],
    prior: CostFunction,
    min_observations: int = MIN_OBSERVATIONS,
    threshold: int | None = None,
) -> CostFunction:
    """The cost of one table's batches from (rows, seconds) runs: with a ``threshold`` (the engine's
    two read paths) and the large path measured -- by the prior (a calibrated ``TwoPathCost``) or by
    ``min_observations`` runs above it -- a ``TwoPathCost`` fitted per path; with only the small path
    fitted, a ``TwoPathCost`` whose large path is the prior; else one line (``fit_line``)."""
    small_prior, large_prior = (prior.small, prior.large) if isinstance(prior, TwoPathCost) else (prior, None)
    if threshold is None:
        return fit_line(observations, small_prior, min_observations)
    large = [(k, s) for k, s in observations if k > threshold]
    small = [(k, s) for k, s in observations if k <= threshold]
    if large_prior is None and not large and len([k for k, _ in small if k > 0]) >= min_observations:
        # only the small path measured: the large one is the prior until it is (a line drawn from the
        # small path's runs alone misses the step: 0.2 s on 20,000 rows, 1.4-4.7 s on 59,000 by Spark)
        return TwoPathCost(fit_line(small, small_prior, min_observations), fit_line([], small_prior, min_observations), threshold)
    if large_prior is None and len(large) < min_observations:
        return fit_line(observations, small_prior, min_observations)
    return TwoPathCost(fit_line(small, small_prior, min_observations), fit_line(large, large_prior or small_prior, min_observations),
                       threshold)


def fit_line(
    observations: Sequence[tuple[float, float]],
    prior: LinearCost,
    min_observations: int = MIN_OBSERVATIONS,
) -> CostModel:
    """Fit f(k) = a*k + b to (rows, seconds) runs, robust to outliers, clamped to a, b >= 0.

    Every maintenance action is one (k, seconds) sample (docs/design/planner.md#its-inputs-from-the-log).
    Runs with k = 0 say nothing about f (the planner never charges f(0)) and are skipped. The
    estimator is Theil-Sen (median of pairwise slopes, intercept the median residual), which
    tolerates up to ~29% outliers.
    A negative slope is refitted as a constant (a = 0, b = median); a negative intercept as a line
    through the origin (a = median of seconds/rows). With fewer than two distinct batch sizes the
    slope cannot be estimated: the prior's slope is kept, unless it would put the line above the runs
    at their own size (b clamped to 0: the default prior's guessed 1e-4 s a row predicted 5.9 s for
    a view that took 0.2 s on 20,000 rows, and auto recomputed it in full at ten times the cost);
    then the line through the origin and the runs, and b is fitted. Costs O(m^2).
    """
    points = [(float(k), float(s)) for k, s in observations]
    for k, s in points:
        if not (math.isfinite(k) and math.isfinite(s)) or k < 0 or s < 0:
            raise InvalidInput(
                f"cost observation (rows={k}, seconds={s}) must be finite and >= 0; "
                "drop failed or unmeasured runs before fitting"
            )
    points = [(k, s) for k, s in points if k > 0]
    if len(points) < min_observations:
        return CostModel(prior.a, prior.b, prior, len(points), min_observations)
    x = np.array([k for k, _ in points])
    y = np.array([s for _, s in points])
    a, b = _robust_line(x, y, prior.a)
    return CostModel(a, b, prior, len(points), min_observations)


def _robust_line(x: np.ndarray, y: np.ndarray, prior_slope: float) -> tuple[float, float]:
    """Theil-Sen line clamped to a >= 0, b >= 0 (see fit_cost_model)."""
    if len(np.unique(x)) < 2:  # the prior's slope, at most the line through the origin and the runs (b >= 0)
        slope = min(prior_slope, float(np.median(y / x)))
        return slope, max(0.0, float(np.median(y - slope * x)))
    slope, intercept = _theil_sen(x, y)
    if slope < 0:
        return 0.0, float(np.median(y))
    if intercept < 0:
        return float(np.median(y / x)), 0.0
    return float(slope), float(intercept)


def _theil_sen(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """The Theil-Sen line: the median of the pairwise slopes, intercept median(y) - slope·median(x)
    (as ``scipy.stats.theilslopes``; written out because importing scipy.stats costs seconds per run)."""
    i, j = np.triu_indices(len(x), k=1)
    distinct = x[i] != x[j]
    slope = float(np.median((y[j] - y[i])[distinct] / (x[j] - x[i])[distinct]))
    return slope, float(np.median(y) - slope * np.median(x))
