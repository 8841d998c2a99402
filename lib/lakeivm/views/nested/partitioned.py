"""TPC-H Q17 per correlation group: each part's contribution replayed on its own (RPAI §4.6, digest §6.3).

Q17's nested aggregate is correlated by equality on the part key, so its value is a sum of
independent per-part contributions, ``mult[pk] · Σ{extendedprice : 5·cnt·quantity < Σquantity}``
(see ``evaluators.Q17``). ``contribution_steps`` replays one part's commits on a Q17 evaluator
loaded with that part's stored sums only, and returns the part's contribution before the run and
its change at every step (one source commit) that moves it. The maintainer runs it per part key
with Spark's ``applyInPandas``, sums the changes per step and accumulates them over the steps on the
driver, so the result after every commit is exact and no part's index is ever on the driver.

Input rows, one per stored key or change: ``(kind, step, pk, quantity, price, brand, container, m)``
with ``kind`` one of the constants below; ``m`` is the stored count or the signed multiplicity.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from itertools import groupby
from typing import Any

from .evaluators import Q17
from .events import Event, LineitemRow, PartRow

LINE_STATE, PART_STATE, LINE_EVENT, PART_EVENT = range(4)
BEFORE = -1  # the step of a part's contribution before the run's first commit


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
