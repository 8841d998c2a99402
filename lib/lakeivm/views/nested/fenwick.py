"""Fenwick-tree ordered aggregate index over a key domain declared up front.

Why keyed by a column: docs/kinds/nested.md#keyed-by-the-column-not-by-the-aggregate.

The batch maintainer knows every key a run can touch before it applies the delta (the persisted
keys plus the distinct keys of the delta), so it declares that domain and every operation is
O(log G) for G domain keys. A key outside the domain triggers an O(G) rebuild (:meth:`reserve`)
that also drops keys whose sums went to zero. Keys are columns, never aggregate values, so tied
aggregates are never merged (docs/kinds/nested.md#tied-aggregate-values).
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from sortedcontainers import SortedList

from lakeivm.errors import InvalidInput
from lakeivm.views.nested.index import Key, Predicate, Sums, _check_deltas, _count_negatives, \
    check_against_sorted_list


class FenwickSums:
    """Fenwick trees (one per sum component) over a sorted key domain, plus the live keys.

    ``add``, ``get``, the prefix sums and both threshold searches (binary lifting) cost O(log G);
    ``reserve`` of new keys costs O(G).
    """

    def __init__(self, width: int, domain: Iterable[Key] = ()) -> None:
        if width < 1:
            raise InvalidInput(f"an index needs at least one sum per key, got width={width}")
        self.width = width
        self._live: SortedList = SortedList()
        self._negatives = [0] * width
        self._rebuild(sorted(set(domain)), {})

    def __len__(self) -> int:
        return len(self._live)

    @classmethod
    def from_items(cls, width: int, items: Iterable[tuple[Key, Sequence[Any]]], domain: Iterable[Key] = ()) -> FenwickSums:
        """Build from persisted (key, sums) rows plus extra ``domain`` keys. O(G log G).

        The rows are absolute per-key sums (docs/kinds/nested.md#state-commits-and-query-texts).
        Rows with the same key are added up; the sort dominates, the tree build itself is O(G).
        """
        cells: dict[Key, list[Any]] = {}
        for key, sums in items:
            sums = _check_deltas(key, sums, width)
            cell = cells.setdefault(key, [0] * width)
            for i, v in enumerate(sums):
                cell[i] += v
        index = cls(width)
        live = {k: tuple(v) for k, v in cells.items() if any(v)}
        index._rebuild(sorted(set(domain).union(live)), live)
        index._live = SortedList(live)
        for vals in live.values():
            _count_negatives(index._negatives, None, vals)
        return index

    def reserve(self, keys: Iterable[Key]) -> None:
        """Extend the domain by ``keys`` (and drop empty keys) in one O(G) rebuild."""
        new = set(keys).difference(self._position)
        if new:
            cells = {k: self.get(k) for k in self._live}
            self._rebuild(sorted(new.union(cells)), cells)

    def add(self, key: Key, deltas: Sequence[Any]) -> None:
        """Add signed ``deltas`` to ``key``'s sums. O(log G), or O(G) for a key outside the domain."""
        deltas = _check_deltas(key, deltas, self.width)
        if not any(deltas):
            return
        if key not in self._position:
            self.reserve([key])
        i = self._position[key]
        old = [col[i - 1] for col in self._values]
        new = [a + d for a, d in zip(old, deltas)]
        _count_negatives(self._negatives, old, new)
        n = len(self._keys)
        self._totals = [t + d for t, d in zip(self._totals, deltas)]
        for tree, col, d in zip(self._trees, self._values, deltas):
            if d:
                col[i - 1] += d
                j = i
                while j <= n:
                    tree[j] += d
                    j += j & -j
        if any(old) and not any(new):
            self._live.remove(key)
        elif not any(old):
            self._live.add(key)

    def get(self, key: Key) -> Sums:
        """Sums stored at ``key`` (zeros if absent). O(1)."""
        i = self._position.get(key)
        return (0,) * self.width if i is None else tuple(col[i - 1] for col in self._values)

    def total(self) -> Sums:
        """Sums over all keys. O(1)."""
        return tuple(self._totals)

    def sum_le(self, key: Key) -> Sums:
        """Sums over keys <= ``key``. O(log G)."""
        return self._prefix(bisect_right(self._keys, key))

    def sum_lt(self, key: Key) -> Sums:
        """Sums over keys < ``key``. O(log G)."""
        return self._prefix(bisect_left(self._keys, key))

    def sum_ge(self, key: Key) -> Sums:
        """Sums over keys >= ``key``. O(log G)."""
        return tuple(t - p for t, p in zip(self.total(), self.sum_lt(key)))

    def sum_gt(self, key: Key) -> Sums:
        """Sums over keys > ``key``. O(log G)."""
        return tuple(t - p for t, p in zip(self.total(), self.sum_le(key)))

    def first_key_where(self, component: int, pred: Predicate) -> tuple[Key | None, Sums]:
        """Smallest live key k with ``pred(sum_le(k)[component])``, and the sums over keys < k.

        ``pred`` must be monotone in the running sum and the component non-negative. O(log G).
        """
        self.check_searchable(component)
        if not self._live:
            return None, self.total()
        if pred(0):
            return self._live[0], (0,) * self.width
        pos = self._lift(self._trees[component], lambda s: not pred(s))
        if pos == len(self._keys):
            return None, self.total()
        return self._keys[pos], self._prefix(pos)

    def last_key_where(self, component: int, pred: Predicate) -> tuple[Key | None, Sums]:
        """Largest live key k with ``pred(sum_ge(k)[component])``, and the sums over keys > k. O(log G)."""
        self.check_searchable(component)
        total = self.total()
        if not self._live or not pred(total[component]):
            return None, total
        pos = self._lift(self._trees[component], lambda s: pred(total[component] - s))
        if pos == len(self._keys):
            return self._live[-1], (0,) * self.width
        return self._keys[pos], tuple(t - p for t, p in zip(total, self._prefix(pos + 1)))

    def items(self) -> Iterator[tuple[Key, Sums]]:
        """(key, sums) of the live keys in key order. O(n)."""
        for key in self._live:
            yield key, self.get(key)

    def check_invariants(self) -> None:
        """Assert a sorted unique domain, trees equal to a rebuild from the point values, live keys
        exactly the non-zero ones, and agreement with a sorted-list brute force."""
        keys = self._keys
        assert all(a < b for a, b in zip(keys, keys[1:])), "domain not strictly increasing"
        assert all(self._position[k] == i + 1 for i, k in enumerate(keys)), "position map stale"
        for tree, col in zip(self._trees, self._values):
            assert tree == _build(col), "Fenwick tree differs from a rebuild"
        assert self._totals == [sum(col) for col in self._values], "running totals stale"
        live = [k for k in keys if any(self.get(k))]
        assert list(self._live) == live, "live keys differ from the non-zero keys"
        check_against_sorted_list(self, [(k, self.get(k)) for k in live], self._negatives)

    def _rebuild(self, keys: list[Key], cells: dict[Key, Sums]) -> None:
        self._keys = keys
        self._position = {k: i + 1 for i, k in enumerate(keys)}
        self._values = [[cells.get(k, (0,) * self.width)[c] for k in keys] for c in range(self.width)]
        self._trees = [_build(col) for col in self._values]
        self._totals = [sum(col) for col in self._values]

    def _prefix(self, i: int) -> Sums:
        out = []
        for tree in self._trees:
            acc, j = 0, i
            while j:
                acc += tree[j]
                j -= j & -j
            out.append(acc)
        return tuple(out)

    def _lift(self, tree: list[Any], holds: Predicate) -> int:
        """Largest position p with ``holds(prefix(p))``, given ``holds(0)`` and monotone ``holds``."""
        n = len(self._keys)
        pos, acc, step = 0, 0, 1 << n.bit_length()
        while step:
            nxt = pos + step
            if nxt <= n and holds(acc + tree[nxt]):
                pos, acc = nxt, acc + tree[nxt]
            step >>= 1
        return pos

    def check_searchable(self, component: int) -> None:
        """InvalidInput unless every key's ``component`` is non-negative (its running sum monotone)."""
        if self._negatives[component]:
            raise InvalidInput(
                f"threshold search on sum #{component} needs non-negative weights, but "
                f"{self._negatives[component]} key(s) have a negative total; reject rows with "
                "negative weight at ingestion (docs/kinds/nested.md#non-negative-weights)"
            )


def _build(values: list[Any]) -> list[Any]:
    """Fenwick array (1-based, index 0 unused) from point values in key order. O(G)."""
    n = len(values)
    tree = [0] + list(values)
    for i in range(1, n + 1):
        j = i + (i & -i)
        if j <= n:
            tree[j] += tree[i]
    return tree
