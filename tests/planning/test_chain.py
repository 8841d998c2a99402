"""The chain planner against ``decide`` (a chain of one view) and a brute-force oracle over all sets of pairs."""
from __future__ import annotations

import itertools
import math
import random

import pytest

from lakeivm.errors import InvalidInput
from lakeivm.planning.chain import EXACT_PAIRS, Chain, ChainView, decide_chain
from lakeivm.planning.costs import LinearCost
from lakeivm.planning.decide import decide
from lakeivm.planning.policies import time_to_full
from tests.planning.instances import random_cost, random_decide_case

EPS = 1e-9


def _silver_gold(silver_pending=100, gold_from_silver=0, customer=10) -> Chain:
    silver = ChainView("silver", {"orders": silver_pending}, {"orders": LinearCost(0.01, 0.0)}, run_seconds=1.0)
    gold = ChainView("gold", {"silver": gold_from_silver, "customer": customer},
                     {"silver": LinearCost(0.02, 0.0), "customer": LinearCost(0.1, 0.0)}, run_seconds=0.5, joint_seconds=0.25)
    return Chain([silver, gold])


def test_an_upstream_s_applied_rows_become_its_readers_pending_rows() -> None:
    chain = _silver_gold()
    state = chain.state()
    silver_orders = chain.index[("silver", "orders")]
    left, seconds = chain.act(state, frozenset({silver_orders}))
    assert left[chain.index[("gold", "silver")]] == 100 and left[silver_orders] == 0
    assert seconds == {"silver": pytest.approx(1.0 + 1.0)}
    # An on-demand refresh: silver (1 s run + 1 s rows), then gold with silver's 100 rows and customer's 10.
    assert chain.refresh(state) == {"silver": pytest.approx(2.0), "gold": pytest.approx(0.5 + 0.25 + 2.0 + 1.0)}
    # Deferring silver's rows costs gold nothing more at refresh: they reach it either way.
    assert sum(chain.refresh(left).values()) == pytest.approx(3.75)


def test_the_chain_s_deadline_makes_the_upstream_apply_before_the_leaf_is_touched() -> None:
    chain = _silver_gold(silver_pending=400, customer=0)  # refresh: silver 1+4 s, then gold 0.5+8 s: 13.5 s in all
    assert decide_chain(chain, 20.0).apply == {"silver": frozenset(), "gold": frozenset()}
    decision = decide_chain(chain, 13.0)
    assert decision.apply == {"silver": frozenset({"orders"}), "gold": frozenset()}
    assert decision.predicted_seconds == pytest.approx(5.0)
    assert decision.predicted_refresh_seconds_after == pytest.approx(8.5)
    assert "forced" in decision.reason and "orders->silver" in decision.reason


def test_a_tight_deadline_passes_an_upstream_s_rows_through_to_its_reader_in_the_same_tick() -> None:
    chain = _silver_gold(silver_pending=400, customer=0)  # gold has nothing pending yet: silver's rows reach it only once applied
    decision = decide_chain(chain, 1.0)
    assert decision.apply == {"silver": frozenset({"orders"}), "gold": frozenset({"silver"})}
    assert decision.predicted_refresh_seconds_after == 0.0 and decision.predicted_seconds == pytest.approx(13.5)
    assert "infeasible" not in decision.reason


@pytest.mark.parametrize("families", [("linear",), ("concave", "step")])
def test_a_chain_of_one_view_decides_as_decide(families: tuple[str, ...]) -> None:
    rng = random.Random(7 + len(families))
    for _ in range(300):
        pending, costs, deadline, expected, headroom, forced = random_decide_case(rng, families)
        spent, ticks = rng.choice([0, 10]), rng.randint(0, 5)
        single = decide(pending, costs, deadline, expected, headroom, forced, spent_seconds=spent, ticks_since_refresh=ticks)
        chain = Chain([ChainView("v", pending, costs, expected=expected, forced=forced)])
        joint = decide_chain(chain, deadline, headroom, spent_seconds=spent, ticks_since_refresh=ticks)
        assert joint.apply["v"] == {t for t in single.apply if pending[t] > 0}
        assert joint.predicted_seconds == pytest.approx(single.predicted_seconds)
        assert joint.predicted_refresh_seconds_after == pytest.approx(single.predicted_refresh_seconds_after)


def _random_chain(rng: random.Random) -> Chain:
    """Two to four views; each reads one or two base tables and, past the first, one or two earlier views."""
    views = []
    for position in range(rng.randint(2, 4)):
        inputs = [f"t{position}{j}" for j in range(rng.randint(0 if position else 1, 2))]
        if position:
            inputs += rng.sample([v.name for v in views], min(len(views), rng.randint(1, 2)))
        views.append(ChainView(
            f"v{position}", {i: rng.randint(0, 5) for i in inputs},
            {i: random_cost(rng, rng.choice(("linear", "concave", "step"))) for i in inputs},
            run_seconds=rng.choice([0.0, 0.5, 1.0]), joint_seconds=rng.choice([0.0, 0.25]),
            expected={i: rng.choice([0, 0.5, 1, 2]) for i in inputs if i.startswith("t")}))
    return Chain(views)


def test_a_tick_of_a_chain_is_lazy_valid_minimal_and_of_least_online_score() -> None:
    """Against enumeration of every set of pending pairs: the chain's refresh after each set, with
    the expected arrivals; the minimal valid sets and the symmetric flush; H by linear-scan TTF."""
    rng = random.Random(55)
    acted = 0
    for _ in range(250):
        chain = _random_chain(rng)
        state, coming, rates = chain.state(), [math.ceil(k) for k in chain.arrivals()], chain.arrivals()
        deadline, headroom = rng.randint(4, 40), rng.choice([0.0, 1.0])
        spent, ticks = rng.choice([0, 5]), rng.randint(0, 4)

        def refresh_after(s) -> float:
            return sum(chain.refresh(tuple(k + c for k, c in zip(s, coming))).values()) + headroom

        views = {v.name for v in chain.views}  # a pair reading a view may fill within the tick
        free = [n for n, k in enumerate(state) if k > 0 or chain.pairs[n][1] in views]
        if len(free) > EXACT_PAIRS:
            continue
        subsets = [frozenset(c) for r in range(len(free) + 1) for c in itertools.combinations(free, r)]
        valid = [s for s in subsets if refresh_after(chain.act(state, s)[0]) <= deadline + EPS]
        minimal = [s for s in valid if not any(v < s for v in valid)]
        decision = decide_chain(chain, deadline, headroom, spent_seconds=spent, ticks_since_refresh=ticks)
        chosen = frozenset(chain.index[(v, i)] for v, inputs in decision.apply.items() for i in inputs)
        left, per_view = chain.act(state, chosen)
        assert decision.predicted_refresh_seconds_after == pytest.approx(refresh_after(left))
        assert decision.predicted_seconds == pytest.approx(sum(per_view.values()))
        if not minimal:
            assert chosen == frozenset(free) and "infeasible" in decision.reason
            continue
        assert refresh_after(left) <= deadline + EPS
        if frozenset() in minimal:
            assert not chosen
            continue
        acted += 1
        is_full = lambda s: refresh_after(s) > deadline  # noqa: E731

        def score(s: frozenset[int]) -> float:
            paid = spent + sum(chain.act(state, s)[1].values())
            ttf = next((k for k in range(1, 3000) if is_full(tuple(a + round(k * r) for a, r in zip(chain.act(state, s)[0], rates)))), 3000)
            return paid / (ticks + ttf)

        options = set(minimal) | {frozenset(free)}
        assert chosen in options
        assert score(chosen) <= min(score(s) for s in options) + EPS
        assert time_to_full(is_full, left, rates) >= 1
    assert acted > 50


def test_a_chain_too_large_to_enumerate_gets_one_valid_minimal_set() -> None:
    rng = random.Random(12)
    views = []
    for position in range(8):
        inputs = [f"t{position}", f"u{position}"] + ([f"v{position - 1}"] if position else [])
        views.append(ChainView(f"v{position}", {i: rng.randint(1, 50) for i in inputs},
                               {i: LinearCost(rng.choice([0.01, 0.05, 0.1]), 0.0) for i in inputs}, run_seconds=0.2))
    chain = Chain(views)
    state = chain.state()
    assert sum(k > 0 for k in state) > EXACT_PAIRS
    everything = sum(chain.refresh(state).values())
    decision = decide_chain(chain, everything * 0.6)
    chosen = frozenset(chain.index[(v, i)] for v, inputs in decision.apply.items() for i in inputs)
    assert chosen and decision.predicted_refresh_seconds_after <= everything * 0.6 + EPS
    if "minimal set" in decision.reason:  # each of its pairs is needed
        for n in chosen:
            assert sum(chain.refresh(chain.act(state, chosen - {n})[0]).values()) > everything * 0.6


def test_a_chain_must_list_upstreams_first_with_a_cost_for_every_input() -> None:
    gold = ChainView("gold", {"silver": 1}, {"silver": LinearCost(0.1, 0.0)})
    silver = ChainView("silver", {"orders": 1}, {"orders": LinearCost(0.1, 0.0)})
    with pytest.raises(InvalidInput, match="upstreams first"):
        Chain([gold, silver])
    with pytest.raises(InvalidInput, match="no cost model"):
        Chain([ChainView("silver", {"orders": 1}, {})])
    with pytest.raises(InvalidInput, match="deadline"):
        decide_chain(Chain([silver, gold]), 0.0)


def test_the_margin_is_how_far_recent_chain_refreshes_ran_over_their_predictions():
    """``run.chains.prediction_margin``: the 90th percentile of the last refreshes' overruns (an
    underrun counts 0; ticks and refreshes without a prediction do not count), 0 before three."""
    from lakeivm.run.chains import prediction_margin
    from lakeivm.store.commit import LogRow

    def row(mode, seconds, predicted):
        return LogRow(view="gold", seq=1, status="committed", mode=mode, kind="fivm", pins={}, watermarks={},
                      state_versions={}, consistent=True, chain_seconds=seconds, chain_predicted_seconds=predicted)

    assert prediction_margin([row("refresh", 3.0, 2.0), row("refresh", 2.0, 2.5)]) == 0.0  # too few to learn from
    runs = [row("refresh", 2.0 + over, 2.0) for over in (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)]
    runs += [row("tick", 9.0, 1.0), row("refresh", 9.0, None), row("refresh", 1.0, 2.0)]  # not counted; an underrun: 0
    assert abs(prediction_margin(runs) - 0.9) < 1e-9  # of 0, 0.1 .. 1.0 (11): the 90th percentile
    assert abs(prediction_margin(runs, last=4) - 1.0) < 1e-9  # the last 4: 0.8, 0.9, 1.0, 0
