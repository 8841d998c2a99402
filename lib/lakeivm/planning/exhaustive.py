"""Exact OPT over all valid plans by dynamic programming on post-action states (a test oracle).

Not in the paper: docs/design/planner.md#choices-the-paper-leaves-open.

Costs depend on counts only, so the state after each tick is a count vector and a plan's cost is
a shortest path over them. Exponential in n: use only for n <= 3, T <= 8, small arrivals.
Costs O(T * S * A) for S reachable non-full states and A candidate actions per state.
"""
from __future__ import annotations

import itertools

from lakeivm.planning.plans import Instance, Plan, State, add_state, sub_state


def optimal_plan(instance: Instance) -> Plan:
    """A valid plan of minimum cost among *all* valid plans (OPT, paper §2), lazy or not."""
    zero: State = (0,) * instance.n
    layers: list[dict[State, tuple[float, State, State]]] = []
    current: dict[State, float] = {zero: 0.0}
    for t, d in enumerate(instance.arrivals):
        best: dict[State, tuple[float, State, State]] = {}
        for post, cost in current.items():
            pre = add_state(post, d)
            for p in _actions(instance, t, pre):
                after = sub_state(pre, p)
                total = cost + instance.cost(p)
                if after not in best or total < best[after][0]:
                    best[after] = (total, post, p)
        layers.append(best)
        current = {s: entry[0] for s, entry in best.items()}
    actions: list[State] = []
    state = zero
    for layer in reversed(layers):
        _, state_before, p = layer[state]
        actions.append(p)
        state = state_before
    actions.reverse()
    reasons = tuple("exhaustive optimum" if any(p) else "" for p in actions)
    return Plan(instance, tuple(actions), reasons, "OPT")


def _actions(instance: Instance, t: int, pre: State) -> list[State]:
    """Every valid action at t: all p <= pre leaving a non-full backlog, or the full flush at T."""
    if t == instance.horizon:
        return [pre]
    candidates = itertools.product(*(range(k + 1) for k in pre))
    return [p for p in candidates if not instance.is_full(sub_state(pre, p))]
