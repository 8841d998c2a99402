"""Oracles for the nested kind: brute-force evaluators and the DBToaster-style delta rules.

They mirror Abeysinghe, He and Rompf, *Efficient Incrementalization of Correlated Nested Aggregate
Queries using Relative Partial Aggregate Indexes (RPAI)*: the queries of §2 and its baseline. The
tests check ``lakeivm.views.nested`` against them and ``lakeivm bench nested`` times the delta rules
beside the index; no product code runs them.

:class:`NaiveEvaluator` keeps the source tables as multisets and evaluates the SQL of
:mod:`lakeivm.views.nested.queries` literally on every ``result()``: a nested loop over the distinct
rows with SQL's NULL semantics (``SUM`` over no rows is NULL, and a comparison with NULL is not
true). It shares no code with the indexes, so it is the tests' brute-force oracle; it costs O(D^2)
per result for D distinct rows.

:class:`DeltaRuleVwap` is the DBToaster-style baseline the paper compares against (§2, Fig. 2b):
it maintains the first-order maps in O(1) per event but re-tests the comparison for every distinct
price binding, re-summing the inner map each time, so a result costs O(G^2) for G prices.
:class:`DeltaRuleQ17` is the same baseline for TPC-H Q17: per-part first-order maps,
and the touched part's comparison re-tested for each of its distinct quantities, O(Q_pk) per event.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Iterable
from fractions import Fraction
from typing import Any

from lakeivm.errors import InvalidInput
from lakeivm.views.nested.events import BookRow, Event, PartRow

Tables = dict[str, Counter]


class NaiveEvaluator:
    """Recompute one query from the current multisets of its source tables on every ``result()``."""

    def __init__(self, query: str) -> None:
        if query not in _QUERIES:
            raise InvalidInput(f"no naive evaluator for {query!r}; choose from {sorted(_QUERIES)}")
        self.query = query
        self._tables: Tables = {"bids": Counter(), "asks": Counter(), "lineitem": Counter(), "part": Counter()}

    def apply(self, event: Event) -> None:
        """Insert or delete one copy of the row; deleting an absent row is an error."""
        table = self._tables[event.table]
        if event.sign < 0 and not table[event.row]:
            raise InvalidInput(f"delete of a row absent from {event.table}: {event.row!r}")
        table[event.row] += event.sign
        if not table[event.row]:
            del table[event.row]

    def apply_all(self, events: Iterable[Event]) -> Any:
        """Apply one commit's events and return the result at the commit boundary."""
        for event in events:
            self.apply(event)
        return self.result()

    def result(self) -> Any:
        """The query's value on the current tables, recomputed from scratch."""
        return _QUERIES[self.query](self._tables)


def example_2_1(tables: Tables) -> Any:
    """Example 2.1 over bids (A = price, B = volume), literally."""
    bids = tables["bids"]
    total = _sql_sum(r.volume * m for r, m in bids.items())
    out = None
    for b, m in bids.items():
        group = _sql_sum(r.volume * n for r, n in bids.items() if r.price == b.price)
        if _sql_cmp(lambda t, g: Fraction(t) / 2 == Fraction(g), total, group):
            out = (out or 0) + m * b.price * b.volume
    return out


def vwap(tables: Tables) -> Any:
    """VWAP (Example 2.2), literally."""
    bids = tables["bids"]
    total = _sql_sum(r.volume * m for r, m in bids.items())
    out = None
    for b, m in bids.items():
        below = _sql_sum(r.volume * n for r, n in bids.items() if r.price <= b.price)
        if _sql_cmp(lambda t, s: Fraction(3, 4) * Fraction(t) < Fraction(s), total, below):
            out = (out or 0) + m * b.price * b.volume
    return out


def mst(tables: Tables) -> dict[Hashable, Any]:
    """MST grouped by bid broker, literally (pairs of qualifying bids and asks)."""
    asks = [(a, m) for a, m in tables["asks"].items() if _mst_keeps(tables["asks"], a)]
    out: dict[Hashable, Any] = {}
    for b, mb in tables["bids"].items():
        if not _mst_keeps(tables["bids"], b):
            continue
        for a, ma in asks:
            value = mb * ma * (a.price * a.volume + -1 * b.price * b.volume)
            out[b.broker_id] = out.get(b.broker_id, 0) + value
    return out


def psp(tables: Tables) -> Any:
    """PSP (price spread), literally."""
    out = None
    bids = [(b, m) for b, m in tables["bids"].items() if _psp_keeps(tables["bids"], b)]
    for a, ma in tables["asks"].items():
        if not _psp_keeps(tables["asks"], a):
            continue
        for b, mb in bids:
            out = (out or 0) + ma * mb * (a.price + -1 * b.price)
    return out


def q17(tables: Tables, brand: str = "Brand#23", container: str = "WRAP BOX") -> Fraction | None:
    """TPC-H Q17, literally; the exact ``SUM(extendedprice) / 7`` as a Fraction."""
    lineitem = tables["lineitem"]
    total = None
    for p, mp in tables["part"].items():
        if p.p_brand != brand or p.p_container != container:
            continue
        group = [(r, n) for r, n in lineitem.items() if r.l_partkey == p.p_partkey]
        count = sum(n for _, n in group)
        avg = Fraction(sum(r.l_quantity * n for r, n in group)) / count if count else None
        for line, ml in group:
            if _sql_cmp(lambda q, a: Fraction(q) < Fraction(1, 5) * a, line.l_quantity, avg):
                total = (total or 0) + mp * ml * line.l_extendedprice
    return None if total is None else Fraction(total) / 7


class DeltaRuleVwap:
    """DBToaster-style VWAP: first-order maps, then every price binding re-tested per result.

    Maps (paper Fig. 2b, corrected): ``T = Σvol``, ``inner[price] = Σvol``, ``outer[price] =
    (count, Σprice*vol)``. ``apply`` is O(1); ``result`` is O(G^2) for G distinct prices.
    """

    def __init__(self) -> None:
        self._total = 0
        self._inner: dict[Any, Any] = {}
        self._outer: dict[Any, tuple[int, Any]] = {}

    def apply(self, event: Event) -> None:
        row, x = event.row, event.sign
        self._total += x * row.volume
        self._inner[row.price] = self._inner.get(row.price, 0) + x * row.volume
        count, pv = self._outer.get(row.price, (0, 0))
        count, pv = count + x, pv + x * row.price * row.volume
        if count:
            self._outer[row.price] = (count, pv)
        else:
            del self._outer[row.price], self._inner[row.price]

    def apply_all(self, events: Iterable[Event]) -> Any:
        for event in events:
            self.apply(event)
        return self.result()

    def result(self) -> Any:
        out = None
        for price, (_, pv) in self._outer.items():
            below = sum(v for p, v in self._inner.items() if p <= price)
            if 3 * self._total < 4 * below:
                out = (out or 0) + pv
        return out


class DeltaRuleQ17:
    """DBToaster-style TPC-H Q17: per-part first-order maps, the touched part's bindings re-tested per event.

    Maps: ``lines[pk] = {quantity: [count, Σextendedprice]}`` (DBToaster's lineitem map keyed by
    the correlation key and the compared column), ``cnt[pk]``, ``sumq[pk]`` (the nested AVG's
    sums), ``mult[pk]`` (part rows passing the brand/container filter) and ``contrib[pk]`` (the
    part's share of the outer SUM). An event updates the maps in O(1) and then, if the part
    passes the filter, re-tests ``quantity < c * sumq/cnt`` for every distinct quantity of that
    part (cross-multiplied, exact): O(Q_pk) per event, Q_pk <= 50 on TPC-H data, with no ordered
    index. ``load`` takes the per-key sums of :attr:`Q17.STATE
    <lakeivm.views.nested.evaluators.Q17.STATE>` (which are exactly these first-order maps).
    """

    def __init__(self, brand: str = "Brand#23", container: str = "WRAP BOX", c: Fraction = Fraction(1, 5),
                 divisor: Fraction = Fraction(7)) -> None:
        self._brand, self._container = brand, container
        c = Fraction(c)
        self._num, self._den = c.numerator, c.denominator
        self._divisor = Fraction(divisor)
        self._lines: dict[Hashable, dict[Any, list[Any]]] = {}
        self._cnt: dict[Hashable, int] = {}
        self._sumq: dict[Hashable, Any] = {}
        self._mult: dict[Hashable, int] = {}
        self._contrib: dict[Hashable, tuple[int, Any]] = {}
        self._count, self._sum = 0, 0

    def apply(self, event: Event) -> None:
        row, x = event.row, event.sign
        if isinstance(row, PartRow):
            self._add_part(row, x)
            self._refresh(row.p_partkey)
        else:
            self._add_lines(row.l_partkey, row.l_quantity, x, x * row.l_extendedprice)
            self._refresh(row.l_partkey)

    def apply_all(self, events: Iterable[Event]) -> Any:
        for event in events:
            self.apply(event)
        return self.result()

    def load(self, table: str, rows: Iterable[tuple[tuple[Any, ...], tuple[Any, ...]]]) -> None:
        """Add per-key sums (``Q17.STATE`` layout) as if their rows were applied."""
        touched = set()
        for keys, sums in rows:
            if table == "lineitem":
                self._add_lines(keys[0], keys[1], sums[0], sums[1])
            else:
                self._add_part(PartRow(*keys), sums[0])
            touched.add(keys[0])
        for pk in touched:
            self._refresh(pk)

    def result(self) -> Fraction | None:
        return Fraction(self._sum) / self._divisor if self._count else None

    def _add_lines(self, pk: Hashable, qty: Any, count: int, price: Any) -> None:
        group = self._lines.get(pk)
        if group is None:
            group = self._lines[pk] = {}
            self._cnt[pk], self._sumq[pk] = 0, 0
        cell = group.get(qty)
        if cell is None:
            cell = group[qty] = [0, 0]
        cell[0] += count
        cell[1] += price
        if not cell[0]:
            del group[qty]
        self._cnt[pk] += count
        self._sumq[pk] += count * qty
        if not self._cnt[pk]:
            del self._lines[pk], self._cnt[pk], self._sumq[pk]

    def _add_part(self, part: PartRow, count: int) -> None:
        if part.p_brand == self._brand and part.p_container == self._container:
            pk = part.p_partkey
            self._mult[pk] = self._mult.get(pk, 0) + count
            if not self._mult[pk]:
                del self._mult[pk]

    def _refresh(self, pk: Hashable) -> None:
        """Re-test every distinct quantity of ``pk``: ``den*cnt*qty < num*Σqty`` (qty < c*AVG)."""
        count, value = 0, 0
        mult, group = self._mult.get(pk, 0), self._lines.get(pk)
        if mult and group:
            bound, scale = self._num * self._sumq[pk], self._den * self._cnt[pk]
            for qty, (n, price) in group.items():
                if scale * qty < bound:
                    count += n
                    value += price
            count, value = mult * count, mult * value
        old_count, old_value = self._contrib.pop(pk, (0, 0))
        if count or value:
            self._contrib[pk] = (count, value)
        self._count += count - old_count
        self._sum += value - old_value


def _sql_sum(values: Iterable[Any]) -> Any:
    """SQL SUM: None over no rows."""
    out = None
    for v in values:
        out = v if out is None else out + v
    return out


def _sql_cmp(test: Callable[[Any, Any], bool], left: Any, right: Any) -> bool:
    """A comparison in WHERE: NULL on either side is not true."""
    return left is not None and right is not None and test(left, right)


def _mst_keeps(side: Counter, row: BookRow) -> bool:
    total = _sql_sum(r.volume * m for r, m in side.items())
    above = _sql_sum(r.volume * m for r, m in side.items() if r.price > row.price)
    return _sql_cmp(lambda t, s: Fraction(1, 4) * Fraction(t) > Fraction(s), total, above)


def _psp_keeps(side: Counter, row: BookRow) -> bool:
    total = _sql_sum(r.volume * m for r, m in side.items())
    return _sql_cmp(lambda v, t: Fraction(v) > Fraction(1, 10000) * Fraction(t), row.volume, total)


_QUERIES: dict[str, Callable[[Tables], Any]] = {
    "example_2_1": example_2_1,
    "vwap": vwap,
    "mst": mst,
    "psp": psp,
    "q17": q17,
}
