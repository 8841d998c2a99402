"""The ordered aggregate index against a sorted-list oracle under random insert/delete streams."""
from __future__ import annotations

import random
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakeivm.errors import InvalidInput
from lakeivm.views.nested.fenwick import FenwickSums
from lakeivm.views.nested.index import TreapSums

WIDTH = 3


def make_treap(domain: list[int]) -> TreapSums:
    return TreapSums(WIDTH, seed=1)


def make_fenwick(domain: list[int]) -> FenwickSums:
    return FenwickSums(WIDTH, domain)


def make_fenwick_growing(domain: list[int]) -> FenwickSums:
    return FenwickSums(WIDTH, domain[: len(domain) // 3])


FACTORIES = [make_treap, make_fenwick, make_fenwick_growing]


class SortedListOracle:
    """Brute force: a dict of live keys, scanned in sorted order for every query."""

    def __init__(self) -> None:
        self.cells: dict[int, list[int]] = {}

    def add(self, key: int, deltas: list[int]) -> None:
        cell = [a + b for a, b in zip(self.cells.get(key, [0] * WIDTH), deltas)]
        if any(cell):
            self.cells[key] = cell
        else:
            self.cells.pop(key, None)

    def pairs(self) -> list[tuple[int, tuple[int, ...]]]:
        return [(k, tuple(self.cells[k])) for k in sorted(self.cells)]

    def sum_where(self, keep) -> tuple[int, ...]:
        acc = [0] * WIDTH
        for k, v in self.cells.items():
            if keep(k):
                acc = [a + b for a, b in zip(acc, v)]
        return tuple(acc)

    def first(self, c: int, pred) -> tuple[int | None, tuple[int, ...]]:
        for k, _ in self.pairs():
            if pred(self.sum_where(lambda x: x <= k)[c]):
                return k, self.sum_where(lambda x: x < k)
        return None, self.sum_where(lambda x: True)

    def last(self, c: int, pred) -> tuple[int | None, tuple[int, ...]]:
        for k, _ in reversed(self.pairs()):
            if pred(self.sum_where(lambda x: x >= k)[c]):
                return k, self.sum_where(lambda x: x > k)
        return None, self.sum_where(lambda x: True)


def compare(index, oracle: SortedListOracle, probes: list[int]) -> None:
    assert list(index.items()) == oracle.pairs()
    assert index.total() == oracle.sum_where(lambda k: True)
    for x in probes:
        assert index.get(x) == tuple(oracle.cells.get(x, [0] * WIDTH))
        assert index.sum_le(x) == oracle.sum_where(lambda k: k <= x)
        assert index.sum_lt(x) == oracle.sum_where(lambda k: k < x)
        assert index.sum_ge(x) == oracle.sum_where(lambda k: k >= x)
        assert index.sum_gt(x) == oracle.sum_where(lambda k: k > x)
    for c in range(WIDTH):
        if any(v[c] < 0 for v in oracle.cells.values()):
            with pytest.raises(InvalidInput, match="non-negative"):
                index.first_key_where(c, lambda s: s > 0)
            continue
        for t in probes:
            assert index.first_key_where(c, lambda s: 2 * s > t) == oracle.first(c, lambda s: 2 * s > t)
            assert index.last_key_where(c, lambda s: 2 * s > t) == oracle.last(c, lambda s: 2 * s > t)
    index.check_invariants()


op = st.tuples(st.integers(0, 12), st.lists(st.integers(-1, 3), min_size=WIDTH, max_size=WIDTH), st.booleans())


@pytest.mark.parametrize("factory", FACTORIES)
@settings(max_examples=60, deadline=None)
@given(ops=st.lists(op, max_size=40), probes=st.lists(st.integers(-1, 13), min_size=1, max_size=5))
def test_index_matches_sorted_list_oracle(factory, ops, probes) -> None:
    """Inserts and deletes (a delete undoes an earlier insert, possibly to empty), ties, zero weights."""
    index, oracle = factory(list(range(13))), SortedListOracle()
    inserted: list[tuple[int, list[int]]] = []
    for key, deltas, delete in ops:
        if delete and inserted:
            key, deltas = inserted.pop(random.Random(key).randrange(len(inserted)))
            deltas = [-d for d in deltas]
        else:
            inserted.append((key, deltas))
        index.add(key, deltas)
        oracle.add(key, deltas)
        compare(index, oracle, probes)


@pytest.mark.parametrize("factory", FACTORIES)
def test_seeded_stream_with_deletes_to_empty(factory) -> None:
    rng = random.Random(11)
    index, oracle = factory(list(range(40))), SortedListOracle()
    live: list[tuple[int, list[int]]] = []
    for step in range(600):
        if live and (rng.random() < 0.45 or step > 500):
            key, deltas = live.pop(rng.randrange(len(live)))
            deltas = [-d for d in deltas]
        else:
            key, deltas = rng.randrange(40), [1, rng.choice([0, 0, 1, 5]), rng.randrange(100)]
            live.append((key, list(deltas)))
        index.add(key, deltas)
        oracle.add(key, deltas)
        if step % 25 == 0 or step > 590:
            compare(index, oracle, [rng.randrange(-1, 41) for _ in range(4)])
    assert len(index) == 0 and index.total() == (0, 0, 0)
    assert index.first_key_where(1, lambda s: True) == (None, (0, 0, 0))


@pytest.mark.parametrize("factory", FACTORIES)
def test_zero_weight_keys_stay_separate(factory) -> None:
    """Ties in the running weight (a zero-volume key) are not merged with their neighbour."""
    index = factory(list(range(10)))
    index.add(3, [1, 5, 15])
    index.add(4, [1, 0, 0])
    index.add(6, [1, 2, 12])
    assert list(index.items()) == [(3, (1, 5, 15)), (4, (1, 0, 0)), (6, (1, 2, 12))]
    assert index.first_key_where(1, lambda s: s >= 5) == (3, (0, 0, 0))
    assert index.first_key_where(1, lambda s: s > 5) == (6, (2, 5, 15))
    assert index.last_key_where(1, lambda s: s >= 2) == (6, (0, 0, 0))
    assert index.last_key_where(1, lambda s: s > 2) == (3, (2, 2, 12))
    index.add(4, [0, 3, 12])
    assert index.first_key_where(1, lambda s: s > 5) == (4, (1, 5, 15))
    index.check_invariants()


@pytest.mark.parametrize("factory", FACTORIES)
def test_negative_weight_rejected_by_threshold_search(factory) -> None:
    index = factory(list(range(10)))
    index.add(2, [1, 4, 0])
    index.add(5, [1, -1, 0])
    assert index.sum_le(9) == (2, 3, 0)
    with pytest.raises(InvalidInput, match="negative"):
        index.first_key_where(1, lambda s: s >= 2)
    with pytest.raises(InvalidInput, match="negative"):
        index.last_key_where(1, lambda s: s >= 2)
    index.add(5, [0, 1, 0])
    assert index.first_key_where(1, lambda s: s >= 2) == (2, (0, 0, 0))
    index.check_invariants()


@pytest.mark.parametrize("factory", FACTORIES)
def test_bad_input_named(factory) -> None:
    index = factory([1, 2])
    with pytest.raises(InvalidInput, match="NULL"):
        index.add(None, [1, 1, 1])
    with pytest.raises(InvalidInput, match="NULL weight"):
        index.add(1, [1, None, 1])
    with pytest.raises(InvalidInput, match="3 sums"):
        index.add(1, [1, 1])


def test_decimal_keys_and_fraction_thresholds() -> None:
    for index in (TreapSums(2), FenwickSums(2, [Decimal("1.10"), Decimal("2.25")])):
        index.add(Decimal("1.10"), [Decimal("0.5"), 1])
        index.add(Decimal("2.25"), [Decimal("1.5"), 1])
        assert index.sum_le(Fraction(11, 10)) == (Decimal("0.5"), 1)
        assert index.sum_lt(Fraction(11, 10)) == (0, 0)
        assert index.first_key_where(0, lambda s: 4 * s > 3 * 2) == (Decimal("2.25"), (Decimal("0.5"), 1))
        index.check_invariants()


def test_fenwick_from_persisted_items_equals_incremental() -> None:
    rng = random.Random(5)
    rows = [(rng.randrange(30), [rng.randrange(3), rng.randrange(-2, 5), rng.randrange(50)]) for _ in range(200)]
    built = FenwickSums.from_items(WIDTH, rows, domain=[100, 101])
    incremental, oracle = TreapSums(WIDTH), SortedListOracle()
    for key, sums in rows:
        incremental.add(key, sums)
        oracle.add(key, sums)
    assert list(built.items()) == list(incremental.items()) == oracle.pairs()
    compare(built, oracle, [rng.randrange(-1, 102) for _ in range(6)])
    built.add(100, [1, 1, 1])
    oracle.add(100, [1, 1, 1])
    compare(built, oracle, [99, 100, 101])
