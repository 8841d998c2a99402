"""Nested aggregates per partition key (partkey for Q17, broker for MST), each replayed on its own.

Why per key: docs/kinds/nested.md#state-commits-and-query-texts.

**TPC-H Q17** per correlation group (RPAI §4.3, correlated by equality).

Q17's nested aggregate is correlated by equality on the part key, so its value is a sum of
independent per-part contributions, ``mult[pk] · Σ{extendedprice : 5·cnt·quantity < Σquantity}``
(see ``evaluators.Q17``). ``contribution_steps`` replays one part's commits on a Q17 evaluator
loaded with that part's stored sums only, and returns the part's contribution before the run and
its change at every step (one source commit) that moves it. The maintainer runs it per part key
with Spark's ``applyInPandas``, sums the changes per step and accumulates them over the steps on the
driver, so the result after every commit is exact and no part's index is ever on the driver.

Input rows, one per stored key or change: ``(kind, step, pk, quantity, price, brand, container, m)``
with ``kind`` one of the constants below; ``m`` is the stored count or the signed multiplicity.

**MST** per broker (RPAI §4.3, two relations): its two cuts are global (every update can move them),
but given the bids' qualifying price range after every step, a broker's part of the result needs
only its own bids. ``broker_steps`` replays one broker's stored per-price sums and bid changes and
returns its qualifying (count, Σprice·volume) before the run and at every step that changes it; the
driver keeps the global sides (``Mst(per_broker=False)``), computes the ranges, and combines.
Input rows: ``(kind, step, price, count, price·volume)``, ``kind`` one of ``BID_STATE, BID_EVENT``.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from itertools import groupby
from typing import Any

from .evaluators import Q17, broker_sums
from .events import Event, LineitemRow, PartRow
from .index import TreapSums

LINE_STATE, PART_STATE, LINE_EVENT, PART_EVENT = range(4)
BID_STATE, BID_EVENT = range(2)
BEFORE = -1  # the step of a group's contribution before the run's first commit


def contribution_steps(params: Mapping[str, Any], rows: Iterable[tuple]) -> list[tuple[int, int, Any]]:
    """[(step, Δcount, Δsum)] of one part key: ``BEFORE`` with its stored contribution, then each step's change."""
    rows = list(rows)
    evaluator = Q17(**params)
    evaluator.load("lineitem", [((pk, qty), (m, price)) for kind, _, pk, qty, price, _, _, m in rows if kind == LINE_STATE])
    evaluator.load("part", [((pk, brand, container), (m,)) for kind, _, pk, _, _, brand, container, m in rows if kind == PART_STATE])
    previous = evaluator.totals()
    out = [(BEFORE, *previous)] if previous != (0, 0) else []
    events = sorted((r for r in rows if r[0] in (LINE_EVENT, PART_EVENT)), key=lambda r: r[1])
    for step, commit in groupby(events, key=lambda r: r[1]):
        for kind, _, pk, qty, price, brand, container, m in commit:
            event = (Event("lineitem", LineitemRow(pk, qty, price), 1 if m > 0 else -1) if kind == LINE_EVENT
                     else Event("part", PartRow(pk, brand, container), 1 if m > 0 else -1))
            for _ in range(abs(m)):
                evaluator.apply(event)
        now = evaluator.totals()
        if now != previous:
            out.append((int(step), now[0] - previous[0], now[1] - previous[1]))
            previous = now
    return out


def broker_steps(ranges: Sequence[tuple[Any, Any] | None], rows: Iterable[tuple]) -> list[tuple[int, int, Any]]:
    """[(step, count, Σprice·vol)] of one broker's qualifying bids: ``BEFORE``, then each step that changes them.

    ``ranges[0]`` is the bids' qualifying price range before the run, ``ranges[i + 1]`` after step
    ``i`` (``None``: no bid qualifies). Values are absolute, not changes; ``BEFORE`` is left out when
    it is (0, 0).
    """
    rows = list(rows)
    index = TreapSums(2)
    for kind, _, price, count, pv in rows:
        if kind == BID_STATE:
            index.add(price, (count, pv))
    previous = broker_sums(index, ranges[0])
    out = [(BEFORE, *previous)] if previous != (0, 0) else []
    events: dict[int, list[tuple]] = {}
    for row in rows:
        if row[0] == BID_EVENT:
            events.setdefault(int(row[1]), []).append(row)
    for step in range(len(ranges) - 1):
        if step not in events and ranges[step + 1] == ranges[step]:
            continue
        for _, _, price, count, pv in events.get(step, ()):
            index.add(price, (count, pv))
        now = broker_sums(index, ranges[step + 1])
        if now != previous:
            out.append((step, *now))
            previous = now
    return out
