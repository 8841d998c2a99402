"""JoinSampler end to end: real results only, and uniform k-subsets over seeds for one stream, batches,
JSON restarts and a mid-stream re-bootstrap; w follows Beta(k, n−k+1)
(``docs/kinds/join_sample.md#restarts-and-exact-re-bootstrap``)."""
from __future__ import annotations

import json
import random

import pytest
from scipy import stats

from lakeivm.errors import InvalidInput, StateError
from lakeivm.views.join_sample.sampler import JoinSampler

from .oracles import ALPHA, brute_force_join, marginal_chi2_pvalue, subset_chi2_pvalue
from .shapes import SHAPES, random_stream

RUNS = 3000
LINE3 = random_stream(SHAPES["line3"], 7, per_relation=5, domain=3)  # 13 inserts, 15 join results
STAR3 = random_stream(SHAPES["star3"], 1, per_relation=6, domain=3)  # 16 inserts, 14 join results


def join_of(name: str, stream: list) -> set:
    rows: dict[str, dict] = {rel: {} for rel in SHAPES[name]}
    for rel, rid, row in stream:
        rows[rel][rid] = row
    return brute_force_join(SHAPES[name], rows)


def snapshot(stream: list, seed: int) -> dict[str, list]:
    """The rows inserted so far, per relation, in a shuffled order (the index rebuild must not care)."""
    rows = list(stream)
    random.Random(seed).shuffle(rows)
    out: dict[str, list] = {}
    for rel, rid, row in rows:
        out.setdefault(rel, []).append((rid, row))
    return out


def ids(sampler: JoinSampler) -> list[tuple]:
    return [tuple(rid for _, rid in r.row_ids) for r in sampler.sample()]


def run(name: str, stream: list, k: int, seed: int, cuts: tuple[int, ...] = (), restart: bool = False) -> JoinSampler:
    sampler = JoinSampler(SHAPES[name], k, seed)
    bounds = [0, *cuts, len(stream)]
    for a, b in zip(bounds, bounds[1:]):
        sampler.insert_batch(stream[a:b])
        if restart:
            state = json.loads(json.dumps(sampler.to_state()))
            sampler = JoinSampler.from_state(state, snapshot(stream[:b], seed))
    return sampler


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("name", sorted(SHAPES))
def test_samples_are_real_distinct_results(name: str, seed: int) -> None:
    stream = random_stream(SHAPES[name], seed, per_relation=7, domain=3)
    for k in (1, 4, 40):
        sampler = JoinSampler(SHAPES[name], k, seed)
        for i, (rel, rid, row) in enumerate(stream):
            sampler.insert(rel, rid, row)
            sampler.check_invariants()
            results = join_of(name, stream[: i + 1])
            sample = ids(sampler)
            assert len(sample) == min(k, len(results)) and set(sample) <= results
            if len(results) <= k:
                assert set(sample) == results
        rows = {(rel, rid): row for rel, rid, row in stream}
        for r in sampler.sample():
            record = r.as_record()
            for rel, rid in r.row_ids:
                assert record[f"{rel}_row_id"] == rid
                assert all(record[a] == v for a, v in zip(SHAPES[name][rel], rows[(rel, rid)]))


@pytest.mark.parametrize(
    ("cuts", "restart"),
    [((), False), ((3, 7, 10), False), ((3, 7, 10), True)],
    ids=["one-stream", "batches", "restarts"],
)
def test_line3_sample_is_uniform(cuts: tuple[int, ...], restart: bool) -> None:
    results = sorted(join_of("line3", LINE3))
    samples = [ids(run("line3", LINE3, 2, seed, cuts, restart)) for seed in range(RUNS)]
    assert subset_chi2_pvalue(samples, results, 2) > ALPHA


def test_star3_marginals_are_uniform_at_a_checkpoint_and_the_end() -> None:
    prefix = STAR3[:11]
    for stream in (prefix, STAR3):
        results = sorted(join_of("star3", stream))
        assert len(results) > 3
        samples = [ids(run("star3", stream, 3, seed, (5,), restart=True)) for seed in range(RUNS // 2)]
        assert marginal_chi2_pvalue(samples, results, 3) > ALPHA


def test_w_follows_beta_law_after_the_stream() -> None:
    k, n = 2, len(join_of("line3", LINE3))
    ws = [run("line3", LINE3, k, seed, (6,)).reservoir.w for seed in range(RUNS)]
    assert stats.kstest(ws, stats.beta(k, n - k + 1).cdf).pvalue > ALPHA


def test_rebootstrap_mid_stream_then_continue_is_uniform() -> None:
    """Bootstrap from the snapshot after 8 inserts (as after a delete), then stream the rest."""
    k, n = 2, len(join_of("line3", LINE3))
    samples, ws = [], []
    for seed in range(RUNS):
        sampler = JoinSampler(SHAPES["line3"], k, seed)
        sampler.rebootstrap(snapshot(LINE3[:8], seed))
        sampler.insert_batch(LINE3[8:])
        samples.append(ids(sampler))
        ws.append(sampler.reservoir.w)
    assert subset_chi2_pvalue(samples, sorted(join_of("line3", LINE3)), k) > ALPHA
    assert stats.kstest(ws, stats.beta(k, n - k + 1).cdf).pvalue > ALPHA


def test_rebootstrap_after_a_delete_samples_the_current_join() -> None:
    kept = LINE3[:4] + LINE3[5:]
    sampler = run("line3", LINE3, 4, 3)
    sampler.rebootstrap(snapshot(kept, 0))
    sampler.check_invariants()
    assert set(ids(sampler)) <= join_of("line3", kept) and len(ids(sampler)) == 4


def test_restart_with_a_wrong_snapshot_is_refused() -> None:
    sampler = run("line3", LINE3, 2, 1)
    state = json.loads(json.dumps(sampler.to_state()))
    with pytest.raises(StateError, match="watermarks"):
        JoinSampler.from_state(state, snapshot(LINE3[:-1], 0))
    with pytest.raises(InvalidInput, match="int or str"):
        sampler.insert("R1", (1, 2), (0, 0))
