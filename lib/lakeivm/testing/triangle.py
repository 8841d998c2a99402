"""Oracle for the triangle kind: the IVM^ε batch delta rule over dict relations.

The tests check the maintainer's batch rule (``lakeivm.views.triangle.sql_batch``, SQL in DuckDB)
against it, and it against brute-force counts (``lakeivm.views.triangle.oracle``); no product code
runs it. It mirrors Kara et al., *Counting Triangles under Updates in Worst-Case Optimal Time*: the
update rules of §3 and the rebalancing of §4, applied to a batch as docs/kinds/triangle.md#batches
describes.

A batch {R: ΔR, S: ΔS, T: ΔT} is consolidated and applied relation by relation (telescoped rule):
ΔQ = ΔR·S·T + R'·ΔS·T + R'·S'·ΔT. Each step joins ΔK with the other two relations only along
bounded fan-outs under frozen classes (a new value is light, heavy when ε = 0). Afterwards, when
|D| left [⌊N/4⌋, N), N := 2|D|+1 and parts and views are rebuilt strictly (major rebalancing);
otherwise the batch's values of R, then S, then T whose degree left [½θ, 3/2θ) move (minor
rebalancing). Cost per batch of k changes: O(k·N^max(ε,1-ε)) join rows plus
amortized rebalancing.
"""
from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field

from lakeivm.errors import InvalidInput
from lakeivm.views.triangle.core import (
    HEAVY, LIGHT, NEXT, PREV, ROLES, Key, Part, add_all, check_state, move_value, pair_delta, split_strict,
)

Changes = Mapping[Key, int] | Iterable[tuple[Key, int]]


@dataclass
class BatchState:
    """IVM^ε state kept between batches: parts, views W[K], Q, base N and ε."""

    epsilon: float
    base: int
    count: int
    parts: dict[tuple[str, str], Part]
    views: dict[str, dict[Key, int]]
    totals: dict[str, int] = field(default_factory=lambda: {"join_rows": 0, "minor_moves": 0, "major_rebalancings": 0})

    @property
    def size(self) -> int:
        """|D| in distinct keys."""
        return sum(part.size for part in self.parts.values())

    @property
    def theta(self) -> float:
        return self.base ** self.epsilon

    def relation(self, role: str) -> dict[Key, int]:
        return {**dict(self.parts[role, HEAVY].items()), **dict(self.parts[role, LIGHT].items())}

    def heavy_values(self, role: str) -> set[Hashable]:
        return set(self.parts[role, HEAVY].values())

    def part_of(self, role: str, x: Hashable) -> str:
        """x's part in ``role``; a new value is light, heavy when ε = 0."""
        if x in self.parts[role, HEAVY].by_first:
            return HEAVY
        if x in self.parts[role, LIGHT].by_first:
            return LIGHT
        return HEAVY if self.epsilon == 0 else LIGHT

    def check_invariants(self) -> None:
        """Assert Def. 9 and exact views and Q after a batch."""
        check_state(self.parts, self.views, self.count, self.base, self.epsilon)


@dataclass(frozen=True)
class BatchReport:
    """What one batch did: ΔQ, net key change, join output rows of the steps, moves, rebuild."""

    count_delta: int
    size_change: int
    join_rows: int
    moved_values: tuple[tuple[str, Hashable], ...]
    major: bool


def bootstrap(relations: Mapping[str, Changes], epsilon: float = 0.5) -> BatchState:
    """Preprocessing (Prop. 10): N = 2|D|+1, strict partition, views, and Q by the batch plan with ΔR = R
    (docs/kinds/triangle.md#batches).

    O(N^(1+max(ε,1-ε))) for Q and O(N^(1+min(ε,1-ε))) for the views.
    """
    if not 0.0 <= epsilon <= 1.0:
        raise InvalidInput(f"IVM^ε needs 0 <= epsilon <= 1, got {epsilon}; 0.5 is the optimal choice")
    unknown = set(relations) - set(ROLES)
    if unknown:
        raise InvalidInput(f"unknown relations {sorted(unknown)}; the triangle's relations are {ROLES}")
    consolidated = {role: consolidate(relations.get(role, {})) for role in ROLES}
    base = 2 * sum(len(rel) for rel in consolidated.values()) + 1
    parts, views = split_strict(consolidated, base ** epsilon)
    state = BatchState(float(epsilon), base, 0, parts, views)
    state.count = sum(p * pair_delta(state.parts, state.views, "R", x, y)[0] for (x, y), p in consolidated["R"].items())
    return state


def apply_batch(state: BatchState, changes: Mapping[str, Changes]) -> BatchReport:
    """Apply one batch to ``state`` in place: steps R, S, T, then major or minor rebalancing."""
    unknown = set(changes) - set(ROLES)
    if unknown:
        raise InvalidInput(f"unknown relations {sorted(unknown)}; the triangle's relations are {ROLES}")
    before_count, before_size = state.count, state.size
    join_rows, touched = apply_steps(state, changes)
    size = state.size
    moved: list[tuple[str, Hashable]] = []
    major = not state.base // 4 <= size < state.base
    if major:
        state.base = 2 * size + 1
        state.parts, state.views = split_strict({role: state.relation(role) for role in ROLES}, state.theta)
        state.totals["major_rebalancings"] += 1
    else:
        moved = rebalance_minor(state, touched)
    state.totals["minor_moves"] += len(moved)
    return BatchReport(state.count - before_count, size - before_size, join_rows, tuple(moved), major)


def apply_steps(state: BatchState, changes: Mapping[str, Changes]) -> tuple[int, dict[str, set[Hashable]]]:
    """The steps R, S, T of one batch under frozen classes (§3's rules per step); returns the join
    output rows and each relation's touched values."""
    join_rows, touched = 0, {}
    for role in ROLES:
        delta = consolidate(changes.get(role, {}))
        join_rows += _step(state, role, delta)
        touched[role] = {x for x, _ in delta}
    state.totals["join_rows"] += join_rows
    return join_rows, touched


def rebalance_minor(state: BatchState, touched: Mapping[str, set[Hashable]]) -> list[tuple[str, Hashable]]:
    """Minor rebalancing (§4) of R, then S, then T; returns the moved (role, value)s."""
    moved: list[tuple[str, Hashable]] = []
    for role in ROLES:
        moved += _rebalance_minor(state, role, touched.get(role, set()))
    return moved


def graph_changes(edges: Changes) -> dict[str, dict[Key, int]]:
    """One edge table joined with itself: the same consolidated ΔE for each logical copy R, S, T (App. A)."""
    delta = consolidate(edges)
    return {role: dict(delta) for role in ROLES}


def consolidate(changes: Changes) -> dict[Key, int]:
    """Sum payloads per key and drop zeros; an insert and its delete cancel."""
    items = changes.items() if isinstance(changes, Mapping) else changes
    total: dict[Key, int] = {}
    for key, p in items:
        total[key] = total.get(key, 0) + p
    return {key: p for key, p in total.items() if p}


def _step(state: BatchState, role: str, delta: Mapping[Key, int]) -> int:
    """One relation's batch ΔK under frozen classes (§3's update rules); returns the join output rows.

    ΔQ = tA + tB + tC and ΔW[K] = ΔK_h ⋈ NEXT_l, ΔW[PREV] = PREV_h ⋈ ΔK_l, all against the state
    before the step. Per Δ row: ≤ 2N^(1-ε) rows from PREV_h, 1 from W[NEXT], < 3/2 N^ε from NEXT_l.
    """
    classes = {x: state.part_of(role, x) for x, _ in delta}
    next_l, prev_h = state.parts[NEXT[role], LIGHT], state.parts[PREV[role], HEAVY]
    view_deltas: dict[str, dict[Key, int]] = {role: {}, PREV[role]: {}}
    rows = 0
    for (x, y), p in delta.items():
        d, joined = pair_delta(state.parts, state.views, role, x, y)
        state.count += p * d
        rows += joined
        if classes[x] == HEAVY:
            add_all(view_deltas[role], (((x, z), p * q) for z, q in next_l.out(y).items()))
        else:
            add_all(view_deltas[PREV[role]], (((z, y), q * p) for z, q in prev_h.into(x).items()))
    for name, changes in view_deltas.items():
        add_all(state.views[name], changes.items())
    for (x, y), p in delta.items():
        state.parts[role, classes[x]].add(x, y, p)
    return rows


def _rebalance_minor(state: BatchState, role: str, touched: set[Hashable]) -> list[tuple[str, Hashable]]:
    """Batch minor rebalancing (§4): move touched values whose degree left [½θ, 3/2θ)."""
    theta, moved = state.theta, []
    heavy, light = state.parts[role, HEAVY], state.parts[role, LIGHT]
    for x in sorted(touched, key=repr):
        if light.degree(x) >= 1.5 * theta:
            move_value(state.parts, state.views, role, x, LIGHT, HEAVY)
        elif 0 < heavy.degree(x) < 0.5 * theta:
            move_value(state.parts, state.views, role, x, HEAVY, LIGHT)
        else:
            continue
        moved.append((role, x))
    return moved

