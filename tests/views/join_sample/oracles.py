"""Statistical and brute-force oracles shared by the join_sample tests.

What they check and why: ``docs/kinds/join_sample.md#how-it-is-tested``.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable, Mapping, Sequence
from itertools import combinations
from math import comb

from scipy import stats

ALPHA = 1e-3


def subset_chi2_pvalue(samples: Iterable[Iterable[Hashable]], population: Sequence[Hashable], k: int) -> float:
    """Pearson χ² p-value of k-subset counts against the uniform law over all C(n, k) subsets."""
    counts = Counter(frozenset(s) for s in samples)
    runs = sum(counts.values())
    cells = [counts.get(frozenset(c), 0) for c in combinations(population, k)]
    assert sum(cells) == runs, "a sample was not a k-subset of the population"
    expected = runs / comb(len(population), k)
    assert expected >= 5, "too few runs for the χ² approximation"
    return float(stats.chisquare(cells).pvalue)


def marginal_chi2_pvalue(samples: Iterable[Iterable[Hashable]], population: Sequence[Hashable], k: int) -> float:
    """Marginal-inclusion χ², corrected for a sample of exactly k: Σ (c_i − Rp)² / (Rp(1−p)·n/(n−1)) ~ χ²_{n−1}."""
    counts: Counter[Hashable] = Counter()
    runs = 0
    for s in samples:
        runs += 1
        counts.update(s)
    n = len(population)
    assert set(counts) <= set(population)
    p = k / n
    scale = runs * p * (1 - p) * n / (n - 1)
    statistic = sum((counts.get(x, 0) - runs * p) ** 2 for x in population) / scale
    return float(stats.chi2.sf(statistic, n - 1))


def brute_force_join(
    attrs: Mapping[str, Sequence[str]], rows: Mapping[str, Mapping[Hashable, tuple]]
) -> set[tuple[Hashable, ...]]:
    """All join results as tuples of row ids (in ``attrs`` order), by nested loops."""
    names = list(attrs)
    results: set[tuple[Hashable, ...]] = set()

    def extend(i: int, binding: dict[str, Hashable], ids: tuple[Hashable, ...]) -> None:
        if i == len(names):
            results.add(ids)
            return
        rel = names[i]
        for rid, row in rows[rel].items():
            pairs = dict(zip(attrs[rel], row))
            if all(binding.get(a, v) == v for a, v in pairs.items()):
                extend(i + 1, {**binding, **pairs}, (*ids, rid))

    extend(0, {}, ())
    return results
