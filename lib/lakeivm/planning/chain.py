"""One deadline for a chain of views: LGM over every view's inputs at once (paper §2-§4 on a DAG).

A user's deadline is on the view at the end of a chain (its *leaf*), and an on-demand refresh of it
refreshes every view it reads first (docs/design/planner.md#chains). So the backlog is the chain's:
one entry per (view, input) *pair*, an input being a base table or a view of the chain, and the
refresh the deadline bounds is the whole chain's, views in topological order. What an upstream view
defers is its readers' deferred input: applying pair (u, t) empties it and adds its rows to every
pair (v, u) -- in rows of u's own inputs, the unit a view read as a source counts its pending changes
in (``sources.upstream.pending_rows``), so the readers' cost models are fitted in it too.

With that transition in place of emptying a table, the per-tick rule is the seed's (``decide``):
nothing is applied while the chain's refresh after the expected arrivals fits the deadline; else the
minimal sets of pairs whose application makes it fit compete under ONLINE's amortized score H (§4.3),
with the symmetric flush where ``decide`` lets it compete (non-linear costs, a run's shared seconds). A run's shared seconds are paid per view that applies anything. A chain with
more pending pairs than ``EXACT_PAIRS`` gets one minimal set built greedily (the pair that cuts the
chain's refresh most per second it costs, then dropped again while the rest still fits) instead of all.
A chain of one view is ``decide`` with the run's seconds charged as it charges them.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from lakeivm.errors import InvalidInput
from lakeivm.planning.costs import CostFunction, is_linear
from lakeivm.planning.plans import State, add_state
from lakeivm.planning.policies import time_to_full

EXACT_PAIRS = 12  # pending pairs up to which every minimal set is enumerated (2^n evaluations at worst)


@dataclass(frozen=True)
class ChainView:
    """One view of a chain as the planner sees it (``planning.tick.planner_inputs`` gives the numbers).

    ``pending``: change rows per input (a base table or another view of the chain); ``costs``: f(rows)
    per input; ``run_seconds``: what a run that applies anything pays once; ``joint_seconds``: what a
    run applying several inputs pays more; ``expected``: arrivals per base-table input before the next
    tick; ``forced``: inputs whose changes are about to outlive the view's ``max_pending_age``."""

    name: str
    pending: Mapping[str, int]
    costs: Mapping[str, CostFunction]
    run_seconds: float = 0.0
    joint_seconds: float = 0.0
    expected: Mapping[str, float] = field(default_factory=dict)
    forced: frozenset[str] = frozenset()


@dataclass(frozen=True)
class ChainDecision:
    """What a tick of the chain applies per view, its predicted seconds (per view and in all), the
    predicted refresh of the chain afterwards, and why."""

    apply: Mapping[str, frozenset[str]]
    predicted_seconds: float
    predicted_view_seconds: Mapping[str, float]
    predicted_refresh_seconds_after: float
    reason: str

    def __str__(self) -> str:
        chosen = "; ".join(f"{view}: {', '.join(sorted(inputs))}" for view, inputs in self.apply.items() if inputs) or "nothing"
        return (f"chain applies {chosen} (predicted {self.predicted_seconds:.3f} s); "
                f"chain refresh afterwards {self.predicted_refresh_seconds_after:.3f} s -- {self.reason}")


class Chain:
    """The views of a chain in topological order (every view after the views it reads; the leaf last)."""

    def __init__(self, views: Sequence[ChainView]) -> None:
        names = [v.name for v in views]
        if len(set(names)) != len(names):
            raise InvalidInput(f"a chain names each view once, got {names}")
        for position, view in enumerate(views):
            missing = sorted(set(view.pending) - set(view.costs))
            if missing:
                raise InvalidInput(f"view {view.name}: no cost model for input(s) {missing}")
            late = [i for i in view.pending if i in names[position:]]
            if late:
                raise InvalidInput(f"view {view.name} reads {late}, which come(s) after it: list a chain's views upstreams first")
        self.views = tuple(views)
        self.pairs = tuple((v.name, i) for v in views for i in sorted(v.pending))
        self.index = {pair: n for n, pair in enumerate(self.pairs)}
        self.readers = {v.name: tuple(self.index[(r.name, v.name)] for r in views if v.name in r.pending) for v in views}

    @property
    def leaf(self) -> str:
        return self.views[-1].name

    def state(self) -> State:
        """The pending rows per pair now."""
        return tuple(int(dict(self._view(v).pending)[i]) for v, i in self.pairs)

    def arrivals(self) -> list[float]:
        """The expected arrivals per pair before the next tick (base-table inputs only)."""
        return [float(self._view(v).expected.get(i, 0.0)) for v, i in self.pairs]

    def act(self, state: State, chosen: frozenset[int]) -> tuple[State, dict[str, float]]:
        """Apply the ``chosen`` pairs, views in order: the state after and the seconds per view that ran.
        A view's applied rows become pending rows of its readers (applied too if chosen)."""
        left = list(state)
        seconds: dict[str, float] = {}
        for view in self.views:
            applied = [(n, i) for i in sorted(view.pending) if (n := self.index[(view.name, i)]) in chosen and left[n] > 0]
            if not applied:
                continue
            rows = sum(left[n] for n, _ in applied)
            seconds[view.name] = (view.run_seconds + (view.joint_seconds if len(applied) > 1 else 0.0)
                                  + sum(view.costs[i](left[n]) for n, i in applied))
            for n, _ in applied:
                left[n] = 0
            for n in self.readers[view.name]:
                left[n] += rows
        return tuple(left), seconds

    def refresh(self, state: State) -> dict[str, float]:
        """The predicted seconds per view of an on-demand refresh of the chain from ``state``."""
        return self.act(state, frozenset(range(len(self.pairs))))[1]

    def _view(self, name: str) -> ChainView:
        return next(v for v in self.views if v.name == name)


def decide_chain(chain: Chain, deadline_seconds: float, headroom_seconds: float = 0.0, *,
                 spent_seconds: float = 0.0, ticks_since_refresh: int = 0) -> ChainDecision:
    """Choose the pairs a scheduled tick of the chain applies: lazy, greedy, minimal, least ONLINE H.

    Nothing is applied (but the forced pairs) unless the chain's refresh after the expected arrivals,
    plus ``headroom_seconds``, would exceed ``deadline_seconds``. ``spent_seconds`` and
    ``ticks_since_refresh`` are ONLINE's epoch state, the leaf's."""
    if not deadline_seconds > 0 or headroom_seconds < 0:
        raise InvalidInput(f"need deadline_seconds > 0 and headroom_seconds >= 0, got {deadline_seconds} and {headroom_seconds}")
    state = chain.state()
    coming = tuple(math.ceil(k) for k in chain.arrivals())
    budget = deadline_seconds - headroom_seconds

    def refresh_seconds(s: State) -> float:
        return sum(chain.refresh(s).values())

    def is_full(s: State) -> bool:
        return refresh_seconds(add_state(s, coming)) > budget

    def after(chosen: frozenset[int]) -> State:
        return chain.act(state, chosen)[0]

    forced = frozenset(chain.index[(v.name, i)] for v in chain.views for i in v.forced if state[chain.index[(v.name, i)]] > 0)
    why = f"max pending age exceeded for {_pairs(chain, forced)}; " if forced else ""
    if not is_full(after(forced)):
        chosen = forced
        why += (f"backlog fits: the chain's refresh would take {refresh_seconds(add_state(after(forced), coming)) + headroom_seconds:.3f} s "
                f"<= deadline {deadline_seconds:.3f} s; keep batching")
    else:
        names = {v.name for v in chain.views}  # a pair reading a view of the chain can fill within the tick: it can apply that too
        free = [n for n, (_, i) in enumerate(chain.pairs) if n not in forced and (state[n] > 0 or i in names)]
        valid = lambda extra: not is_full(after(forced | extra))  # noqa: E731
        candidates = (_minimal_sets(free, valid) if len(free) <= EXACT_PAIRS else
                      _greedy_minimal(chain, state, free, forced, valid))
        everything = frozenset(free)
        if not candidates:
            chosen = forced | everything
            why += (f"infeasible: even the chain's refresh right after applying everything takes "
                    f"{refresh_seconds(add_state(after(forced | everything), coming)) + headroom_seconds:.3f} s > deadline "
                    f"{deadline_seconds:.3f} s; applying everything (tick more often or raise the deadline)")
        else:
            minimal = candidates
            shared = any(v.run_seconds > 0 or v.joint_seconds > 0 for v in chain.views)
            if (shared or any(not is_linear(v.costs[i]) for v in chain.views for i in v.pending)) and everything not in candidates:
                candidates = [*candidates, everything]  # NAIVE can beat LGM there, as in ``decide``
            rates = chain.arrivals()
            best = None
            for position, extra in enumerate(candidates):
                cost = sum(chain.act(state, forced | extra)[1].values())
                h = (spent_seconds + cost) / (ticks_since_refresh + time_to_full(is_full, after(forced | extra), rates))
                if best is None or (h, cost, position) < best[0]:
                    best = ((h, cost, position), extra)
            assert best is not None
            (h, _, _), extra = best
            chosen = forced | extra
            how = "minimal set" if extra in minimal else "symmetric flush"
            why += (f"forced: the chain's refresh would take {refresh_seconds(add_state(state, coming)) + headroom_seconds:.3f} s > deadline "
                    f"{deadline_seconds:.3f} s; ONLINE {how} {{{_pairs(chain, extra)}}} has the least amortized cost "
                    f"H={h:.3f} s/tick among {len(candidates)}")
    left, per_view = chain.act(state, chosen)
    apply = {v.name: frozenset(i for i in v.pending if chain.index[(v.name, i)] in chosen) for v in chain.views}
    return ChainDecision(apply=apply, predicted_seconds=sum(per_view.values()), predicted_view_seconds=per_view,
                         predicted_refresh_seconds_after=refresh_seconds(add_state(left, coming)) + headroom_seconds, reason=why)


def _minimal_sets(free: Sequence[int], valid) -> list[frozenset[int]]:
    """Every minimal valid set of pairs (paper §3.2, Definition 3), by increasing size."""
    found: list[frozenset[int]] = []
    for size in range(len(free) + 1):
        for combo in itertools.combinations(free, size):
            chosen = frozenset(combo)
            if not any(v <= chosen for v in found) and valid(chosen):
                found.append(chosen)
    return found


def _greedy_minimal(chain: Chain, state: State, free: Sequence[int], forced: frozenset[int], valid) -> list[frozenset[int]]:
    """One minimal valid set for a chain too large to enumerate: add the pair that cuts the chain's
    refresh most per second it costs until the rest fits, then drop pairs (least useful first) while
    it still fits (MINIMIZEACTION, §3.2). [] when nothing fits."""
    def refresh_after(chosen: frozenset[int]) -> float:
        return sum(chain.refresh(chain.act(state, forced | chosen)[0]).values())

    def cost(chosen: frozenset[int]) -> float:
        return sum(chain.act(state, forced | chosen)[1].values())

    chosen: frozenset[int] = frozenset()
    while not valid(chosen):
        rest = [n for n in free if n not in chosen]
        if not rest:
            return []
        base, paid = refresh_after(chosen), cost(chosen)
        gain = {n: (base - refresh_after(chosen | {n})) / max(cost(chosen | {n}) - paid, 1e-9) for n in rest}
        chosen = chosen | {max(rest, key=lambda n: (gain[n], -n))}
    for n in sorted(chosen, key=lambda n: (refresh_after(chosen - {n}) - refresh_after(chosen), -n)):
        if valid(chosen - {n}):
            chosen = chosen - {n}
    return [chosen]


def _pairs(chain: Chain, chosen: frozenset[int]) -> str:
    return ", ".join(f"{i}->{v}" for v, i in (chain.pairs[n] for n in sorted(chosen)))
