"""Foreign-key merging (RSJoin §4.4): the plan's groups, PreJoin against a brute-force join, and samples through
merged groups that are real, complete, restartable and uniform over seeds."""
from __future__ import annotations

import json
import random
from collections import Counter
from itertools import product

import pytest

from lakeivm.errors import SpecError, UnsupportedQuery
from lakeivm.catalog.registry import classify, spec_from_dict
from lakeivm.views.join_sample.plan import UNIT, plan_sample
from lakeivm.views.join_sample.prejoin import PreJoin, split_id
from lakeivm.views.join_sample.view import SampleView

from .oracles import ALPHA, subset_chi2_pvalue

SCHEMAS = {
    "orders": {"o_orderkey": "int", "o_custkey": "int"},
    "lineitem": {"l_orderkey": "int", "l_linenumber": "int"},
    "customer": {"c_custkey": "int", "c_nation": "int"},
    "nation": {"n_nationkey": "int", "n_name": "string"},
}
OLC = ("SELECT o_orderkey, l_linenumber, c_custkey FROM orders JOIN lineitem ON l_orderkey = o_orderkey "
       "JOIN customer ON c_custkey = o_custkey")
OLCN = OLC.replace("c_custkey FROM", "c_custkey, n_name FROM") + " JOIN nation ON n_nationkey = c_nation"
CHAIN = ["lineitem -> orders", "orders -> customer"]


def make_plan(sql: str, k: int, foreign_keys=None):
    options = {"sample_size": k, **({"foreign_keys": foreign_keys} if foreign_keys is not None else {})}
    kind, query = classify(spec_from_dict({"name": "v", "sql": sql, "deadline": 60, **options}), SCHEMAS)
    assert kind == "join_sample"
    return plan_sample(query, options)


def test_a_foreign_key_chain_merges_into_one_relation_and_a_partial_one_keeps_the_link():
    whole = make_plan(OLC, 3, CHAIN)
    assert [(g.name, g.members, g.attrs) for g in whole.groups] == [("orders+lineitem+customer", ("orders", "lineitem", "customer"), (UNIT,))]
    assert whole.sampler_spec.to_mapping() == {"orders+lineitem+customer": [UNIT]}
    part = make_plan(OLCN, 3, ["lineitem -> orders"])
    assert part.sampler_spec.to_mapping() == {"orders+lineitem": ["customer.c_custkey"], "customer": ["customer.c_custkey", "customer.c_nation"],
                                              "nation": ["customer.c_nation"]}
    plain = make_plan(OLC, 3)
    assert plain.sampler_spec == plain.spec and not plain.merged
    assert len({whole.fingerprint(), part.fingerprint(), plain.fingerprint(), make_plan(OLC, 3, []).fingerprint()}) == 3


@pytest.mark.parametrize("foreign_keys, error, message", [
    (["lineitem -> part"], UnsupportedQuery, "two of the query's FROM aliases"),
    (["lineitem -> customer"], UnsupportedQuery, "not joined by an equality"),
    (["lineitem orders"], SpecError, "foreign_keys.0: 'lineitem orders' does not match"),
    ("lineitem -> orders", SpecError, "foreign_keys: 'lineitem -> orders' is not of type 'array'"),
])
def test_bad_foreign_keys_name_the_problem(foreign_keys, error, message):
    with pytest.raises(error, match=message):
        make_plan(OLC, 3, foreign_keys)


def test_foreign_keys_need_a_join_sample_view():
    spec = spec_from_dict({"name": "v", "sql": "SELECT o_custkey, COUNT(*) AS n FROM orders GROUP BY o_custkey",
                           "deadline": 60, "foreign_keys": ["orders -> customer"]})
    with pytest.raises(UnsupportedQuery, match="foreign_keys need a join_sample view"):
        classify(spec, SCHEMAS)


@pytest.mark.parametrize("seed", range(20))
def test_prejoin_emits_every_joined_row_once_whatever_the_arrival_order(seed):
    """Random arrivals (facts before and after their keys, duplicate keys too): the rows emitted are the join."""
    rng = random.Random(seed)
    members = [("l", ("ok",)), ("o", ("ok", "ck")), ("c", ("ck", "nk"))]
    rows = {"l": [(f"l{i}", (rng.randrange(5),)) for i in range(12)],
            "o": [(f"o{i}", (rng.randrange(6), rng.randrange(4))) for i in range(6)],
            "c": [(f"c{i}", (rng.randrange(5), rng.randrange(3))) for i in range(5)]}
    arrivals = [(m, rid, keys) for m, rs in rows.items() for rid, keys in rs]
    rng.shuffle(arrivals)
    group = PreJoin(members, out_attrs=("nk",))
    emitted = Counter()
    for member, rid, keys in arrivals:
        out = group.insert(member, rid, keys)
        assert out == sorted(out)
        emitted.update(out)
    truth = Counter((f"{l}\n{o}\n{c}", (nk,)) for (l, (lok,)), (o, (ook, ock)), (c, (cck, nk))
                    in product(rows["l"], rows["o"], rows["c"]) if lok == ook and ock == cck)
    assert emitted == truth
    assert all(split_id(i)[0].startswith("l") for i, _ in emitted)


def rows(bag: Counter) -> list:
    return [(row, m, (True,)) for row, m in bag.items()]


O0 = Counter({(1, 10): 1, (2, 10): 1, (3, 11): 1})
L0 = Counter({(1, 1): 1, (1, 2): 1, (2, 1): 1, (4, 1): 1})  # order 4 has not arrived: the line waits
C0 = Counter({(10, 0): 1})  # customer 11 has not arrived
O1 = Counter({(4, 11): 1})
L1 = Counter({(3, 1): 1, (3, 2): 1, (2, 2): 1})
C1 = Counter({(11, 0): 1})  # completes orders 3 and 4 and their lines


def records_by_ids(view: SampleView) -> dict[tuple, tuple]:
    return {tuple(r[-3:]): tuple(r[1:-3]) for r in view.records()}


def stream(plan, seed: int, restart: bool) -> SampleView:
    view = SampleView.bootstrap(plan, {"orders": rows(O0), "lineitem": rows(L0), "customer": rows(C0)}, seed)
    seen = {"orders": O0, "lineitem": L0, "customer": C0}
    for table, bag in (("orders", O1), ("lineitem", L1), ("customer", C1)):
        view.insert(table, rows(bag))
        seen = {**seen, table: seen[table] + bag}
        if restart:
            view = SampleView.resume(plan, json.loads(json.dumps(view.to_state())), {t: rows(b) for t, b in seen.items()})
    return view


def test_merged_samples_are_the_join_results_with_the_same_ids_as_unmerged():
    merged, plain = make_plan(OLC, 50, CHAIN), make_plan(OLC, 50)
    a, b = stream(merged, 1, restart=False), stream(plain, 1, restart=False)
    assert len(a.records()) == 7  # every line has its order and customer by the end: 2 + 2 + 2 + 1 lines
    assert records_by_ids(a) == records_by_ids(b)  # the whole join, with the same outputs and row ids
    for ids, (o_orderkey, l_linenumber, c_custkey) in records_by_ids(a).items():
        o, l, c = (dict(zip(merged.columns[t], json.loads(i))) for t, i in zip(("orders", "lineitem", "customer"), ids))
        assert (o["o_orderkey"], l["l_linenumber"], c["c_custkey"]) == (o_orderkey, l_linenumber, c_custkey)
        assert l["l_orderkey"] == o["o_orderkey"] and o["o_custkey"] == c["c_custkey"]
    a.sampler.check_invariants()


@pytest.mark.parametrize("restart", [False, True])
def test_restarts_replay_the_merged_sampler_exactly(restart):
    plan = make_plan(OLC, 3, CHAIN)
    assert stream(plan, 4, restart).to_state() == stream(plan, 4, restart=not restart).to_state()


def test_merged_sample_is_uniform_over_seeds_with_waiting_facts_and_restarts():
    plan = make_plan(OLC, 2, CHAIN)
    population = sorted(records_by_ids(stream(make_plan(OLC, 50), 0, restart=False)))
    assert len(population) == 7
    samples = [list(records_by_ids(stream(plan, seed, restart=seed % 2 == 1))) for seed in range(2000)]
    assert subset_chi2_pvalue(samples, population, 2) > ALPHA
