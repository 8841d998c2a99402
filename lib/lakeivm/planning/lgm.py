"""Lazy, greedy, minimal (LGM) actions and the plan transformations of the proofs (paper §3.1-§3.2).

A greedy action is the set S of tables it empties. ``minimal_greedy_sets`` enumerates the valid
sets none of whose proper subsets is valid (Definition 3); MAKELAZYPLAN (Lemma 1) and
MAKELGMPLAN (Lemma 2, Theorem 1) turn any valid plan into a lazy / LGM one of bounded cost.
"""
from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

from lakeivm.planning.plans import Instance, Plan, State, add_state, replay, sub_state

FullPredicate = Callable[[State], bool]


def minimal_greedy_sets(is_full: FullPredicate, pending: State) -> list[frozenset[int]]:
    """Every minimal valid set of tables to empty from ``pending`` (paper §3.2, Definition 3).

    Subsets of the nonempty tables are enumerated by increasing size; supersets of a valid set
    are skipped, which is exact since a superset of a valid set is never minimal. Returns
    ``[frozenset()]`` if ``pending`` is not full and ``[]`` if even emptying everything is
    invalid (possible only when the predicate includes headroom). Costs O(2^n * n) evaluations.
    """
    nonempty = [i for i, k in enumerate(pending) if k > 0]
    found: list[frozenset[int]] = []
    for size in range(len(nonempty) + 1):
        for combo in itertools.combinations(nonempty, size):
            chosen = frozenset(combo)
            if any(valid <= chosen for valid in found):
                continue
            if not is_full(empty_tables(pending, chosen)):
                found.append(chosen)
    return found


def empty_tables(pending: State, tables: frozenset[int]) -> State:
    """The backlog left after emptying ``tables`` completely (a greedy action)."""
    return tuple(0 if i in tables else k for i, k in enumerate(pending))


def greedy_action(pending: State, tables: frozenset[int]) -> State:
    """The action vector p that empties ``tables``: p[i] = s[i] on the set, 0 elsewhere."""
    return tuple(k if i in tables else 0 for i, k in enumerate(pending))


def minimize_action(instance: Instance, pending: State, action: State, order: Sequence[int] | None = None) -> State:
    """MINIMIZEACTION (paper §3.2): zero components in ``order`` while the backlog stays not full.

    One pass suffices (docs/design/planner.md#choices-the-paper-leaves-open): dropping more tables only grows the backlog, so a table that
    could not be dropped earlier still cannot. Costs O(n) cost evaluations.
    """
    result = list(action)
    for i in order if order is not None else range(instance.n):
        if result[i] == 0:
            continue
        kept = result[i]
        result[i] = 0
        if instance.is_full(sub_state(pending, tuple(result))):
            result[i] = kept
    return tuple(result)


def make_lazy_plan(plan: Plan) -> Plan:
    """MAKELAZYPLAN (Lemma 1): defer P's actions until forced; valid, lazy, cost <= f(P). O(nT)."""
    instance = plan.instance
    accumulated: State = (0,) * instance.n
    post: State = (0,) * instance.n
    actions: list[State] = []
    reasons: list[str] = []
    for t, (d, p) in enumerate(zip(instance.arrivals, plan.actions)):
        accumulated = add_state(accumulated, p)
        pre = add_state(post, d)
        if t == instance.horizon or instance.is_full(pre):
            q, why = accumulated, "forced: release the deferred actions of the input plan"
            accumulated = (0,) * instance.n
        else:
            q, why = (0,) * instance.n, ""
        actions.append(q)
        reasons.append(why)
        post = sub_state(pre, q)
    return Plan(instance, tuple(actions), tuple(reasons), f"lazy({plan.policy})")


def make_lgm_plan(plan: Plan, order: Sequence[int] | None = None) -> Plan:
    """MAKELGMPLAN (Lemma 2): empty exactly the tables where Q lags P, minimized; f(Q) <= 2 f(P). O(n^2 T)."""
    instance = plan.instance
    _, target = replay(instance, plan.actions)
    post: State = (0,) * instance.n
    actions: list[State] = []
    reasons: list[str] = []
    for t, d in enumerate(instance.arrivals):
        pre = add_state(post, d)
        if t == instance.horizon:
            q, why = pre, "refresh at T"
        elif instance.is_full(pre):
            behind = tuple(k if k > goal else 0 for k, goal in zip(pre, target[t]))
            q, why = minimize_action(instance, pre, behind, order), "forced: empty tables lagging the input plan"
        else:
            q, why = (0,) * instance.n, ""
        actions.append(q)
        reasons.append(why)
        post = sub_state(pre, q)
    return Plan(instance, tuple(actions), tuple(reasons), f"lgm({plan.policy})")
