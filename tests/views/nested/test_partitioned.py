"""Q17 per correlation group (what applyInPandas runs per part key): the parts' contribution changes, summed per
step and accumulated, equal the whole-query evaluator after every commit, starting from stored sums."""
from __future__ import annotations

import random
from collections import Counter
from decimal import Decimal

import pytest

from lakeivm.views.nested.evaluators import Q17
from lakeivm.views.nested.partitioned import BEFORE, LINE_EVENT, LINE_STATE, PART_EVENT, PART_STATE, contribution_steps
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
