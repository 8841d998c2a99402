"""Exact re-bootstrap: the static sampler is a bijection onto the join; samples uniform, w ~ Beta.

Why a reservoir can be rebuilt exactly from a snapshot: ``docs/kinds/join_sample.md#restarts-and-exact-re-bootstrap``.
"""
from __future__ import annotations

import random

import pytest
from scipy import stats

from lakeivm.views.join_sample.bootstrap import StaticJoinSampler, bootstrap_sample
from lakeivm.views.join_sample.index import JoinIndex
from lakeivm.views.join_sample.spec import JoinSpec

from .oracles import ALPHA, brute_force_join, subset_chi2_pvalue
from .shapes import SHAPES, random_stream


def build(name: str, seed: int, per_relation: int, domain: int = 3) -> tuple[JoinIndex, set]:
    shape = SHAPES[name]
    index = JoinIndex(JoinSpec.from_mapping(shape))
    rows: dict[str, dict] = {rel: {} for rel in shape}
    for rel, rid, row in random_stream(shape, seed, per_relation, domain):
        index.insert(rel, rid, row)
        rows[rel][rid] = row
    return index, brute_force_join(shape, rows)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("name", sorted(SHAPES))
def test_positions_resolve_to_every_result_once(name: str, seed: int) -> None:
    index, results = build(name, seed, per_relation=8)
    static = StaticJoinSampler(index)
    assert static.total == len(results)
    resolved = [static.resolve(z) for z in range(static.total)]
    assert sorted(resolved) == sorted(results)


def test_bootstrap_is_uniform_and_w_follows_beta() -> None:
    index, results = build("line3", 7, per_relation=5)
    k, n = 2, len(results)
    draws = [bootstrap_sample(index, k, random.Random(seed)) for seed in range(3000)]
    assert all(set(items) <= results and len(set(items)) == k for items, _ in draws)
    assert subset_chi2_pvalue([items for items, _ in draws], sorted(results), k) > ALPHA
    ws = [w for _, w in draws]
    assert stats.kstest(ws, stats.beta(k, n - k + 1).cdf).pvalue > ALPHA


def test_small_join_is_kept_whole_without_w() -> None:
    index, results = build("star3", 0, per_relation=3)
    items, w = bootstrap_sample(index, len(results) + 2, random.Random(1))
    assert sorted(items) == sorted(results) and w is None


def test_empty_join_bootstraps_empty() -> None:
    index = JoinIndex(JoinSpec.from_mapping(SHAPES["line2"]))
    index.insert("R1", 1, (0, 1))
    assert bootstrap_sample(index, 3, random.Random(0)) == ([], None)
