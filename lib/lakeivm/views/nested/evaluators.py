"""Incremental evaluators of the shipped nested-aggregate queries (paper §2, §4.3).

Each evaluator is a trigger program in the sense of the paper (§4.1): ``apply(event)`` updates its
indexes for one signed source row, and ``result()`` returns the query's current value with exact
arithmetic (int, Decimal or Fraction) and ``None`` where SQL gives NULL (no qualifying row). The SQL
texts are in :mod:`lakeivm.views.nested.queries`. Indexes are created by ``make_index(width)``
(default :class:`~lakeivm.views.nested.index.TreapSums`); the batch maintainer can pass a factory
returning Fenwick indexes over the run's key domain.

Thresholds are compared cross-multiplied (``4*S > 3*T`` for ``0.75*T < S``) so that integers and
Decimals stay exact; the constants (``c`` in ``c*T``) are parameters, Fractions > 0, defaulting to
the paper's. Volumes (the threshold weights) must be >= 0: a negative one is rejected.

State import (docs/kinds/nested.md#state-commits-and-query-texts): ``STATE`` names, per source
table, the key fields and the per-key sums (each a product of fields; ``()`` is the row count) that
the batch maintainer persists as rows of absolute per-key sums (a GROUP BY of the snapshot);
``load(table, rows)`` builds the evaluator from such ``(keys, sums)`` rows, equal to replaying the
rows one by one.
"""
from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from fractions import Fraction
from typing import Any

from lakeivm.errors import InvalidInput
from lakeivm.views.nested.events import BookRow, Event, LineitemRow, PartRow
from lakeivm.views.nested.index import OrderedSums, TreapSums
from lakeivm.views.nested.pai import PaiMap

IndexFactory = Callable[[int], OrderedSums]
StateRows = Iterable[tuple[tuple[Any, ...], tuple[Any, ...]]]
BOOK_PV = ((), ("volume",), ("price", "volume"))


class _Evaluator:
    """Shared plumbing: the index factory and the per-commit helper."""

    tables: tuple[str, ...] = ()
    STATE: dict[str, tuple[tuple[str, ...], tuple[tuple[str, ...], ...]]] = {}

    def __init__(self, make_index: IndexFactory = TreapSums) -> None:
        self._make_index = make_index

    def apply_all(self, events: Iterable[Event]) -> Any:
        """Apply every event of one source commit; return ``result()`` at the commit boundary."""
        for event in events:
            self.apply(event)
        return self.result()

    def apply(self, event: Event) -> None:
        raise NotImplementedError

    def result(self) -> Any:
        raise NotImplementedError

    def load(self, table: str, rows: StateRows) -> None:
        """Add persisted per-key sums of ``table`` (layout ``STATE[table]``), as if their rows were applied."""
        raise NotImplementedError

    def _check_table(self, event: Event) -> None:
        if event.table not in self.tables:
            raise InvalidInput(f"{type(self).__name__} reads {self.tables}, not {event.table!r}")


class Example21(_Evaluator):
    """Example 2.1 (equality correlation) with a PAI map keyed by 2*Σvolume per price: O(1)/event."""

    tables = ("bids",)
    STATE = {"bids": (("price",), BOOK_PV)}

    def __init__(self, make_index: IndexFactory = TreapSums, c: Fraction = Fraction(1, 2)) -> None:
        super().__init__(make_index)
        self._num, self._den = _ratio(c)
        self._pai = PaiMap(2)
        self._total = 0

    def apply(self, event: Event) -> None:
        self._check_table(event)
        row, x = _book_row(event, need_nonnegative=False), event.sign
        self._add(row.price, x, x * row.volume, x * row.price * row.volume)

    def load(self, table: str, rows: StateRows) -> None:
        for (price,), (count, volume, pv) in rows:
            self._add(price, count, volume, pv)

    def result(self) -> Any:
        count, value = self._pai.at(self._num * self._total)
        return value if count else None

    def _add(self, price: Any, count: int, volume: Any, pv: Any) -> None:
        """The group at ``price`` is keyed by den*Σvol, compared with num*T (``c*T = Σvol``)."""
        self._total += volume
        self._pai.add(price, self._den * volume, (count, pv))

    def check_invariants(self) -> None:
        self._pai.check_invariants()


class Vwap(_Evaluator):
    """VWAP (Example 2.2) with one index price -> (count, Σvol, Σprice*vol): O(log n)/event (§2.2.3, §4.3)."""

    tables = ("bids",)
    STATE = {"bids": (("price",), BOOK_PV)}

    def __init__(self, make_index: IndexFactory = TreapSums, c: Fraction = Fraction(3, 4)) -> None:
        super().__init__(make_index)
        self._c = Fraction(c)
        self._bids = make_index(3)

    def apply(self, event: Event) -> None:
        self._check_table(event)
        row, x = _book_row(event), event.sign
        self._bids.add(row.price, (x, x * row.volume, x * row.price * row.volume))

    def load(self, table: str, rows: StateRows) -> None:
        for (price,), sums in rows:
            _check_weight(table, price, sums[1])
            self._bids.add(price, tuple(sums))

    def result(self) -> Any:
        cut, before = _cut(self._bids, self._c)  # c*T < Σ{vol : price <= p}
        return None if cut is None else self._bids.total()[2] - before[2]

    def check_invariants(self) -> None:
        self._bids.check_invariants()


class Mst(_Evaluator):
    """MST (missed trades) as independently filtered bids x asks, grouped per broker (§4.3, several relations).

    Asks and bids are indexed price -> (count, Σvol, Σprice*vol), and the bids once more per broker
    price -> (count, Σprice*vol). The qualifying rows of each side form a price range
    ``[cut, max price)``: ``S_>`` is non-increasing in price, and the top price is excluded because
    its ``SUM`` over an empty set is NULL. ``result()`` costs O(B log n) for B brokers.
    """

    tables = ("bids", "asks")
    STATE = {"bids": (("broker_id", "price"), BOOK_PV), "asks": (("price",), BOOK_PV)}

    def __init__(self, make_index: IndexFactory = TreapSums, c_asks: Fraction = Fraction(1, 4),
                 c_bids: Fraction = Fraction(1, 4), per_broker: bool = True) -> None:
        super().__init__(make_index)
        self._c = {"asks": Fraction(c_asks), "bids": Fraction(c_bids)}
        self._sides = {"bids": make_index(3), "asks": make_index(3)}
        self._brokers: dict[Hashable, OrderedSums] = {}
        self._per_broker = per_broker  # False: only the global sides (``cuts``), brokers kept elsewhere

    def apply(self, event: Event) -> None:
        self._check_table(event)
        row, x = _book_row(event), event.sign
        self._add(event.table, row.broker_id, row.price, (x, x * row.volume, x * row.price * row.volume))

    def load(self, table: str, rows: StateRows) -> None:
        for keys, sums in rows:
            _check_weight(table, keys, sums[1])
            broker, price = keys if table == "bids" else (None, keys[0])
            self._add(table, broker, price, tuple(sums))

    def _add(self, table: str, broker: Hashable, price: Any, sums: tuple[Any, Any, Any]) -> None:
        self._sides[table].add(price, sums)
        if table == "bids" and self._per_broker:
            index = self._brokers.get(broker)
            if index is None:
                index = self._brokers[broker] = self._make_index(2)
            index.add(price, (sums[0], sums[2]))
            if not len(index):
                del self._brokers[broker]

    def result(self) -> dict[Hashable, Any]:
        cuts = self.cuts()
        if cuts is None:
            return {}
        bids, ask_count, ask_pv = cuts
        return self.combine({broker: broker_sums(index, bids) for broker, index in self._brokers.items()},
                            ask_count, ask_pv)

    def cuts(self) -> tuple[tuple[Any, Any], int, Any] | None:
        """The global part: the bids' qualifying price range and the qualifying asks' (count, Σprice*vol).

        ``None`` when either side has no qualifying row. Both cuts can move on any update, so every
        broker's result can change; the per-broker part is :func:`broker_sums`.
        """
        asks = _qualifying_range(self._sides["asks"], self._c["asks"])
        bids = _qualifying_range(self._sides["bids"], self._c["bids"])
        if asks is None or bids is None:
            return None
        return (bids, *_range_sums(self._sides["asks"], asks, (0, 2)))

    @staticmethod
    def combine(brokers: dict[Hashable, tuple[int, Any]], ask_count: int, ask_pv: Any) -> dict[Hashable, Any]:
        """The result from each broker's qualifying (count, Σprice*vol) and the qualifying asks'."""
        return {broker: count * ask_pv - ask_count * pv for broker, (count, pv) in brokers.items() if count and ask_count}

    def check_invariants(self) -> None:
        for index in self._sides.values():
            index.check_invariants()
        for index in self._brokers.values():
            index.check_invariants()
            assert len(index), "empty broker index kept"
        merged: dict[Any, list[Any]] = {}
        for index in self._brokers.values():
            for price, (count, pv) in index.items():
                cell = merged.setdefault(price, [0, 0])
                cell[0] += count
                cell[1] += pv
        expect = {p: [c, pv] for p, (c, _, pv) in self._sides["bids"].items()}
        assert {p: c for p, c in merged.items() if any(c)} == expect, "per-broker bids differ from all bids"


class Psp(_Evaluator):
    """PSP (price spread) with one index per side volume -> (count, Σprice, Σvol): O(log n)/event (§4.3).

    ``Σ_{B'×A'} (a.price - b.price) = |B'|·ΣA'.price - |A'|·ΣB'.price``, where each side keeps the
    rows with ``volume > T/10000``, a suffix of the volume-keyed index.
    """

    tables = ("bids", "asks")
    STATE = {"bids": (("volume",), ((), ("price",))), "asks": (("volume",), ((), ("price",)))}

    def __init__(self, make_index: IndexFactory = TreapSums, c_bids: Fraction = Fraction(1, 10000),
                 c_asks: Fraction = Fraction(1, 10000)) -> None:
        super().__init__(make_index)
        self._c = {"bids": Fraction(c_bids), "asks": Fraction(c_asks)}
        self._sides = {"bids": make_index(3), "asks": make_index(3)}

    def apply(self, event: Event) -> None:
        self._check_table(event)
        row, x = _book_row(event, need_nonnegative=False), event.sign
        self._sides[event.table].add(row.volume, (x, x * row.price, x * row.volume))

    def load(self, table: str, rows: StateRows) -> None:
        for (volume,), (count, price) in rows:
            self._sides[table].add(volume, (count, price, count * volume))

    def result(self) -> Any:
        (bid_count, bid_price), (ask_count, ask_price) = (self._above_tenth_mille(s) for s in ("bids", "asks"))
        if not bid_count or not ask_count:
            return None
        return bid_count * ask_price - ask_count * bid_price

    def check_invariants(self) -> None:
        for index in self._sides.values():
            index.check_invariants()

    def _above_tenth_mille(self, side: str) -> tuple[Any, Any]:
        index = self._sides[side]
        count, price, _ = index.sum_gt(Fraction(index.total()[2]) * self._c[side])
        return count, price


class Q17(_Evaluator):
    """TPC-H Q17 with one index per partkey quantity -> (count, Σextendedprice): O(log n)/event (§4.3).

    After each change only the touched partkey's contribution is recomputed:
    ``mult[pk] * Σ{extendedprice : 5*cnt[pk]*quantity < Σquantity[pk]}``. ``result()`` is the exact
    ``SUM(extendedprice) / 7`` as a Fraction, None when no lineitem qualifies.
    """

    tables = ("lineitem", "part")
    STATE = {"lineitem": (("l_partkey", "l_quantity"), ((), ("l_extendedprice",))),
             "part": (("p_partkey", "p_brand", "p_container"), ((),))}

    def __init__(self, make_index: IndexFactory = TreapSums, brand: str = "Brand#23",
                 container: str = "WRAP BOX", c: Fraction = Fraction(1, 5), divisor: Fraction = Fraction(7)) -> None:
        super().__init__(make_index)
        self._brand, self._container = brand, container
        self._c, self._divisor = Fraction(c), Fraction(divisor)
        self._parts: dict[Hashable, OrderedSums] = {}
        self._sum_quantity: dict[Hashable, Any] = {}
        self._mult: dict[Hashable, int] = {}
        self._contrib: dict[Hashable, tuple[Any, Any]] = {}
        self._count, self._sum = 0, 0

    def apply(self, event: Event) -> None:
        self._check_table(event)
        x = event.sign
        if isinstance(event.row, LineitemRow):
            pk, qty, price = _lineitem(event.row)
            self._add_lineitems(pk, qty, x, x * price)
        else:
            part: PartRow = event.row
            pk = part.p_partkey
            self._add_parts(part, x)
        self._refresh(pk)

    def load(self, table: str, rows: StateRows) -> None:
        touched = set()
        for keys, sums in rows:
            if table == "lineitem":
                (pk, qty), (count, price) = keys, sums
                self._add_lineitems(pk, qty, count, price)
            else:
                pk = keys[0]
                self._add_parts(PartRow(*keys), sums[0])
            touched.add(pk)
        for pk in touched:
            self._refresh(pk)

    def result(self) -> Fraction | None:
        return self.result_of(self._count, self._sum)

    def result_of(self, count: int, total: Any) -> Fraction | None:
        """The query's value for a qualifying-line count and Σextendedprice (summed over parts)."""
        return Fraction(total) / self._divisor if count else None

    def totals(self) -> tuple[int, Any]:
        """(count, Σextendedprice) of the qualifying lines: the sum of the parts' contributions."""
        return self._count, self._sum

    def _add_lineitems(self, pk: Hashable, qty: Any, count: int, price: Any) -> None:
        index = self._parts.get(pk)
        if index is None:
            index = self._parts[pk] = self._make_index(2)
        index.add(qty, (count, price))
        self._sum_quantity[pk] = self._sum_quantity.get(pk, 0) + count * qty
        if not len(index):
            del self._parts[pk], self._sum_quantity[pk]

    def _add_parts(self, part: PartRow, count: int) -> None:
        pk = part.p_partkey
        if part.p_brand == self._brand and part.p_container == self._container:
            self._mult[pk] = self._mult.get(pk, 0) + count
            if not self._mult[pk]:
                del self._mult[pk]

    def check_invariants(self) -> None:
        for pk, index in self._parts.items():
            index.check_invariants()
            assert sum(q * c for q, (c, _) in index.items()) == self._sum_quantity[pk], f"Σquantity of {pk}"
        assert self._sum == sum(s for _, s in self._contrib.values()), "result sum out of date"
        assert self._count == sum(c for c, _ in self._contrib.values()), "result count out of date"

    def _refresh(self, pk: Hashable) -> None:
        count, value = 0, 0
        index, mult = self._parts.get(pk), self._mult.get(pk, 0)
        if index is not None and mult:
            cnt = index.total()[0]
            count, value = index.sum_lt(self._c * Fraction(self._sum_quantity[pk]) / cnt)
            count, value = mult * count, mult * value
        old_count, old_value = self._contrib.pop(pk, (0, 0))
        if count or value:
            self._contrib[pk] = (count, value)
        self._count += count - old_count
        self._sum += value - old_value


def _cut(index: OrderedSums, share: Fraction) -> tuple[Any, Any]:
    """Smallest price p with Σ{vol : price <= p} > share*T, and the sums below p (VWAP and MST).

    Cross-multiplied (``den*S > num*T``) so that int and Decimal sums stay exact.
    """
    total = index.total()[1]
    num, den = _ratio(share)
    return index.first_key_where(1, lambda running: den * running > num * total)


def _qualifying_range(index: OrderedSums, c: Fraction) -> tuple[Any, Any] | None:
    """MST's qualifying prices ``[cut, top)``: ``c*T > S_>(p) = T - S_<=(p)`` with ``S_>`` non-NULL."""
    cut, _ = _cut(index, 1 - c)
    if cut is None:
        return None
    top, _ = index.last_key_where(0, lambda count: count > 0)
    return (cut, top)


def _range_sums(index: OrderedSums, bounds: tuple[Any, Any], components: tuple[int, int]) -> tuple[Any, Any]:
    low, high = bounds
    lt_high, lt_low = index.sum_lt(high), index.sum_lt(low)
    return tuple(lt_high[c] - lt_low[c] for c in components)


def broker_sums(index: OrderedSums, bids: tuple[Any, Any] | None) -> tuple[int, Any]:
    """One broker's bids (index price -> (count, Σprice*vol)) inside MST's qualifying range ``bids``."""
    return (0, 0) if bids is None else _range_sums(index, bids, (0, 1))


def _ratio(c: Fraction) -> tuple[int, int]:
    c = Fraction(c)
    return c.numerator, c.denominator


def _check_weight(table: str, key: Any, weight: Any) -> None:
    if weight is None or weight < 0:
        raise InvalidInput(
            f"{table} key {key!r} has volume sum {weight!r}: the ordered index needs volumes >= 0 and not NULL "
            "(docs/kinds/nested.md#non-negative-weights); reject such rows at ingestion"
        )


def _book_row(event: Event, need_nonnegative: bool = True) -> BookRow:
    row = event.row
    if row.price is None or row.volume is None:
        raise InvalidInput(f"NULL column in {event.table} row {row!r}; filter NULLs before maintenance")
    if need_nonnegative and row.volume < 0:
        raise InvalidInput(
            f"negative volume in {event.table} row {row!r}: the ordered index needs volumes >= 0 "
            "(docs/kinds/nested.md#non-negative-weights); reject such rows at ingestion"
        )
    return row


def _lineitem(row: LineitemRow) -> tuple[Any, Any, Any]:
    if row.l_partkey is None or row.l_quantity is None or row.l_extendedprice is None:
        raise InvalidInput(f"NULL column in lineitem row {row!r}; filter NULLs before maintenance")
    return row.l_partkey, row.l_quantity, row.l_extendedprice
