"""One IVM^ε batch on the driver over a slice of the stored state (digest §7.3-§7.4).

A batch reads few rows of the state: those along the bounded fan-outs of its steps (≤ 2N^(1-ε)
heavy values into a Δ value, < 3/2 N^ε light tuples out of one) and the rows of the values that
move. ``first_requests`` names the rows the batch alone determines; ``second_requests`` the ones
that depend on what the first returned (the ends of each fan-out, the movers' rows and their light
successors). A maintainer fetches both, and ``run_on_slice`` applies the
batch to a ``BatchState`` holding only them. Relations and views are additive, so a row that is
never read need not be present: the result is the exact change of every relation, view, Q and |D|.
``answer`` returns the requested rows of a whole state; it is the oracle the tests use.
"""
from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field

from lakeivm.views.triangle.batch import BatchState, apply_steps, consolidate, rebalance_minor
from lakeivm.views.triangle.core import HEAVY, LIGHT, NEXT, PREV, ROLES, Key, Part, add_all

Changes = Mapping[str, Mapping[Key, int]]


@dataclass
class Requests:
    """Rows of the stored state a batch reads; roles are R, S, T."""

    degrees: set[tuple[str, Hashable]] = field(default_factory=set)            # (K, x): x's part and degree in K
    pairs: set[tuple[str, Hashable, Hashable]] = field(default_factory=set)    # (K, x, y): the row K(x, y), any part
    light_out: set[tuple[str, Hashable]] = field(default_factory=set)          # (K, x): the rows K_l(x, ·)
    heavy_into: set[tuple[str, Hashable]] = field(default_factory=set)         # (K, y): the rows K_h(·, y)
    views: set[tuple[str, Hashable, Hashable]] = field(default_factory=set)    # (K, x, z): W[K](x, z)
    rows_of: set[tuple[str, Hashable]] = field(default_factory=set)            # (K, x): the rows K(x, ·), any part
    light_after: set[tuple[str, Hashable]] = field(default_factory=set)        # (K, x): NEXT_l(y, ·) for each row K(x, y)
    # grids: the rows K(x, y), any part, with (g, K, x) in grid_x and (g, K, y) in grid_y for the same g
    grid_x: set[tuple[str, str, Hashable]] = field(default_factory=set)
    grid_y: set[tuple[str, str, Hashable]] = field(default_factory=set)


@dataclass
class Slice:
    """Stored rows fetched for a batch: relation rows, the degrees of values, view entries."""

    rows: dict[tuple[str, Hashable, Hashable], tuple[str, int]] = field(default_factory=dict)  # (K, x, y) -> (part, m)
    degrees: dict[tuple[str, Hashable], tuple[str, int]] = field(default_factory=dict)         # (K, x) -> (part, degree)
    views: dict[tuple[str, Hashable, Hashable], int] = field(default_factory=dict)             # (K, x, z) -> count

    def update(self, other: Slice) -> None:
        self.rows.update(other.rows)
        self.degrees.update(other.degrees)
        self.views.update(other.views)


@dataclass(frozen=True)
class SliceRun:
    """The exact effect of one batch: Δ of each relation row (keyed with its part), of each view
    entry, of Q; the new |D|; whether |D| left [N/4, N) (the caller then rebuilds); the moves."""

    rel_delta: dict[tuple[str, str, Hashable, Hashable], int]   # (K, part, x, y) -> Δm
    view_delta: dict[tuple[str, Hashable, Hashable], int]       # (K, x, z) -> Δcount
    count_delta: int
    size: int
    major: bool
    moved: tuple[tuple[str, Hashable], ...]


def first_requests(changes: Changes) -> Requests:
    """What the steps read that the batch alone determines (digest §7.3): the classes and degrees
    of its values, its own keys, NEXT_l out of y, PREV_h into x and W[NEXT](y, x)."""
    req = Requests()
    for role in ROLES:
        nxt, prev = NEXT[role], PREV[role]
        for x, y in changes.get(role, {}):
            req.degrees.add((role, x))
            req.pairs.add((role, x, y))
            req.light_out.add((nxt, y))
            req.heavy_into.add((prev, x))
            req.views.add((nxt, y, x))
    return req


def second_requests(changes: Changes, first: Slice, theta: float, epsilon: float) -> Requests:
    """The ends of the fan-outs, NEXT(y, z) for z in PREV_h(·, x) (grid "a") and PREV(z, x) for z in
    NEXT_l(y, ·) (grid "c"), counting the batch's own rows; and the movers' rows and light successors.

    Each end is asked as a grid, the rows whose x and y are both named: a superset of the pairs
    that is far smaller to state (|X| + |Y| values instead of |X|·|Y| pairs) and returns true rows only."""
    heavy_into: dict[tuple[str, Hashable], list[Hashable]] = {}  # (K, y) -> the x of the rows K_h(x, y) fetched
    light_from: dict[tuple[str, Hashable], list[Hashable]] = {}  # (K, x) -> the y of the rows K_l(x, y) fetched
    for (role, x, y), (part, _) in first.rows.items():
        if part == HEAVY:
            heavy_into.setdefault((role, y), []).append(x)
        else:
            light_from.setdefault((role, x), []).append(y)
    into = {role: _index(changes.get(role, {}), 1) for role in ROLES}
    out = {role: _index(changes.get(role, {}), 0) for role in ROLES}
    req = Requests()
    grid_x: dict[tuple[str, str], set[Hashable]] = {}  # (grid, K) -> values, gathered as sets: the ends repeat a lot
    grid_y: dict[tuple[str, str], set[Hashable]] = {}
    for role in ROLES:
        nxt, prev = NEXT[role], PREV[role]
        a_x, a_y = grid_x.setdefault(("a", nxt), set()), grid_y.setdefault(("a", nxt), set())
        c_x, c_y = grid_x.setdefault(("c", prev), set()), grid_y.setdefault(("c", prev), set())
        for x, y in changes.get(role, {}):
            stored, batch = heavy_into.get((prev, x), ()), into[prev].get(x, ())
            if stored or batch:
                a_x.add(y)
                a_y.update(stored, batch)
            stored, batch = light_from.get((nxt, y), ()), out[nxt].get(y, ())
            if stored or batch:
                c_x.update(stored, batch)
                c_y.add(x)
    req.grid_x = {(grid, role, v) for (grid, role), values in grid_x.items() for v in values}
    req.grid_y = {(grid, role, v) for (grid, role), values in grid_y.items() for v in values}
    for role, values in movers(changes, first, theta, epsilon).items():
        req.rows_of |= {(role, x) for x in values}
        req.light_after |= {(role, x) for x in values}
    return req


def movers(changes: Changes, first: Slice, theta: float, epsilon: float) -> dict[str, set[Hashable]]:
    """The values whose degree leaves the band after the batch (minor rebalancing, digest §7.4),
    known before the steps: classes are frozen, so x's degree changes only by K's own keys at x."""
    new_class = HEAVY if epsilon == 0 else LIGHT
    found: dict[str, set[Hashable]] = {}
    for role in ROLES:
        change: dict[Hashable, int] = {}
        for (x, y), p in changes.get(role, {}).items():
            before = first.rows.get((role, x, y), ("", 0))[1]
            change[x] = change.get(x, 0) + (before + p != 0) - (before != 0)
        for x, d in change.items():
            part, degree = first.degrees.get((role, x), (new_class, 0))
            degree += d
            if (part == LIGHT and degree >= 1.5 * theta) or (part == HEAVY and 0 < degree < 0.5 * theta):
                found.setdefault(role, set()).add(x)
    return found


def run_on_slice(changes: Changes, fetched: Slice, base: int, epsilon: float, size: int) -> SliceRun:
    """Apply one batch to the slice (steps R, S, T, then minor rebalancing of the movers unless |D|
    left [N/4, N)) and return its exact effect on the whole state (see ``SliceRun``)."""
    changes = {role: consolidate(changes.get(role, {})) for role in ROLES}
    state = _state(fetched, base, epsilon)
    views_before, size_before = _views(state), state.size
    rel_delta: dict[tuple[str, str, Hashable, Hashable], int] = {}
    for role in ROLES:  # each step adds ΔK to the part of x, frozen during the steps
        for (x, y), p in changes[role].items():
            add_all(rel_delta, [((role, state.part_of(role, x), x, y), p)])
    apply_steps(state, changes)
    size += state.size - size_before
    major = not base // 4 <= size < base
    moved = () if major else tuple(rebalance_minor(state, movers(changes, fetched, state.theta, epsilon)))
    for role, x in moved:  # all of x's rows left the other part
        dst = HEAVY if x in state.parts[role, HEAVY].by_first else LIGHT
        src = LIGHT if dst == HEAVY else HEAVY
        for y, p in state.parts[role, dst].out(x).items():
            add_all(rel_delta, [((role, src, x, y), -p), ((role, dst, x, y), p)])
    views_after = _views(state)
    view_delta = {key: views_after.get(key, 0) - views_before.get(key, 0) for key in views_before.keys() | views_after.keys()}
    return SliceRun(rel_delta, {k: c for k, c in view_delta.items() if c},
                    state.count, size, major, moved)


def answer(requests: Requests, state: BatchState) -> Slice:
    """The requested rows of a whole state (the semantics a maintainer's fetch must have)."""
    out = Slice()

    def take(role: str, part: str, x: Hashable, y: Hashable) -> None:
        out.rows[role, x, y] = (part, state.parts[role, part].get(x, y))

    for role, x in requests.degrees:
        for part in (HEAVY, LIGHT):
            if state.parts[role, part].degree(x):
                out.degrees[role, x] = (part, state.parts[role, part].degree(x))
    for role, x, y in requests.pairs:
        for part in (HEAVY, LIGHT):
            if state.parts[role, part].get(x, y):
                take(role, part, x, y)
    for role, x in requests.light_out:
        for y in state.parts[role, LIGHT].out(x):
            take(role, LIGHT, x, y)
    for role, y in requests.heavy_into:
        for x in state.parts[role, HEAVY].into(y):
            take(role, HEAVY, x, y)
    for role, x, z in requests.views:
        if state.views[role].get((x, z)):
            out.views[role, x, z] = state.views[role][x, z]
    for grid, role, x in requests.grid_x:
        for part in (HEAVY, LIGHT):
            for y in state.parts[role, part].out(x):
                if (grid, role, y) in requests.grid_y:
                    take(role, part, x, y)
    for role, x in requests.rows_of | requests.light_after:
        for part in (HEAVY, LIGHT):
            for y in state.parts[role, part].out(x):
                take(role, part, x, y)
                if (role, x) in requests.light_after:
                    for z in state.parts[NEXT[role], LIGHT].out(y):
                        take(NEXT[role], LIGHT, y, z)
    return out


class _SliceState(BatchState):
    """A BatchState over a slice: a value's part comes from the fetched degrees, not the rows."""

    classes: dict[tuple[str, Hashable], str]

    def part_of(self, role: str, x: Hashable) -> str:
        return self.classes.get((role, x), HEAVY if self.epsilon == 0 else LIGHT)


def _state(fetched: Slice, base: int, epsilon: float) -> _SliceState:
    rows: dict[tuple[str, str], list[tuple[Hashable, Hashable, int]]] = {(role, part): [] for role in ROLES for part in (HEAVY, LIGHT)}
    for (role, x, y), (part, p) in fetched.rows.items():
        rows[role, part].append((x, y, p))
    parts = {key: Part.of_rows(part_rows) for key, part_rows in rows.items()}
    views: dict[str, dict[Key, int]] = {role: {} for role in ROLES}
    for (role, x, z), c in fetched.views.items():
        views[role][x, z] = c
    state = _SliceState(float(epsilon), base, 0, parts, views)
    state.classes = {key: part for key, (part, _) in fetched.degrees.items()}
    return state


def _views(state: BatchState) -> dict[tuple[str, Hashable, Hashable], int]:
    return {(role, x, z): c for role, view in state.views.items() for (x, z), c in view.items()}


def _index(changes: Mapping[Key, int], column: int) -> dict[Hashable, list[Hashable]]:
    """The batch's keys grouped by one column: {value: [the other column's values]}."""
    index: dict[Hashable, list[Hashable]] = {}
    for key in changes:
        index.setdefault(key[column], []).append(key[1 - column])
    return index
