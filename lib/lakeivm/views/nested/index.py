"""Ordered aggregate index: sort key -> vector of signed sums, with prefix sums and threshold search.

This is the column-keyed equivalent of the paper's RPAI (Abeysinghe et al., SIGMOD'22, §3;
docs/kinds/nested.md#keyed-by-the-column-not-by-the-aggregate). In every query shape the paper
optimizes, the RPAI key of a group is a prefix sum over the correlated column, so an index keyed by
the *column* with subtree sums answers the same questions: ``getSum`` is :meth:`sum_le`, and the
``shiftKeys`` of the paper is implicit. Because the index is keyed by the column and never by an
aggregate value, tied aggregate values are never merged (the literal RPAI's tie bug cannot happen:
docs/kinds/nested.md#tied-aggregate-values).

Two interchangeable structures implement :class:`OrderedSums`:

* :class:`TreapSums` -- a treap with a subtree-sum vector per node; dynamic keys, O(log n)
  expected per operation.
* :class:`~lakeivm.views.nested.fenwick.FenwickSums` -- a Fenwick tree over a key domain declared
  up front (the persisted keys plus the keys of the run's delta); O(log G) per operation, and an
  O(G) rebuild when a key outside the domain arrives.

Batch maintenance knows its domain before it applies the delta, so it uses the Fenwick tree: flat
arrays, no node objects, cheaper per event and to load than the treap, which serves anything that
cannot name its keys in advance. The literal RPAI (parent-relative keys) is not built: its relative
keys and rotations cost more per operation than either, and it merges tied keys.

Threshold searches (:meth:`first_key_where`, :meth:`last_key_where`) need the searched component to
be non-negative at every key (docs/kinds/nested.md#non-negative-weights); otherwise the running sum
is not monotone and they raise :class:`~lakeivm.errors.InvalidInput`. Keys whose sums are all zero
are dropped: include a count component when a key with zero weight must stay visible.
"""
from __future__ import annotations

import random
from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import Any, Protocol

from lakeivm.errors import InvalidInput

Key = Any
Sums = tuple[Any, ...]
Predicate = Callable[[Any], bool]


class OrderedSums(Protocol):
    """What the nested-aggregate evaluators need from an ordered aggregate index."""

    width: int

    def add(self, key: Key, deltas: Sequence[Any]) -> None: ...
    def get(self, key: Key) -> Sums: ...
    def total(self) -> Sums: ...
    def sum_le(self, key: Key) -> Sums: ...
    def sum_lt(self, key: Key) -> Sums: ...
    def sum_ge(self, key: Key) -> Sums: ...
    def sum_gt(self, key: Key) -> Sums: ...
    def first_key_where(self, component: int, pred: Predicate) -> tuple[Key | None, Sums]: ...
    def last_key_where(self, component: int, pred: Predicate) -> tuple[Key | None, Sums]: ...
    def check_searchable(self, component: int) -> None: ...
    def items(self) -> Iterator[tuple[Key, Sums]]: ...
    def __len__(self) -> int: ...
    def check_invariants(self) -> None: ...


class _Node:
    __slots__ = ("key", "prio", "left", "right", "vals", "sums")

    def __init__(self, key: Key, prio: float, vals: list[Any]) -> None:
        self.key = key
        self.prio = prio
        self.left: _Node | None = None
        self.right: _Node | None = None
        self.vals = vals
        self.sums = list(vals)


class TreapSums:
    """Treap keyed by the sort key with a subtree-sum vector per node, for keys not known in advance.

    Every operation costs O(log n) expected for n live keys: ``add`` is one search plus an
    insert/delete by split/merge or a walk down one path; sums and threshold searches are one
    root-to-leaf descent.
    """

    def __init__(self, width: int, seed: int = 0) -> None:
        if width < 1:
            raise InvalidInput(f"an index needs at least one sum per key, got width={width}")
        self.width = width
        self._root: _Node | None = None
        self._size = 0
        self._negatives = [0] * width
        self._rng = random.Random(seed)

    def __len__(self) -> int:
        return self._size

    def add(self, key: Key, deltas: Sequence[Any]) -> None:
        """Add signed ``deltas`` to ``key``'s sums, creating or dropping the key. O(log n)."""
        deltas = _check_deltas(key, deltas, self.width)
        node = self._find(key)
        if node is None:
            if any(deltas):
                self._root = _insert(self._root, _Node(key, self._rng.random(), deltas))
                self._size += 1
                _count_negatives(self._negatives, None, deltas)
            return
        new = [a + d for a, d in zip(node.vals, deltas)]
        _count_negatives(self._negatives, node.vals, new)
        if not any(new):
            self._root = _delete(self._root, key)
            self._size -= 1
            return
        walk = self._root
        while walk is not None:
            walk.sums = [s + d for s, d in zip(walk.sums, deltas)]
            if key == walk.key:
                walk.vals = new
                break
            walk = walk.left if key < walk.key else walk.right

    def get(self, key: Key) -> Sums:
        """Sums stored at ``key`` (zeros if absent). O(log n)."""
        node = self._find(key)
        return tuple(node.vals) if node is not None else (0,) * self.width

    def total(self) -> Sums:
        """Sums over all keys. O(1)."""
        return tuple(self._root.sums) if self._root is not None else (0,) * self.width

    def sum_le(self, key: Key) -> Sums:
        """Sums over keys <= ``key`` (the paper's ``getSum``). O(log n)."""
        return self._prefix(key, inclusive=True)

    def sum_lt(self, key: Key) -> Sums:
        """Sums over keys < ``key``. O(log n)."""
        return self._prefix(key, inclusive=False)

    def sum_ge(self, key: Key) -> Sums:
        """Sums over keys >= ``key``. O(log n)."""
        return _minus(self.total(), self.sum_lt(key))

    def sum_gt(self, key: Key) -> Sums:
        """Sums over keys > ``key``. O(log n)."""
        return _minus(self.total(), self.sum_le(key))

    def first_key_where(self, component: int, pred: Predicate) -> tuple[Key | None, Sums]:
        """Smallest key k with ``pred(sum_le(k)[component])``, and the sums over keys < k.

        ``pred`` must be monotone (False then True) in the running sum; the component must be
        non-negative at every key. Returns ``(None, total())`` if no key passes. O(log n).
        """
        self.check_searchable(component)
        acc = [0] * self.width
        node = self._root
        while node is not None:
            left = node.left
            if left is not None and pred(acc[component] + left.sums[component]):
                node = left
                continue
            if left is not None:
                _add_into(acc, left.sums)
            if pred(acc[component] + node.vals[component]):
                return node.key, tuple(acc)
            _add_into(acc, node.vals)
            node = node.right
        return None, tuple(acc)

    def last_key_where(self, component: int, pred: Predicate) -> tuple[Key | None, Sums]:
        """Largest key k with ``pred(sum_ge(k)[component])``, and the sums over keys > k.

        The mirror of :meth:`first_key_where`, searching from the top end. O(log n).
        """
        self.check_searchable(component)
        acc = [0] * self.width
        node = self._root
        while node is not None:
            right = node.right
            if right is not None and pred(acc[component] + right.sums[component]):
                node = right
                continue
            if right is not None:
                _add_into(acc, right.sums)
            if pred(acc[component] + node.vals[component]):
                return node.key, tuple(acc)
            _add_into(acc, node.vals)
            node = node.left
        return None, tuple(acc)

    def items(self) -> Iterator[tuple[Key, Sums]]:
        """(key, sums) in key order. O(n)."""
        stack: list[_Node] = []
        node = self._root
        while stack or node is not None:
            while node is not None:
                stack.append(node)
                node = node.left
            node = stack.pop()
            yield node.key, tuple(node.vals)
            node = node.right

    def check_invariants(self) -> None:
        """Assert treap order, heap priorities, subtree sums, no all-zero keys, and agreement with
        a sorted-list brute force on every key and threshold."""
        nodes: list[_Node] = []
        _collect(self._root, nodes)
        keys = [n.key for n in nodes]
        assert all(a < b for a, b in zip(keys, keys[1:])), "keys not strictly increasing"
        assert len(nodes) == self._size, "size counter out of date"
        for n in nodes:
            assert any(n.vals), f"all-zero key {n.key!r} kept"
            for child in (n.left, n.right):
                assert child is None or child.prio <= n.prio, "heap order broken"
            expect = list(n.vals)
            for child in (n.left, n.right):
                if child is not None:
                    _add_into(expect, child.sums)
            assert expect == n.sums, f"subtree sums wrong at {n.key!r}"
        check_against_sorted_list(self, [(n.key, tuple(n.vals)) for n in nodes], self._negatives)

    def _find(self, key: Key) -> _Node | None:
        node = self._root
        while node is not None:
            if key == node.key:
                return node
            node = node.left if key < node.key else node.right
        return None

    def _prefix(self, key: Key, inclusive: bool) -> Sums:
        acc = [0] * self.width
        node = self._root
        while node is not None:
            if node.key < key or (inclusive and node.key == key):
                if node.left is not None:
                    _add_into(acc, node.left.sums)
                _add_into(acc, node.vals)
                node = node.right
            else:
                node = node.left
        return tuple(acc)

    def check_searchable(self, component: int) -> None:
        """InvalidInput unless every key's ``component`` is non-negative (its running sum monotone)."""
        if self._negatives[component]:
            raise InvalidInput(
                f"threshold search on sum #{component} needs non-negative weights, but "
                f"{self._negatives[component]} key(s) have a negative total; reject rows with "
                "negative weight at ingestion (docs/kinds/nested.md#non-negative-weights)"
            )


def check_against_sorted_list(index: OrderedSums, pairs: list[tuple[Key, Sums]], negatives: list[int]) -> None:
    """Assert that ``index`` answers like a brute force over its sorted (key, sums) ``pairs``.

    Checks ``items``, ``len``, ``get``, ``total``, ``sum_le``/``sum_lt`` at every key, and both
    threshold searches at every reachable running sum of every non-negative component. O(n^2).
    """
    prefix = [(0,) * index.width]
    for _, vals in pairs:
        prefix.append(tuple(a + b for a, b in zip(prefix[-1], vals)))
    total = prefix[-1]
    assert list(index.items()) == pairs, "items() differ from the stored keys"
    assert len(index) == len(pairs), "len() differs from the number of live keys"
    assert negatives == [sum(1 for _, v in pairs if v[c] < 0) for c in range(index.width)], "negative counters"
    assert index.total() == total, "total() wrong"
    for i, (key, vals) in enumerate(pairs):
        assert index.get(key) == vals, f"get({key!r}) wrong"
        assert index.sum_le(key) == prefix[i + 1], f"sum_le({key!r}) wrong"
        assert index.sum_lt(key) == prefix[i], f"sum_lt({key!r}) wrong"
    for c in range(index.width):
        if negatives[c]:
            continue
        for i in range(len(pairs)):
            low = prefix[i + 1][c]
            j = next(j for j in range(len(pairs)) if prefix[j + 1][c] >= low)
            assert index.first_key_where(c, lambda s: s >= low) == (pairs[j][0], prefix[j]), \
                f"first_key_where(sum #{c} >= {low!r}) wrong"
            high = total[c] - prefix[i][c]
            j = max(j for j in range(len(pairs)) if total[c] - prefix[j][c] >= high)
            after = tuple(t - p for t, p in zip(total, prefix[j + 1]))
            assert index.last_key_where(c, lambda s: s >= high) == (pairs[j][0], after), \
                f"last_key_where(sum #{c} >= {high!r}) wrong"
        assert index.first_key_where(c, lambda s: False) == (None, total), "impossible threshold found a key"


def _check_deltas(key: Key, deltas: Sequence[Any], width: int) -> list[Any]:
    if key is None:
        raise InvalidInput("an index key is NULL; filter NULL keys out before maintenance (SQL drops them)")
    if not isinstance(key, Hashable):
        raise InvalidInput(f"index key {key!r} is not hashable; use an int, Decimal or tuple")
    if len(deltas) != width:
        raise InvalidInput(f"expected {width} sums per key, got {len(deltas)} for key {key!r}")
    if any(d is None for d in deltas):
        raise InvalidInput(f"NULL weight for key {key!r}; coalesce or filter NULLs before maintenance")
    return list(deltas)


def _count_negatives(negatives: list[int], old: Sequence[Any] | None, new: Sequence[Any]) -> None:
    for c, value in enumerate(new):
        negatives[c] += (value < 0) - (old is not None and old[c] < 0)


def _add_into(acc: list[Any], vec: Sequence[Any]) -> None:
    for i, v in enumerate(vec):
        acc[i] += v


def _minus(a: Sums, b: Sums) -> Sums:
    return tuple(x - y for x, y in zip(a, b))


def _pull(node: _Node) -> None:
    sums = list(node.vals)
    for child in (node.left, node.right):
        if child is not None:
            _add_into(sums, child.sums)
    node.sums = sums


def _split(node: _Node | None, key: Key) -> tuple[_Node | None, _Node | None]:
    """Split into (keys < key, keys > key); ``key`` itself is absent."""
    if node is None:
        return None, None
    if node.key < key:
        node.right, rest = _split(node.right, key)
        _pull(node)
        return node, rest
    rest, node.left = _split(node.left, key)
    _pull(node)
    return rest, node


def _merge(low: _Node | None, high: _Node | None) -> _Node | None:
    if low is None:
        return high
    if high is None:
        return low
    if low.prio > high.prio:
        low.right = _merge(low.right, high)
        _pull(low)
        return low
    high.left = _merge(low, high.left)
    _pull(high)
    return high


def _insert(node: _Node | None, new: _Node) -> _Node:
    if node is None:
        return new
    if new.prio > node.prio:
        new.left, new.right = _split(node, new.key)
        _pull(new)
        return new
    if new.key < node.key:
        node.left = _insert(node.left, new)
    else:
        node.right = _insert(node.right, new)
    _add_into(node.sums, new.vals)
    return node


def _delete(node: _Node | None, key: Key) -> _Node | None:
    assert node is not None, "deleting a key that is not in the treap"
    if key == node.key:
        return _merge(node.left, node.right)
    if key < node.key:
        node.left = _delete(node.left, key)
    else:
        node.right = _delete(node.right, key)
    _pull(node)
    return node


def _collect(node: _Node | None, out: list[_Node]) -> None:
    if node is not None:
        _collect(node.left, out)
        out.append(node)
        _collect(node.right, out)
