"""Random small planning instances and random valid plans, seeded by the caller.

Cost families the paper's model admits (§2: monotone, subadditive, zero at zero): linear, concave,
and block-shaped like §2's ⌈x/B⌉ disk scan, subadditive but not concave.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass
from fractions import Fraction

from lakeivm.planning.costs import LinearCost
from lakeivm.planning.plans import Instance, Plan, State, add_state, sub_state

FAMILIES = ("linear", "concave", "step")


@dataclass(frozen=True)
class SqrtCost:
    """c0 + c1*sqrt(k) for k >= 1, f(0) = 0: concave, monotone, subadditive."""

    c0: float
    c1: float

    def __call__(self, k: int) -> float:
        return self.c0 + self.c1 * math.sqrt(k) if k > 0 else 0.0


@dataclass(frozen=True)
class BlockCost:
    """ceil(k / block) * weight: subadditive and monotone but not concave (paper §2)."""

    block: int
    weight: float

    def __call__(self, k: int) -> float:
        return math.ceil(k / self.block) * self.weight


@dataclass(frozen=True)
class TightCost:
    """The cost of the example after Theorem 1 (§3.2) that makes its bound tight: (eps*x/2)*C up to
    2/eps, then (1 + eps/2)*C; exact."""

    eps: Fraction
    deadline: Fraction

    def __call__(self, k: int) -> Fraction:
        if k == 0:
            return Fraction(0)
        if k <= 2 / self.eps:
            return self.eps * k / 2 * self.deadline
        return (1 + self.eps / 2) * self.deadline


def random_cost(rng: random.Random, family: str):
    """One monotone subadditive cost function of the named family."""
    if family == "linear":
        return LinearCost(rng.choice([0.5, 1, 2, 3]), rng.choice([0, 1, 2, 5]))
    if family == "concave":
        return SqrtCost(rng.choice([0, 1, 2]), rng.choice([1, 2, 3]))
    return BlockCost(rng.choice([2, 3, 4]), rng.choice([1, 2, 3]))


def random_instance(rng: random.Random, family: str | None = None, n_max: int = 3, t_max: int = 7, d_max: int = 3) -> Instance:
    """n in 1..n_max, T in 1..t_max, d_t[i] in 0..d_max, C in 1..12; mixed families when family is None."""
    n = rng.randint(1, n_max)
    horizon = rng.randint(1, t_max)
    costs = tuple(random_cost(rng, family or rng.choice(FAMILIES)) for _ in range(n))
    arrivals = tuple(tuple(rng.randint(0, d_max) for _ in range(n)) for _ in range(horizon + 1))
    return Instance(costs, arrivals, rng.randint(1, 12))


def random_valid_plan(instance: Instance, rng: random.Random) -> Plan:
    """At each t < T a random p <= s_t, redrawn until the backlog is not full; flush all at T: the
    arbitrary valid plans Lemmas 1-6 (§3) transform."""
    post: State = (0,) * instance.n
    actions: list[State] = []
    for t, d in enumerate(instance.arrivals):
        pre = add_state(post, d)
        if t == instance.horizon:
            p = pre
        else:
            p = tuple(rng.randint(0, k) if rng.random() < 0.5 else 0 for k in pre)
            while instance.is_full(sub_state(pre, p)):
                p = tuple(rng.randint(k, s) for k, s in zip(p, pre))
        actions.append(p)
        post = sub_state(pre, p)
    return Plan(instance, tuple(actions), tuple("random" for _ in actions), "random")


def tight_instance(eps: Fraction, m: int) -> Instance:
    """The tight instance after Theorem 1 (§3.2): n = 1, C = 1, 2/eps + 1 arrivals at t = 0..2m-1, T = 2m - 1."""
    deadline = Fraction(1)
    per_tick = int(2 / eps) + 1
    return Instance((TightCost(eps, deadline),), tuple((per_tick,) for _ in range(2 * m)), deadline)


def random_decide_case(rng: random.Random, families: tuple[str, ...]):
    """One view's tick for ``decide``: (pending, costs, deadline, expected arrivals, headroom, forced)
    over 1-4 tables, each table's cost of one of ``families``."""
    names = ("customer", "lineitem", "orders", "part")[:rng.randint(1, 4)]
    costs = {t: random_cost(rng, rng.choice(families)) for t in names}
    pending = {t: rng.randint(0, 6) for t in names}
    expected = {t: rng.choice([0, 0.5, 1, 2]) for t in names}
    forced = frozenset(t for t in names if rng.random() < 0.15)
    return pending, costs, rng.randint(5, 40), expected, rng.choice([0, 1, 3]), forced
