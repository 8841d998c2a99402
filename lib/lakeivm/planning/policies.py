"""Tick-by-tick planning policies: NAIVE (symmetric), ONLINE (paper §4.3) and ADAPT (paper §4.2).

Each policy sees only the current tick; ``plans.simulate`` runs it over an instance and adds the
refresh at T. All three give valid plans: they act whenever the pre-action backlog is full, and
every action they take leaves a backlog that is not full (the tests check it on random instances).
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence

from lakeivm.planning.lgm import FullPredicate, greedy_action, minimal_greedy_sets
from lakeivm.planning.plans import Instance, Plan, State, simulate, sub_state
from lakeivm.planning.search import optimal_lgm_plan

TTF_CAP = 1_000_000


class NaivePolicy:
    """Symmetric deferred maintenance: flush every table when the backlog is full (paper §2.1); O(n)."""

    name = "NAIVE"

    def __init__(self, instance: Instance) -> None:
        self.instance = instance

    def act(self, t: int, arrived: State, pending: State) -> tuple[State, str]:
        """Flush all when f(s_t) > C, else nothing."""
        if not self.instance.is_full(pending):
            return (0,) * len(pending), ""
        return pending, f"forced: backlog {float(self.instance.cost(pending)):.6g} > C; symmetric flush of all tables"


def time_to_full(is_full: FullPredicate, state: State, rates: Sequence[float], cap: int = TTF_CAP) -> int:
    """TIMETOFULL (paper §4.3): min k >= 1 with is_full(s + round(k*v)), capped when the rates are 0
    (docs/design/planner.md#choices-the-paper-leaves-open).

    Fullness is monotone in k (costs monotone, round(k*v) nondecreasing), so exponential then
    binary search finds k with O(log cap) cost evaluations.
    """

    def full_after(k: int) -> bool:
        return is_full(tuple(s + round(k * v) for s, v in zip(state, rates)))

    high = 1
    while not full_after(high):
        if high >= cap:
            return cap
        high = min(2 * high, cap)
    low = high // 2
    while high - low > 1:
        middle = (low + high) // 2
        if full_after(middle):
            high = middle
        else:
            low = middle
    return max(high, 1)


def choose_online(
    is_full: FullPredicate,
    cost: Callable[[State], float],
    pending: State,
    rates: Sequence[float],
    spent: float,
    ticks: int,
    candidates: Sequence[frozenset[int]],
) -> tuple[frozenset[int], float]:
    """argmin over candidate sets of H(q) = (F_t + f(q)) / (t + TTF(s - q)) (paper §4.3).

    Ties go to the cheaper action, then to the earlier candidate, so the choice is deterministic.
    Returns the set and its H. Costs O(|candidates| * log cap) cost evaluations.
    """
    best: tuple[float, float, int] | None = None
    chosen = candidates[0]
    for index, tables in enumerate(candidates):
        q = greedy_action(pending, tables)
        q_cost = cost(q)
        h = (spent + q_cost) / (ticks + time_to_full(is_full, sub_state(pending, q), rates))
        key = (h, q_cost, index)
        if best is None or key < best:
            best, chosen = key, tables
    assert best is not None
    return chosen, best[0]


class OnlinePolicy:
    """The LGM ONLINE heuristic (paper §4.3) with a sliding-window arrival-rate estimate.

    State: the tick count t and spent cost F_t since the last refresh (the epoch start,
    docs/design/planner.md#choices-the-paper-leaves-open) and the last ``window`` arrival vectors. When s_t is full, apply the minimal greedy action of
    least H. Costs O(2^n * n * log cap) per forced tick, O(n) otherwise.
    """

    name = "ONLINE"

    def __init__(self, instance: Instance, window: int = 20) -> None:
        self.instance = instance
        self.recent: deque[State] = deque(maxlen=window)
        self.spent = 0.0

    def rates(self) -> list[float]:
        """Mean arrivals per tick over the window."""
        n = self.instance.n
        return [sum(d[i] for d in self.recent) / len(self.recent) for i in range(n)] if self.recent else [0.0] * n

    def act(self, t: int, arrived: State, pending: State) -> tuple[State, str]:
        """Lazy: nothing unless f(s_t) > C; then the minimal greedy action of least H."""
        self.recent.append(arrived)
        inst = self.instance
        if not inst.is_full(pending):
            return (0,) * inst.n, ""
        candidates = minimal_greedy_sets(inst.is_full, pending)
        tables, h = choose_online(inst.is_full, inst.cost, pending, self.rates(), self.spent, t, candidates)
        q = greedy_action(pending, tables)
        self.spent += inst.cost(q)
        return q, (
            f"forced: backlog {float(inst.cost(pending)):.6g} > C; ONLINE picks the minimal set of least "
            f"amortized cost H={float(h):.6g} among {len(candidates)}"
        )


class AdaptPolicy:
    """ADAPT (paper §4.2): repeat the optimal LGM schedule for an estimated refresh time T_0.

    ``schedule[tau]`` is the set of tables the plan for [0, T_0] empties at tau, with a full flush
    at tau = T_0, repeated with period T_0 + 1
    (docs/design/planner.md#choices-the-paper-leaves-open). If reality leaves the backlog full
    after the scheduled tables, the fallback applies the cheapest minimal greedy action, so the
    plan stays valid. Costs O(n) per tick plus the fallback's O(2^n * n).
    """

    name = "ADAPT"

    def __init__(self, instance: Instance, schedule: Sequence[frozenset[int]]) -> None:
        self.instance = instance
        self.schedule = tuple(schedule)

    @classmethod
    def from_plan(cls, instance: Instance, plan: Plan) -> AdaptPolicy:
        """Execute ``plan`` (for [0, T_0], on a forecast) as table sets; its last tick flushes all."""
        sets = [frozenset(i for i, k in enumerate(p) if k) for p in plan.actions[:-1]]
        return cls(instance, [*sets, frozenset(range(instance.n))])

    def act(self, t: int, arrived: State, pending: State) -> tuple[State, str]:
        """Empty the scheduled tables of tick t mod (T_0 + 1), then fall back if still full."""
        inst = self.instance
        tau = t % len(self.schedule)
        scheduled = frozenset(i for i in self.schedule[tau] if pending[i] > 0)
        left = sub_state(pending, greedy_action(pending, scheduled))
        why = f"scheduled at tau={tau} of the T_0={len(self.schedule) - 1} plan" if scheduled else ""
        if inst.is_full(left):
            extra = min(minimal_greedy_sets(inst.is_full, left), key=lambda s: (inst.cost(greedy_action(left, s)), sorted(s)))
            scheduled |= extra
            why = (why + "; " if why else "") + "fallback: forecast diverged, cheapest minimal action"
        return greedy_action(pending, scheduled), why


def naive_plan(instance: Instance) -> Plan:
    """The NAIVE (symmetric) plan of an instance."""
    return simulate(instance, NaivePolicy(instance))


def online_plan(instance: Instance, window: int = 20) -> Plan:
    """The ONLINE plan of an instance, rates estimated over ``window`` ticks."""
    return simulate(instance, OnlinePolicy(instance, window))


def adapt_plan(instance: Instance, estimated_horizon: int, forecast: Instance | None = None) -> Plan:
    """ADAPT (paper §4.2): the optimal LGM plan for [0, T_0] on the forecast, repeated over the instance.

    ``forecast`` defaults to the instance itself (the paper's periodic, known arrivals); its first
    T_0 + 1 ticks are planned with A*. Theorem 4 bounds the cost for linear costs.
    """
    source = forecast if forecast is not None else instance
    schedule = optimal_lgm_plan(source.prefix(min(estimated_horizon, source.horizon)))
    return simulate(instance, AdaptPolicy.from_plan(instance, schedule))


def best_plan(instance: Instance) -> Plan:
    """The cheaper of OPT^LGM and NAIVE: LGM can lose to NAIVE for non-linear costs.

    Theorem 1 bounds OPT^LGM by 2*OPT, not by NAIVE (docs/design/planner.md#choices-the-paper-leaves-open).
    """
    lgm = optimal_lgm_plan(instance)
    naive = naive_plan(instance)
    return naive if naive.cost < lgm.cost else lgm
