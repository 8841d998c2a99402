"""Per partition key (what applyInPandas runs): Q17's per-part contribution changes, summed per step and accumulated,
and MST's per-broker qualifying sums combined with the driver's global cuts, equal the whole-query evaluator after
every commit, starting from stored sums."""
from __future__ import annotations

import random
from collections import Counter
from decimal import Decimal

import pytest

from lakeivm.views.nested.evaluators import Mst, Q17
from lakeivm.views.nested.partitioned import (BEFORE, BID_EVENT, BID_STATE, LINE_EVENT, LINE_STATE, PART_EVENT, PART_STATE,
                                              broker_steps, contribution_steps)
from tests.views.nested.test_evaluators import book_stream
from tests.views.nested.test_state import CASES, q17_stream, state_rows

PARAMS = CASES["q17"][1]


def input_rows(live: dict[str, Counter], commits: list[list]) -> list[tuple]:
    """The maintainer's rows: stored per-key sums, then each commit's netted signed rows under its step number."""
    rows = [(LINE_STATE, None, pk, qty, price, None, None, cnt) for (pk, qty), (cnt, price) in state_rows(Q17, "lineitem", +live["lineitem"])]
    rows += [(PART_STATE, None, pk, None, None, brand, container, cnt) for (pk, brand, container), (cnt,) in state_rows(Q17, "part", +live["part"])]
    for step, commit in enumerate(commits):
        netted = Counter()
        for event in commit:
            netted[(event.table, event.row)] += event.sign
        for (table, row), m in netted.items():
            if m and table == "lineitem":
                rows.append((LINE_EVENT, step, row.l_partkey, row.l_quantity, row.l_extendedprice, None, None, m))
            elif m:
                rows.append((PART_EVENT, step, row.p_partkey, None, None, row.p_brand, row.p_container, m))
    return rows


@pytest.mark.parametrize("seed", range(8))
def test_summed_part_contributions_equal_the_evaluator_after_every_commit(seed):
    rng = random.Random(seed)
    events = q17_stream(rng, 300)
    if seed % 2:  # decimal prices and quantities, as TPC-H's DECIMAL(15,2)
        events = [e if e.table == "part" else type(e)(e.table, type(e.row)(e.row.l_partkey, Decimal(e.row.l_quantity) / 4,
                                                                           Decimal(e.row.l_extendedprice) / 100), e.sign)
                  for e in events]
    whole, live = Q17(**PARAMS), {"lineitem": Counter(), "part": Counter()}
    for event in events[:120]:  # the stored state the run starts from
        whole.apply(event)
        live[event.table][event.row] += event.sign
    cuts = sorted(rng.sample(range(121, 300), 12))
    commits = [events[a:b] for a, b in zip([120, *cuts], [*cuts, 300])]
    rows = input_rows(live, commits)
    changes = [c for pk in {r[2] for r in rows} for c in contribution_steps(PARAMS, [r for r in rows if r[2] == pk])]
    count = sum(c for step, c, _ in changes if step == BEFORE)
    total = sum(v for step, _, v in changes if step == BEFORE)
    assert whole.result_of(count, total) == whole.result()
    seen_values = set()
    for step, commit in enumerate(commits):
        for event in commit:
            whole.apply(event)
        count += sum(c for s, c, _ in changes if s == step)
        total += sum(v for s, _, v in changes if s == step)
        assert (count, total) == whole.totals() and whole.result_of(count, total) == whole.result(), step
        seen_values.add(whole.result())
    assert len(seen_values) > 1, "the stream never moved the result"


@pytest.mark.parametrize("seed", [s for s in range(16) if s not in (2, 15)])  # 2, 15: books whose MST stays empty
def test_per_broker_sums_with_global_cuts_equal_mst_after_every_commit(seed):
    rng = random.Random(seed)
    params = CASES["mst"][1]
    events = [e for e in book_stream(seed, decimal=seed % 2 == 1, zero_rate=0.2) if e.table in Mst.tables]
    whole, sides, live = Mst(**params), Mst(**params, per_broker=False), Counter()
    split = len(events) // 3
    for event in events[:split]:  # the stored state the run starts from
        whole.apply(event)
        live[event.table, event.row] += event.sign
    for table in Mst.tables:  # the driver's global sides, from the same stored sums
        sides.load(table, state_rows(Mst, table, Counter({r: m for (t, r), m in live.items() if t == table and m})))
    cuts = sorted(rng.sample(range(split + 1, len(events)), 15))
    commits = [events[a:b] for a, b in zip([split, *cuts], [*cuts, len(events)])]
    ranges, asks = [], []
    for commit in [[], *commits]:
        for event in commit:
            sides.apply(event)
        global_part = sides.cuts()
        ranges.append(None if global_part is None else global_part[0])
        asks.append(None if global_part is None else global_part[1:])
    bid_rows: dict[int, list[tuple]] = {}
    for (table, row), m in live.items():
        if table == "bids" and m:
            bid_rows.setdefault(row.broker_id, []).append((BID_STATE, None, row.price, m, m * row.price * row.volume))
    for step, commit in enumerate(commits):
        netted = Counter()
        for event in commit:
            netted[event.table, event.row] += event.sign
        for (table, row), m in netted.items():
            if table == "bids" and m:
                bid_rows.setdefault(row.broker_id, []).append((BID_EVENT, step, row.price, m, m * row.price * row.volume))
    per_step: dict[int, dict] = {}
    for broker, rows in bid_rows.items():
        for step, count, pv in broker_steps(ranges, rows):
            per_step.setdefault(step, {})[broker] = (count, pv)
    brokers = dict(per_step.get(BEFORE, {}))

    def combined(i):
        return {} if asks[i] is None else Mst.combine(brokers, *asks[i])

    assert combined(0) == whole.result()
    moved = set()
    for step, commit in enumerate(commits):
        for event in commit:
            whole.apply(event)
        brokers.update(per_step.get(step, {}))
        assert combined(step + 1) == whole.result(), step
        moved.add(repr(sorted(whole.result().items())))
    assert len(moved) > 1, "the stream never moved the result"
