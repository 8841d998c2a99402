"""IVM^ε triangle count, single-tuple updates (Kara et al., arXiv 1804.02780 §3-§4, Fig. 3-4).

Maintains Q = Σ_{a,b,c} R(a,b)·S(b,c)·T(c,a) over ℤ-relations. Relations are written in rotated form
(docs/kinds/triangle.md#notation-and-routing): a tuple of K is (x, y) with x K's partition column
and y NEXT(K)'s, so the triangle is K(x,y)·NEXT(y,z)·PREV(z,x). Each relation is split on x into a
heavy and a light part (slack ½ around θ = N^ε, Def. 9) and ``W[K](x,z) = Σ_y K_h(x,y)·NEXT_l(y,z)``
is materialized: W[R] = V_RS(a,c), W[S] = V_ST(b,a), W[T] = V_TR(c,b). An update costs
O(N^max(ε,1-ε)) amortized.
"""
from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from lakeivm.errors import InvalidInput

Key = tuple[Hashable, Hashable]
Relations = Mapping[str, Mapping[Key, int]]

ROLES = ("R", "S", "T")
NEXT = {"R": "S", "S": "T", "T": "R"}
PREV = {"R": "T", "S": "R", "T": "S"}
HEAVY, LIGHT = "h", "l"
_EMPTY: Mapping[Hashable, int] = {}


class Part:
    """One heavy or light part K_u(x, y) -> payload with an index on each column (paper §2).

    ``out(x)`` enumerates K_u(x, ·), ``into(y)`` enumerates K_u(·, y); lookups, inserts, deletes
    and degrees are O(1). Keys whose payload reaches 0 disappear.
    """

    __slots__ = ("by_first", "by_second", "size")

    def __init__(self) -> None:
        self.by_first: dict[Hashable, dict[Hashable, int]] = {}
        self.by_second: dict[Hashable, dict[Hashable, int]] = {}
        self.size = 0

    def get(self, x: Hashable, y: Hashable) -> int:
        return self.by_first.get(x, _EMPTY).get(y, 0)

    def out(self, x: Hashable) -> Mapping[Hashable, int]:
        return self.by_first.get(x, _EMPTY)

    def into(self, y: Hashable) -> Mapping[Hashable, int]:
        return self.by_second.get(y, _EMPTY)

    def degree(self, x: Hashable) -> int:
        """|σ_{X=x} K_u|: distinct tuples with a nonzero payload (paper §2)."""
        return len(self.by_first.get(x, _EMPTY))

    def values(self) -> Iterator[Hashable]:
        return iter(self.by_first)

    def items(self) -> Iterator[tuple[Key, int]]:
        for x, row in self.by_first.items():
            for y, p in row.items():
                yield (x, y), p

    @classmethod
    def of_rows(cls, rows: Iterable[tuple[Hashable, Hashable, int]]) -> Part:
        """A part holding ``rows`` (x, y, payload), each key once; zero payloads are left out."""
        part = cls()
        by_first, by_second = part.by_first, part.by_second
        for x, y, p in rows:
            if p:
                by_first.setdefault(x, {})[y] = by_second.setdefault(y, {})[x] = p
        part.size = sum(map(len, by_first.values()))
        return part

    def add(self, x: Hashable, y: Hashable, p: int) -> int:
        """K_u(x, y) += p; returns the change in the number of keys (-1, 0 or +1)."""
        row = self.by_first.setdefault(x, {})
        column = self.by_second.setdefault(y, {})
        old = row.get(y, 0)
        new = old + p
        if new:
            row[y] = column[x] = new
        else:
            row.pop(y, None)
            column.pop(x, None)
            if not row:
                del self.by_first[x]
            if not column:
                del self.by_second[y]
        change = (new != 0) - (old != 0)
        self.size += change
        return change


@dataclass
class Counters:
    """Operation counts of the reference engine, for cost regression tests (the loop bounds of Prop. 11)."""

    updates: int = 0
    loop_steps: int = 0
    minor_moves: int = 0
    moved_tuples: int = 0
    major_rebalancings: int = 0


class TriangleIVM:
    """IVM^ε state (D^ε, V, N) of Def. 9 with ONUPDATE of Fig. 4.

    ``update(role, x, y, p)`` applies K(x, y) += p and keeps ``count`` equal to Q. Amortized cost
    O(N^max(ε,1-ε)) per update (Theorem 4); space O(N^(1+min(ε,1-ε))).

    >>> ivm = TriangleIVM(0.5)
    >>> for role, x, y in (("R", 1, 2), ("S", 2, 3), ("T", 3, 1)):
    ...     ivm.update(role, x, y, 1)
    >>> ivm.count
    1
    """

    def __init__(self, epsilon: float = 0.5, relations: Relations | None = None) -> None:
        if not 0.0 <= epsilon <= 1.0:
            raise InvalidInput(f"IVM^ε needs 0 <= epsilon <= 1, got {epsilon}; 0.5 is the optimal choice")
        self.epsilon = float(epsilon)
        self.parts = {(role, u): Part() for role in ROLES for u in (HEAVY, LIGHT)}
        self.views: dict[str, dict[Key, int]] = {role: {} for role in ROLES}
        self.count = 0
        self.base = 1
        self.counters = Counters()
        if relations:
            self._preprocess(relations)

    @property
    def size(self) -> int:
        """|D| = |R| + |S| + |T| in distinct keys."""
        return sum(part.size for part in self.parts.values())

    @property
    def theta(self) -> float:
        """The heavy/light threshold θ = N^ε."""
        return self.base ** self.epsilon

    def relation(self, role: str) -> dict[Key, int]:
        """K = K_h ⊎ K_l as a plain dict."""
        return {**dict(self.parts[role, HEAVY].items()), **dict(self.parts[role, LIGHT].items())}

    def part_of(self, role: str, x: Hashable) -> str:
        """The part a new tuple with partition value x goes to (Fig. 4): heavy if x is heavy or ε = 0."""
        return HEAVY if self.epsilon == 0 or x in self.parts[role, HEAVY].by_first else LIGHT

    def update(self, role: str, x: Hashable, y: Hashable, p: int) -> None:
        """ONUPDATE (§4, Fig. 4): apply, then major or minor rebalancing if needed."""
        if role not in ROLES:
            raise InvalidInput(f"unknown relation {role!r}; the triangle's relations are {ROLES}")
        if not p:
            return
        self.counters.updates += 1
        self._apply(role, x, y, p, self.part_of(role, x))
        size = self.size
        if size >= self.base:
            self.base *= 2
            self._rebalance_major()
        elif size < self.base // 4:
            self.base //= 2
            self._rebalance_major()
        else:
            self._rebalance_minor(role, x)

    def _apply(self, role: str, x: Hashable, y: Hashable, p: int, part: str) -> None:
        """APPLYUPDATE (§3.2, Fig. 3): ΔQ over the 8 combinations, then the one view K feeds.

        O(N^max(ε,1-ε)): loops run over heavy values of PREV (≤ 2N^(1-ε)) or over a light value's
        tuples in NEXT (< 3/2 N^ε); the (h,l) combination is one lookup in W[NEXT].
        """
        self.count += p * self._delta(role, x, y)
        if part == HEAVY:
            fan_out = self.parts[NEXT[role], LIGHT].out(y)
            add_all(self.views[role], (((x, z), p * q) for z, q in fan_out.items()))
        else:
            fan_out = self.parts[PREV[role], HEAVY].into(x)
            add_all(self.views[PREV[role]], (((z, y), q * p) for z, q in fan_out.items()))
        self.counters.loop_steps += len(fan_out)
        self.parts[role, part].add(x, y, p)

    def _delta(self, role: str, x: Hashable, y: Hashable) -> int:
        delta, steps = pair_delta(self.parts, self.views, role, x, y)
        self.counters.loop_steps += steps
        return delta

    def _rebalance_minor(self, role: str, x: Hashable) -> None:
        """Minor rebalancing (§4, Prop. 14): move x if its degree left [½θ, 3/2θ); O(N^(ε+max(ε,1-ε)))."""
        theta = self.theta
        if self.parts[role, LIGHT].degree(x) >= 1.5 * theta:
            self._move(role, x, LIGHT, HEAVY)
        elif 0 < self.parts[role, HEAVY].degree(x) < 0.5 * theta:
            self._move(role, x, HEAVY, LIGHT)

    def _move(self, role: str, x: Hashable, src: str, dst: str) -> None:
        self.counters.moved_tuples += self.parts[role, src].degree(x)
        self.counters.loop_steps += move_value(self.parts, self.views, role, x, src, dst)
        self.counters.minor_moves += 1

    def _rebalance_major(self) -> None:
        """Major rebalancing (§4, Prop. 13): strict partition at θ = N^ε, views from scratch; Q unchanged."""
        relations = {role: self.relation(role) for role in ROLES}
        self.parts, self.views = split_strict(relations, self.theta)
        self.counters.major_rebalancings += 1
        self.counters.loop_steps += self.size + sum(len(v) for v in self.views.values())

    def _preprocess(self, relations: Relations) -> None:
        """Preprocessing (Prop. 10): N = 2|D|+1, strict partition, views, then Q = Σ_R R(a,b)·ΔQ(a,b).

        Q comes from the batch plan with ΔK = R (docs/kinds/triangle.md#batches):
        O(N^(1+max(ε,1-ε))), an independent path from the brute-force count.
        """
        consolidated = {role: {k: p for k, p in relations.get(role, {}).items() if p} for role in ROLES}
        unknown = set(relations) - set(ROLES)
        if unknown:
            raise InvalidInput(f"unknown relations {sorted(unknown)}; the triangle's relations are {ROLES}")
        self.base = 2 * sum(len(rel) for rel in consolidated.values()) + 1
        self.parts, self.views = split_strict(consolidated, self.theta)
        self.count = sum(p * self._delta("R", x, y) for (x, y), p in consolidated["R"].items())

    def check_invariants(self) -> None:
        """Assert Def. 9 and the materialization (see ``check_state``)."""
        check_state(self.parts, self.views, self.count, self.base, self.epsilon)


def check_state(parts: Mapping[tuple[str, str], Part], views: Mapping[str, Mapping[Key, int]],
                count: int, base: int, epsilon: float) -> None:
    """Assert an IVM^ε state (Def. 9): indexes in sync, slack-½ domain partition,
    ⌊N/4⌋ ≤ |D| < N, ≤ 2N^(1-ε) heavy values, empty parts at ε ∈ {0, 1}, views and Q exact."""
    from lakeivm.views.triangle.oracle import count_triangles, join_view

    theta, size = base ** epsilon, sum(part.size for part in parts.values())
    assert base // 4 <= size < base, f"size invariant broken: |D|={size}, N={base}"
    for role in ROLES:
        heavy, light = parts[role, HEAVY], parts[role, LIGHT]
        for part in (heavy, light):
            assert part.size == sum(1 for _ in part.items()), "key count out of sync"
            assert all(p != 0 for _, p in part.items()), "zero payload stored"
            second = {(x, y): p for y, col in part.by_second.items() for x, p in col.items()}
            assert second == dict(part.items()), "column index out of sync"
        assert not set(heavy.values()) & set(light.values()), f"{role}: a value is in both parts"
        assert all(heavy.degree(x) >= 0.5 * theta for x in heavy.values()), f"{role}_h below ½θ"
        assert all(light.degree(x) < 1.5 * theta for x in light.values()), f"{role}_l at or above 3/2θ"
        assert len(heavy.by_first) <= 2 * base ** (1 - epsilon), f"too many heavy {role} values"
        if epsilon == 0:
            assert light.size == 0, "ε = 0 keeps every light part empty"
        if epsilon == 1:
            assert heavy.size == 0, "ε = 1 keeps every heavy part empty"
        expected = join_view(dict(heavy.items()), dict(parts[NEXT[role], LIGHT].items()))
        assert views[role] == expected, f"W[{role}] differs from K_h ⋈ NEXT_l"
    r, s, t = ({**dict(parts[role, HEAVY].items()), **dict(parts[role, LIGHT].items())} for role in ROLES)
    assert count == count_triangles(r, s, t), "Q differs from the brute-force count"


def pair_delta(parts: Mapping[tuple[str, str], Part], views: Mapping[str, Mapping[Key, int]],
               role: str, x: Hashable, y: Hashable) -> tuple[int, int]:
    """Σ_z NEXT(y,z)·PREV(z,x) and the loop steps it took (Fig. 3).

    The terms are tA/tB/tC of docs/kinds/triangle.md#batches: (h,h)+(l,h) loop over PREV_h(·,x)
    (≤ 2N^(1-ε) heavy values), (h,l) is one lookup W[NEXT](y,x), (l,l) loops over NEXT_l(y,·)
    (< 3/2 N^ε tuples): O(N^max(ε,1-ε)).
    """
    nxt, prev = NEXT[role], PREV[role]
    next_h, next_l = parts[nxt, HEAVY], parts[nxt, LIGHT]
    prev_h, prev_l = parts[prev, HEAVY], parts[prev, LIGHT]
    prev_heavy_into, next_light_out = prev_h.into(x), next_l.out(y)
    t_a = _dot(prev_heavy_into, next_h.out(y)) + _dot(prev_heavy_into, next_light_out)  # Σ_z PREV_h(z,x)·NEXT(y,z)
    t_b = views[nxt].get((y, x), 0)
    t_c = _dot(next_light_out, prev_l.into(x))  # Σ_z NEXT_l(y,z)·PREV_l(z,x)
    return t_a + t_b + t_c, 1 + len(prev_heavy_into) + len(next_light_out)


def _dot(a: Mapping[Hashable, int], b: Mapping[Hashable, int]) -> int:
    """Σ_z a[z]·b[z] over the keys of both, looping over the smaller (the bound above holds either way)."""
    if len(b) < len(a):
        a, b = b, a
    return sum(q * b[z] for z, q in a.items() if z in b)


def move_value(parts: Mapping[tuple[str, str], Part], views: Mapping[str, dict[Key, int]],
               role: str, x: Hashable, src: str, dst: str) -> int:
    """Move x's tuples of K = ``role`` from part ``src`` to ``dst``; returns the loop steps taken.

    Only W[K] and W[PREV] change, Q does not, as Q is split-independent
    (docs/kinds/triangle.md#batches): light -> heavy adds K(x,·) ⋈ NEXT_l to W[K] and subtracts
    PREV_h ⋈ K(x,·) from W[PREV]; heavy -> light the reverse. O(deg(x)·(3/2 N^ε + 2N^(1-ε))).
    """
    sign = 1 if dst == HEAVY else -1
    tuples = dict(parts[role, src].out(x))
    next_l, prev_h = parts[NEXT[role], LIGHT], parts[PREV[role], HEAVY]
    view, prev_view = views[role], views[PREV[role]]
    steps = 0
    for y, p in tuples.items():
        steps += 1 + len(next_l.out(y)) + len(prev_h.into(x))
        add_all(view, (((x, z), sign * p * q) for z, q in next_l.out(y).items()))
        add_all(prev_view, (((z, y), -sign * q * p) for z, q in prev_h.into(x).items()))
        parts[role, src].add(x, y, -p)
        parts[role, dst].add(x, y, p)
    return steps


def split_strict(relations: Relations, theta: float) -> tuple[dict[tuple[str, str], Part], dict[str, dict[Key, int]]]:
    """Strict partition (Def. 8: heavy iff degree ≥ θ) and the three views W[K] = K_h ⋈ NEXT_l.

    O(|D|) for the partition plus O(N^(1+min(ε,1-ε))) for the views (Prop. 13).
    """
    parts = {(role, u): Part() for role in ROLES for u in (HEAVY, LIGHT)}
    for role in ROLES:
        degree: dict[Hashable, int] = {}
        for (x, _), p in relations[role].items():
            degree[x] = degree.get(x, 0) + (p != 0)
        for (x, y), p in relations[role].items():
            if p:
                parts[role, HEAVY if degree[x] >= theta else LIGHT].add(x, y, p)
    views: dict[str, dict[Key, int]] = {}
    for role in ROLES:
        heavy, next_l = parts[role, HEAVY], parts[NEXT[role], LIGHT]
        view: dict[Key, int] = {}
        for (x, y), p in heavy.items():
            add_all(view, (((x, z), p * q) for z, q in next_l.out(y).items()))
        views[role] = view
    return parts, views


def add_all(view: dict[Key, int], deltas: Iterable[tuple[Key, int]]) -> None:
    """view[k] += d for each (k, d), dropping keys that reach 0."""
    for key, d in deltas:
        new = view.get(key, 0) + d
        if new:
            view[key] = new
        else:
            view.pop(key, None)
