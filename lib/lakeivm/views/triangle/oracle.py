"""Brute-force oracles for the triangle count Q and its auxiliary views (Kara et al. §3).

Deliberately naive and independent of the heavy/light machinery: plain nested loops over dicts.
They stay beside the core, not in ``lakeivm.testing``: ``core.check_state`` (the kind's
``check_invariants``) recomputes Q and the views with them, and a core imports nothing above its floor.
"""
from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping

Key = tuple[Hashable, Hashable]


def count_triangles(r: Mapping[Key, int], s: Mapping[Key, int], t: Mapping[Key, int]) -> int:
    """Q = Σ_{a,b,c} R(a,b)·S(b,c)·T(c,a); O(|R|·max out-degree of S)."""
    s_out: dict[Hashable, list[tuple[Hashable, int]]] = {}
    for (b, c), q in s.items():
        if q:
            s_out.setdefault(b, []).append((c, q))
    return sum(p * q * t.get((c, a), 0) for (a, b), p in r.items() for c, q in s_out.get(b, ()))


def count_graph_triangles(edges: Mapping[Key, int]) -> int:
    """Σ E(a,b)·E(b,c)·E(c,a) for one edge relation joined with itself (paper App. A)."""
    return count_triangles(edges, edges, edges)


def join_view(heavy: Mapping[Key, int], light_next: Mapping[Key, int]) -> dict[Key, int]:
    """W(x, z) = Σ_y heavy(x, y)·light_next(y, z), without zero entries."""
    view: dict[Key, int] = {}
    for (x, y), p in heavy.items():
        for (y2, z), q in light_next.items():
            if y == y2:
                view[x, z] = view.get((x, z), 0) + p * q
    return {k: v for k, v in view.items() if v}


def apply_changes(relation: dict[Key, int], changes: Iterable[tuple[Key, int]]) -> dict[Key, int]:
    """relation[k] += p for each change, dropping keys that reach 0; returns ``relation``."""
    for key, p in changes:
        new = relation.get(key, 0) + p
        if new:
            relation[key] = new
        else:
            relation.pop(key, None)
    return relation
