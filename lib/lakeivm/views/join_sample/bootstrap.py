"""Exact re-bootstrap of a join reservoir from a snapshot (static sampler of Zhao et al., SIGMOD 2018).

Why it is exact, and when it is used: docs/kinds/join_sample.md#restarts-and-exact-re-bootstrap.

After r real items, Algorithm L's sample S is a uniform k-subset and w ~ Beta(k, r−k+1)
independently of S. So a reservoir can be rebuilt exactly from any database state: count
n = |Q(R)| bottom-up (Yannakakis), draw k distinct positions of [0, n), resolve each to its join
result by descending exact counts with prefix sums, and draw w from its Beta law. This is the
policy for deletes and updates, which the paper's insert-only algorithm cannot process, and for
lost state or an initial backfill. Cost O(|E|·N) to count plus O(k·|E|·log N) to resolve.
"""
from __future__ import annotations

import random
from bisect import bisect_right
from itertools import accumulate
from math import prod

from .index import JoinIndex, Key, RowId, exact_counts


def bootstrap_sample(index: JoinIndex, k: int, rng: random.Random) -> tuple[list[tuple[RowId, ...]], float | None]:
    """A uniform k-subset of the join in ``index`` and w ~ Beta(k, n−k+1); w is None when n <= k (all results kept)."""
    sampler = StaticJoinSampler(index)
    n = sampler.total
    items = [sampler.resolve(z) for z in rng.sample(range(n), min(k, n))]
    return items, (rng.betavariate(k, n - k + 1) if n > k else None)


class StaticJoinSampler:
    """Position -> join result over exact counts, rooted at the spec's first relation (Zhao et al. 2018,
    cited in §2.2).

    Results are numbered root tuple by root tuple (insertion order), and within one by mixed-radix
    digits over the root's children, most significant first, recursively.
    """

    def __init__(self, index: JoinIndex) -> None:
        self.index = index
        self.counts = exact_counts(index)
        self.root = index.spec.names[0]
        self.root_edges = index.edges_into(self.root)
        self.groups: dict[int, dict[Key, tuple[list[RowId], list[int]]]] = {}
        root_rows = index.rows[self.root]
        self.root_ids = list(root_rows)
        self.root_cum = list(accumulate(self._weight(self.root_edges, root_rows[r]) for r in self.root_ids))
        self.total = self.root_cum[-1] if self.root_cum else 0

    def resolve(self, z: int) -> tuple[RowId, ...]:
        """The z-th join result as row ids in spec order, O(|E|·log N)."""
        out: list[RowId] = [None] * len(self.index.slot)
        j = bisect_right(self.root_cum, z)
        row_id = self.root_ids[j]
        out[self.index.slot[self.root]] = row_id
        self._resolve_row(self.root_edges, self.index.rows[self.root][row_id], z - (self.root_cum[j - 1] if j else 0), out)
        return tuple(out)

    def _weight(self, edges: list[int], row: tuple) -> int:
        return prod(self.counts[c].get(self._key(c, row), 0) for c in edges)

    def _key(self, edge: int, parent_row: tuple) -> Key:
        return tuple(parent_row[p] for p in self.index.edges[edge].edge.parent_key)

    def _resolve_row(self, edges: list[int] | tuple[int, ...], row: tuple, z: int, out: list[RowId]) -> None:
        for c in reversed(edges):
            key = self._key(c, row)
            z, digit = divmod(z, self.counts[c][key])
            self._resolve_key(c, key, digit, out)

    def _resolve_key(self, edge: int, key: Key, z: int, out: list[RowId]) -> None:
        ids, cum = self._group(edge, key)
        j = bisect_right(cum, z)
        child = self.index.edges[edge].edge
        out[self.index.slot[child.child]] = ids[j]
        row = self.index.rows[child.child][ids[j]]
        self._resolve_row(child.children, row, z - (cum[j - 1] if j else 0), out)

    def _group(self, edge: int, key: Key) -> tuple[list[RowId], list[int]]:
        """Rows of the edge's child with this key and their cumulative subtree counts, built once per key."""
        if edge not in self.groups:
            e = self.index.edges[edge].edge
            table: dict[Key, tuple[list[RowId], list[int]]] = {}
            for rid, row in self.index.rows[e.child].items():
                weight = self._weight(list(e.children), row)
                if weight:
                    ids, cum = table.setdefault(tuple(row[p] for p in e.child_key), ([], []))
                    ids.append(rid)
                    cum.append((cum[-1] if cum else 0) + weight)
            self.groups[edge] = table
        return self.groups[edge][key]
