"""RSWP (Alg. 1/5) against classic reservoir laws: uniform k-subsets, Beta(k, r−k+1) for w, Thm 3.2 stop counts."""
from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from lakeivm.errors import InvalidInput
from lakeivm.views.join_sample.reservoir import PredicateReservoir

from .oracles import ALPHA, subset_chi2_pvalue

# 20 items, 8 of them real (values 0..7), dummies spread unevenly: bursts and a dense tail.
PATTERN = [0, None, None, 1, None, 2, None, None, None, 3, 4, None, None, None, 5, None, None, 6, 7, None]
REALS = [x for x in PATTERN if x is not None]


def feed_list(res: PredicateReservoir, batch: list) -> None:
    res.feed(len(batch), batch.__getitem__)
    res.check_invariants()


def split(stream: list, cuts: list[int]) -> list[list]:
    bounds = [0, *sorted(c % (len(stream) + 1) for c in cuts), len(stream)]
    return [stream[a:b] for a, b in zip(bounds, bounds[1:])]


def run_stream(seed: int, k: int, batches: list[list], restart: bool = False) -> PredicateReservoir:
    res = PredicateReservoir(k, seed)
    for batch in batches:
        feed_list(res, batch)
        if restart:
            res = PredicateReservoir.from_state(json.loads(json.dumps(res.to_state())))
    return res


def test_one_stream_is_uniform_over_real_items() -> None:
    samples = [run_stream(seed, 3, [PATTERN]).items for seed in range(6000)]
    assert subset_chi2_pvalue(samples, REALS, 3) > ALPHA


def test_batches_with_restarts_are_uniform() -> None:
    batches = split(PATTERN, [5, 5, 11, 17])
    samples = [run_stream(seed, 3, batches, restart=True).items for seed in range(4000)]
    assert subset_chi2_pvalue(samples, REALS, 3) > ALPHA


def test_losing_w_at_a_restart_is_detected() -> None:
    """Negative control: re-initializing w at a restart biases the sample, and χ² sees it
    (``docs/kinds/join_sample.md#restarts-and-exact-re-bootstrap``)."""
    samples = []
    for seed in range(6000):
        res = run_stream(seed, 3, [PATTERN[:12]])
        res.w = None
        feed_list(res, PATTERN[12:])
        samples.append(res.items)
    assert subset_chi2_pvalue(samples, REALS, 3) < 1e-6


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    k=st.integers(1, 5),
    density=st.floats(0.0, 1.0),
    cuts=st.lists(st.integers(0, 200), max_size=8),
)
def test_any_batch_split_and_restart_is_bit_identical(seed: int, k: int, density: float, cuts: list[int]) -> None:
    """q carries across batches, so the split and JSON restarts never change a single draw."""
    rnd = random.Random(seed)
    stream = [i if rnd.random() < density else None for i in range(150)]
    whole = run_stream(seed, k, [stream])
    parts = run_stream(seed, k, split(stream, cuts), restart=True)
    assert parts.to_state() == whole.to_state()
    reals = [x for x in stream if x is not None]
    assert len(whole.items) == min(k, len(reals)) and set(whole.items) <= set(reals)
    assert len(set(whole.items)) == len(whole.items)


def test_w_follows_beta_law() -> None:
    k, reals = 4, 60
    stream = [None if i % 3 else i for i in range(3 * reals)]
    ws = [run_stream(seed, k, split(stream, [37, 90])).w for seed in range(3000)]
    assert stats.kstest(ws, stats.beta(k, reals - k + 1).cdf).pvalue > ALPHA


def test_mean_stops_match_theorem_3_2() -> None:
    """E[stops] = Σ over positions after the fill of k/(r_i+1), r_i = real items before i."""
    k = 3
    rnd = random.Random(7)
    stream = [i if rnd.random() < 0.3 else None for i in range(2000)]
    expected, r = 0.0, 0
    for x in stream:
        if r >= k:
            expected += k / (r + 1)
        r += x is not None
    stops = [run_stream(seed, k, split(stream, [500, 1500])).counters["stops"] for seed in range(2000)]
    mean = sum(stops) / len(stops)
    sd = stats.tstd(stops) / len(stops) ** 0.5
    assert abs(mean - expected) < 4 * sd


def test_edge_cases_all_dummies_few_reals_empty_batches() -> None:
    res = run_stream(1, 3, [[None] * 10, [], [None, 4, None], []])
    assert res.items == [4] and res.w is None and res.counters["seen"] == 13
    res = run_stream(2, 2, [[], [7, 8], [None] * 5])
    assert sorted(res.items) == [7, 8] and res.w is not None
    with pytest.raises(InvalidInput):
        PredicateReservoir(0, 1)
