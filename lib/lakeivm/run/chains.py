"""A view and the views it reads, planned as one chain under the view's deadline (``planning.chain``).

``chain_of`` lists the views an on-demand refresh of a view runs, upstreams first; ``planned`` reads
each one's log and its inputs' pending changes into the planner's ``ChainView``, a split view auto
last ran whole as that whole run. A chain is planned only when every view of it has a committed run
of its current definition to plan from; else (a first run, an edited definition) the engine plans
each view alone, as before.
"""
from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lakeivm.errors import SpecError
from lakeivm.fingerprint import fingerprint
from lakeivm.sources import changes, upstream
from lakeivm.spec import FULL, ViewSpec
from lakeivm.store import commit
from lakeivm.store.lake import Lake

if TYPE_CHECKING:  # the planner (and numpy) is imported once there is something to plan: a no-op run stays light
    from lakeivm.planning.chain import Chain, ChainDecision

POLICIES = ("joint", "alone")


@dataclass(frozen=True)
class ChainRun:
    """What the leaf's log row records of its chain: when the chain's run started, and its prediction."""

    started: float
    predicted_seconds: float | None


def chain_of(spec: ViewSpec, resolve: Callable[[ViewSpec], ViewSpec] = lambda one: one) -> list[ViewSpec]:
    """``spec`` and every view it reads, recursively, each once: upstreams first, ``spec`` last.
    ``resolve``: the spec each view runs as (a split view auto runs whole reads what its SQL as declared reads)."""
    seen: dict[str, ViewSpec] = {}

    def visit(one: ViewSpec) -> None:
        one = resolve(one)
        for up in one.upstreams.values():
            if up.name not in seen:
                visit(up)
        seen.setdefault(one.name, one)

    visit(spec)
    return list(seen.values())


def policy(spec: ViewSpec) -> str:
    """The spec's ``chain_planner``: ``joint`` (default) plans a tick of the view with its chain."""
    chosen = str(spec.options.get("chain_planner", "joint"))
    if chosen not in POLICIES:
        raise SpecError(f"chain_planner: {chosen!r} is not a policy; use one of {', '.join(POLICIES)}")
    return chosen


@dataclass(frozen=True)
class Planned:
    """A chain as the planner sees it now: its views (as each runs), the planner's ``Chain`` (None:
    nothing is pending anywhere in it), the leaf's declared headroom, the margin its recent chain
    refreshes ran over their predictions (``prediction_margin``) and its ONLINE epoch (seconds spent
    and ticks since its last refresh)."""

    specs: list[ViewSpec]
    chain: Chain | None
    headroom: float = 0.0
    spent: float = 0.0
    ticks: int = 0
    margin: float = 0.0


MARGIN_REFRESHES = 20  # the leaf's last on-demand chain refreshes ``prediction_margin`` learns from


def prediction_margin(rows: Sequence[commit.LogRow], last: int = MARGIN_REFRESHES) -> float:
    """Seconds by which the chain's on-demand refreshes ran over their predictions: the 90th
    percentile over the ``last`` logged refreshes of (actual - predicted), each at least 0; 0 before
    three. A tick keeps it free beside the declared headroom: what the cost models do not see (commits
    without change rows, a model behind a growing table) makes the chain miss by about this much."""
    over = [max(0.0, r.chain_seconds - r.chain_predicted_seconds) for r in rows
            if r.mode == "refresh" and r.chain_seconds is not None and r.chain_predicted_seconds is not None][-last:]
    if len(over) < 3:
        return 0.0
    return sorted(over)[min(len(over) - 1, int(0.9 * len(over)))]


def planned(lake: Lake, spec: ViewSpec) -> Planned | None:
    """The chain of ``spec`` now, from each view's log and its inputs' pending changes; None when a
    view of it has no committed run of its definition to plan from. A split view auto last ran whole
    is planned as that run (a recompute over what its SQL as declared reads). Each view's cost models
    learn from its runs on the deployment of its last run. Reads logs and listings: no Spark."""
    logs: dict[str, list[commit.LogRow]] = {}

    def last(one: ViewSpec) -> commit.LogRow | None:
        rows = logs[one.name] = commit.log_rows(lake, one.name)
        return rows[-1] if rows else None

    specs = chain_of(spec, lambda one: upstream.run_spec(one, last(one)))
    found = []
    for one in specs:
        upstream.register(lake, one)
        rows = logs[one.name]
        if not rows or rows[-1].fingerprint not in (None, fingerprint(one)):
            return None
        pins = changes.pin(lake, tuple(rows[-1].watermarks))
        found.append((one, rows, pins, changes.pending(lake, rows[-1].watermarks, pins)))
    if not any(k for *_, pending in found for k in pending.values()):
        return Planned(specs, None)
    from lakeivm.planning.chain import Chain, ChainView
    from lakeivm.planning.costs import LinearCost
    from lakeivm.planning.tick import planner_inputs

    views, inputs = [], None
    for one, rows, pins, pending in found:
        latest = rows[-1]
        history = [r for r in rows if r.kind == latest.kind and r.deployment in (None, latest.deployment)]
        inputs = planner_inputs(history, pending, one.options, commit.calibrated_costs(lake, one.name),
                                small_delta_rows=lake.limits.small_delta_rows)
        expected = {t: inputs.expected_arrivals[t] for t in pins if t not in one.upstreams}  # a view's arrive through the chain
        aged = too_old(lake, one, latest.watermarks, pins)
        if latest.kind == FULL:  # a recompute costs its median run whatever changed (its rows cost nothing more)
            recomputes = [r.seconds for r in history if r.mode in ("tick", "refresh")] or [latest.seconds]
            free = {t: LinearCost(0.0, 0.0) for t in pins}
            views.append(ChainView(one.name, pending, free, statistics.median(recomputes[-9:]), 0.0, expected, aged))
        else:
            views.append(ChainView(one.name, pending, inputs.costs, inputs.run_seconds, inputs.joint_excess_seconds, expected, aged))
    return Planned(specs, Chain(views), float(spec.options.get("headroom", 0.0)), inputs.spent_seconds, inputs.ticks_since_refresh,
                   prediction_margin(logs[spec.name]))


def decide(lake: Lake, spec: ViewSpec) -> tuple[ChainDecision, list[ViewSpec]] | None:
    """The chain's tick under ``spec``'s deadline (``planning.chain.decide_chain``) and the chain's
    views as they run, upstreams first; None: each view plans alone (or nothing is pending anywhere)."""
    from lakeivm.planning.chain import decide_chain

    now = planned(lake, spec)
    if now is None or now.chain is None:
        return None
    headroom = now.headroom + min(now.margin, 0.5 * spec.deadline_s)  # a learned margin takes at most half the deadline
    return decide_chain(now.chain, spec.deadline_s, headroom, spent_seconds=now.spent, ticks_since_refresh=now.ticks), now.specs


def predicted_refresh(lake: Lake, spec: ViewSpec) -> tuple[dict[str, float], float] | None:
    """The predicted seconds of each view's run in an on-demand refresh of ``spec``'s chain now, and
    of the chain (with the leaf's declared headroom); None: a view of it has nothing to plan from."""
    now = planned(lake, spec)
    if now is None:
        return None
    if now.chain is None:
        return {}, 0.0
    per_view = now.chain.refresh(now.chain.state())
    return per_view, sum(per_view.values()) + now.headroom


def too_old(lake: Lake, spec: ViewSpec, watermarks: Mapping[str, int], pins: Mapping[str, int]) -> frozenset[str]:
    """The inputs whose oldest pending change is older than ``spec``'s ``max_pending_age``."""
    limit = spec.max_pending_age_s
    if limit is None:
        return frozenset()
    return frozenset(t for t in pins if changes.source(lake, t).pending_age_seconds(watermarks[t], pins[t]) > limit)
