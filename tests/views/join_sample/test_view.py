"""SampleView, the maintainer's pure layer: row ids for bag rows, self-join slots, canonical rebuilds,
and uniform samples over seeds across restarts and re-bootstraps (what the Spark maintainer runs)."""
from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from lakeivm.errors import StateError
from lakeivm.catalog.registry import classify, spec_from_dict
from lakeivm.views.join_sample.plan import plan_sample, row_id
from lakeivm.views.join_sample.view import SampleView

from .oracles import ALPHA, subset_chi2_pvalue

SCHEMAS = {"r": {"a": "int", "b": "int"}, "s": {"b": "int", "c": "int"}, "edges": {"src": "int", "dst": "int"}}
RS = "SELECT r.a, s.c FROM r JOIN s ON r.b = s.b"
PATHS = "SELECT e1.src AS x, e2.src AS y, e2.dst AS z FROM edges e1 JOIN edges e2 ON e1.dst = e2.src"


def make_plan(sql: str, k: int):
    spec = spec_from_dict({"name": "v", "sql": sql, "deadline": 60, "sample_size": k})
    return plan_sample(classify(spec, SCHEMAS)[1], spec.options)


def rows(bag: Counter, slots: int = 1) -> list:
    return [(row, m, (True,) * slots) for row, m in bag.items()]


def join_ids(plan, bags: dict[str, Counter]) -> set[tuple]:
    """Every join result as its tuple of source row ids (slot order), by nested loops over the bags."""
    results = {(): {}}
    for slot in plan.slots:
        attrs = plan.spec.attrs(slot.alias)
        grown = {}
        for ids, env in results.items():
            for row, m in bags[slot.table].items():
                keys = plan.join_values(slot, row)
                if keys is not None and all(env.get(a, v) == v for a, v in zip(attrs, keys)):
                    grown.update({(*ids, row_id(row, i)): {**env, **dict(zip(attrs, keys))} for i in range(m)})
        results = grown
    return set(results)


def sampled_ids(view: SampleView) -> list[tuple]:
    n = len(view.plan.slots)
    return [tuple(rec[-n:]) for rec in view.records()]


R0 = Counter({(1, 2): 1, (2, 2): 2, (3, 5): 1, (4, None): 1})
S0 = Counter({(7, 2): 1, (8, 5): 1})
R1 = Counter({(5, 5): 1, (2, 2): 1})  # one more copy of (2, 2): ids [2,2,2] after [2,2,0], [2,2,1]
S1 = Counter({(9, 2): 2, (6, 5): 1})


def test_records_carry_outputs_and_ids_of_real_join_results():
    plan = make_plan(RS, 4)
    view = SampleView.bootstrap(plan, {"r": rows(R0), "s": rows(S0)}, seed=3)
    assert set(sampled_ids(view)) <= join_ids(plan, {"r": R0, "s": S0}) and len(view.records()) == 4
    view.insert("r", rows(R1))
    view.insert("s", rows(S1))
    bags = {"r": R0 + R1, "s": S0 + S1}
    truth = join_ids(plan, bags)
    assert len(truth) == 4 * 3 + 2 * 2 and ("[2,2,2]", "[9,2,1]") in truth
    records = view.records()
    assert len(records) == 4 and len(set(sampled_ids(view))) == 4 and set(sampled_ids(view)) <= truth
    for slot, a, c, r_id, s_id in records:
        assert (a, c) == (json.loads(r_id)[0], json.loads(s_id)[0])
    view.sampler.check_invariants()


def test_self_join_slots_each_result_once_and_all_when_fewer_than_k():
    plan = make_plan(PATHS, 50)
    e0 = Counter({(1, 2): 1, (2, 3): 1})
    e1 = Counter({(2, 2): 1, (3, 1): 1})
    view = SampleView.bootstrap(plan, {"edges": rows(e0, 2)}, seed=0)
    view.insert("edges", rows(e1, 2))
    truth = join_ids(plan, {"edges": e0 + e1})
    assert ("[2,2,0]", "[2,2,0]") in truth  # an edge joined with itself
    assert sorted(sampled_ids(view)) == sorted(truth)


def test_filters_and_null_keys_keep_rows_out_of_their_slot():
    plan = make_plan(RS, 10)
    view = SampleView.bootstrap(plan, {"r": [((1, 2), 1, (False,)), ((4, None), 1, (True,))], "s": rows(S0)}, seed=0)
    assert view.records() == []
    view.insert("r", [((1, 2), 1, (True,))])
    assert sampled_ids(view) == [("[1,2,0]", "[7,2,0]")]


def index_shape(view: SampleView) -> list:
    """Counts and bucket membership per directed edge: what the index promises (§4.2), not bucket order."""
    return [({k: v for k, v in e.cnt.items() if v}, {rid: exp for rid, (exp, _) in e.where.items()}) for e in view.sampler.index.edges]


def test_index_rebuilt_from_a_snapshot_is_the_maintained_one_whatever_the_read_order():
    plan = make_plan(RS, 2)
    live = SampleView.bootstrap(plan, {"r": rows(R0), "s": rows(S0)}, seed=5)
    live.insert("r", rows(R1))
    state = json.loads(json.dumps(live.to_state()))
    resumed = []
    for order in range(3):
        tables = {"r": rows(R0 + R1), "s": rows(S0)}
        for table_rows in tables.values():
            random.Random(order).shuffle(table_rows)
        view = SampleView.resume(plan, state, tables)
        assert index_shape(view) == index_shape(live)
        view.insert("s", rows(S1))
        resumed.append((view.records(), view.to_state()))
    assert resumed[0] == resumed[1] == resumed[2]  # deterministic replay: a rerun draws the same sample
    with pytest.raises(StateError, match="another query or sample_size"):
        SampleView.resume(make_plan(RS, 3), state, {"r": rows(R0 + R1), "s": rows(S0)})


RUNS = 3000


def test_uniform_over_seeds_across_restarts_duplicates_and_a_rebootstrap():
    """χ² over all 2-subsets (``docs/kinds/join_sample.md#how-it-is-tested``): bootstrap, restart, insert, restart, insert; and a delete's re-bootstrap."""
    plan = make_plan(RS, 2)
    final = {"r": R0 + R1, "s": S0 + S1}
    population = sorted(join_ids(plan, final))
    after_delete = {"r": R0 + R1 - Counter({(2, 2): 1}), "s": S0}
    streamed, rebooted = [], []
    for seed in range(RUNS):
        view = SampleView.bootstrap(plan, {"r": rows(R0), "s": rows(S0)}, seed)
        view = SampleView.resume(plan, view.to_state(), {"r": rows(R0), "s": rows(S0)})
        view.insert("r", rows(R1))
        view = SampleView.resume(plan, view.to_state(), {"r": rows(R0 + R1), "s": rows(S0)})
        view.insert("s", rows(S1))
        streamed.append(sampled_ids(view))
        state = view.to_state()
        view = SampleView.bootstrap(plan, {t: rows(b) for t, b in after_delete.items()}, seed, rng_from=state)
        view.insert("s", rows(S1))
        rebooted.append(sampled_ids(view))
    assert subset_chi2_pvalue(streamed, population, 2) > ALPHA
    rebooted_population = sorted(join_ids(plan, {"r": after_delete["r"], "s": S0 + S1}))
    assert subset_chi2_pvalue(rebooted, rebooted_population, 2) > ALPHA
