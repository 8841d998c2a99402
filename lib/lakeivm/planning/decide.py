"""The per-tick decision the engine takes: which source tables to apply now (paper §4.3).

A scheduled tick runs the LGM ONLINE rule on the live backlog. The constraint is the paper's (§2)
in pipeline form (docs/design/planner.md#from-the-model-to-a-pipeline): after this tick's action, a
refresh that also has to process the arrivals expected before the next tick, plus
``headroom_seconds`` (job start-up, an in-flight action), must fit the deadline:

    sum_i f_i(pending_i - applied_i + ceil(expected_i)) + headroom <= deadline.

Tables whose changes are about to outlive retention (``max_age_exceeded``) are always applied: the
paper bounds the backlog's size, not its age. For non-linear costs the symmetric flush of NAIVE
competes with the minimal sets under the same ONLINE score, since LGM can lose to it there
(docs/design/planner.md#choices-the-paper-leaves-open).

``run_seconds`` is what any run that applies something pays once, whatever it applies (on Spark:
writing the state tables and the result, job latency). The per-table f_i are then marginal costs,
costs are not additive across runs (one joint run is cheaper than two), and so the symmetric flush
competes too, every action's ONLINE score counting the run's shared seconds.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from lakeivm.errors import InvalidInput
from lakeivm.planning.costs import CostFunction, is_linear
from lakeivm.planning.lgm import empty_tables, greedy_action, minimal_greedy_sets
from lakeivm.planning.plans import State, add_state
from lakeivm.planning.policies import choose_online


@dataclass(frozen=True)
class Decision:
    """What a tick applies, its predicted seconds, the predicted refresh time afterwards, and why."""

    apply: frozenset[str]
    predicted_seconds: float
    predicted_refresh_seconds_after: float
    reason: str

    def __str__(self) -> str:
        tables = ", ".join(sorted(self.apply)) or "nothing"
        return (
            f"apply {tables} (predicted {self.predicted_seconds:.3f} s); "
            f"refresh afterwards {self.predicted_refresh_seconds_after:.3f} s -- {self.reason}"
        )


def decide(
    pending: Mapping[str, int],
    costs: Mapping[str, CostFunction],
    deadline_seconds: float,
    expected_arrivals: Mapping[str, float],
    headroom_seconds: float,
    max_age_exceeded: frozenset[str] | set[str] = frozenset(),
    *,
    spent_seconds: float = 0.0,
    ticks_since_refresh: int = 0,
    run_seconds: float = 0.0,
) -> Decision:
    """Choose the tables a scheduled tick applies: lazy, greedy, minimal, least ONLINE score H.

    ``pending`` are change counts per source table, ``expected_arrivals`` the changes expected per
    table before the next tick (also the rate estimate for TIMETOFULL), ``spent_seconds`` and
    ``ticks_since_refresh`` the ONLINE epoch state F_t and t (both reset by a refresh;
    docs/design/planner.md#choices-the-paper-leaves-open).
    Nothing is applied unless the constraint above would break. Costs O(2^n * n * log) evaluations.
    """
    names = _validate(pending, costs, deadline_seconds, expected_arrivals, headroom_seconds, max_age_exceeded)
    index = {name: i for i, name in enumerate(names)}
    state: State = tuple(int(pending[name]) for name in names)
    coming: State = tuple(math.ceil(expected_arrivals.get(name, 0.0)) for name in names)
    rates = [float(expected_arrivals.get(name, 0.0)) for name in names]
    functions = [costs[name] for name in names]
    budget = deadline_seconds - headroom_seconds

    def cost(v: State) -> float:
        return sum(f(k) for f, k in zip(functions, v) if k > 0)

    def is_full(v: State) -> bool:
        return cost(add_state(v, coming)) > budget

    forced = frozenset(index[name] for name in max_age_exceeded)
    left = empty_tables(state, forced)
    why = f"max pending age exceeded for {_names(forced, names)}; " if forced else ""
    if not is_full(left):
        chosen = forced
        why += f"backlog fits: refresh would take {cost(add_state(left, coming)) + headroom_seconds:.3f} s <= deadline {deadline_seconds:.3f} s; keep batching"
    else:
        candidates = minimal_greedy_sets(is_full, left)
        everything = frozenset(i for i, k in enumerate(left) if k > 0)
        nonlinear = any(not is_linear(functions[i]) for i in everything)
        if not candidates:
            chosen = forced | everything
            why += (
                f"infeasible: the expected arrivals alone need {cost(coming):.3f} s + headroom {headroom_seconds:.3f} s "
                f"> deadline {deadline_seconds:.3f} s; applying everything (tick more often or raise the deadline)"
            )
        else:
            naive_added = (nonlinear or run_seconds > 0) and everything not in candidates
            if naive_added:
                candidates = [*candidates, everything]
            spent = spent_seconds + cost(greedy_action(state, forced))
            run_cost = lambda q: cost(q) + (run_seconds if any(q) else 0.0)  # noqa: E731
            tables, h = choose_online(is_full, run_cost, left, rates, spent, ticks_since_refresh, candidates)
            chosen = forced | tables
            kind = ("symmetric flush (NAIVE beats LGM here: " + ("non-linear costs" if nonlinear else "a run's shared seconds") + ")"
                    if naive_added and tables == everything else "minimal set")
            why += (
                f"forced: refresh would take {cost(add_state(left, coming)) + headroom_seconds:.3f} s > deadline "
                f"{deadline_seconds:.3f} s; ONLINE {kind} {{{_names(tables, names)}}} has the least amortized cost "
                f"H={h:.3f} s/tick among {len(candidates)}"
            )
    after = empty_tables(state, chosen)
    return Decision(
        apply=frozenset(names[i] for i in chosen),
        predicted_seconds=cost(greedy_action(state, chosen)),
        predicted_refresh_seconds_after=cost(add_state(after, coming)) + headroom_seconds,
        reason=why,
    )


def refresh_decision(
    pending: Mapping[str, int], costs: Mapping[str, CostFunction], deadline_seconds: float, headroom_seconds: float = 0.0
) -> Decision:
    """An on-demand refresh applies everything (paper §2: p_T = s_T); says whether it should meet the deadline."""
    names = _validate(pending, costs, deadline_seconds, {}, headroom_seconds, frozenset())
    seconds = sum(costs[name](int(pending[name])) for name in names if pending[name] > 0)
    verdict = "within" if seconds + headroom_seconds <= deadline_seconds else "MISSES"
    return Decision(
        apply=frozenset(names),
        predicted_seconds=seconds + headroom_seconds,
        predicted_refresh_seconds_after=0.0,
        reason=f"on-demand refresh: apply everything; predicted {seconds + headroom_seconds:.3f} s {verdict} the deadline {deadline_seconds:.3f} s",
    )


def _names(tables: frozenset[int], names: tuple[str, ...]) -> str:
    return ", ".join(names[i] for i in sorted(tables))


def _validate(
    pending: Mapping[str, int],
    costs: Mapping[str, CostFunction],
    deadline_seconds: float,
    expected_arrivals: Mapping[str, float],
    headroom_seconds: float,
    max_age_exceeded: frozenset[str] | set[str],
) -> tuple[str, ...]:
    """The tables in a fixed (sorted) order, after checking every input names known tables."""
    names = tuple(sorted(pending))
    missing = [name for name in names if name not in costs]
    if missing:
        raise InvalidInput(f"no cost model for source table(s) {missing}; calibrate the view or give a prior")
    bad = [name for name in names if pending[name] < 0] + [n for n, k in expected_arrivals.items() if k < 0]
    if bad:
        raise InvalidInput(f"pending and expected change counts must be >= 0, got negatives for {bad}")
    unknown = sorted((set(expected_arrivals) | set(max_age_exceeded)) - set(names))
    if unknown:
        raise InvalidInput(f"tables {unknown} are not among the pending tables {list(names)}; pass a count (0 is fine) for each")
    if not deadline_seconds > 0 or headroom_seconds < 0:
        raise InvalidInput(
            f"need deadline_seconds > 0 and headroom_seconds >= 0, got {deadline_seconds} and {headroom_seconds}"
        )
    return names
