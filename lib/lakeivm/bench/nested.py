"""``lakeivm bench nested``: seconds to produce every per-version VWAP result, index vs baselines.

Workload (RPAI §5, digest §6.5): an order book of N bids (``OrderBookGenerator``: price random
walk, integer ticks and volumes) and a batch of E bid events (inserts and deletes, 30% deletes),
one source version per event; every method must output the VWAP after every event. Measured side
by side, pure Python, on the same events:

* ``index``: the incremental evaluator (:class:`~lakeivm.views.nested.evaluators.Vwap`, an
  ordered aggregate index keyed by price), loaded from the book's per-price sums as the
  maintainer does, then ``apply`` + ``result`` per event: O(log G).
* ``recompute``: the query recomputed from scratch per version by the fastest closed form we know
  (numpy over the live rows: sort by price, cumulative volume, cut, sum): O(N log N) per version.
* ``delta_rule``: DBToaster's first-order maps with the comparison re-tested for every distinct
  price (:class:`~lakeivm.views.nested.naive.DeltaRuleVwap`): O(G^2) per version.

The two baselines are timed on the first ``--sample`` versions and extrapolated linearly to all E
(the JSON says which numbers are extrapolated); their results are checked against the index's on
those versions. JSON + PNG under ``--out``.
"""
from __future__ import annotations

import time
from pathlib import Path

from lakeivm.bench import machine, save, use_agg
from lakeivm.config import Settings


def main(argv: list[str], settings: Settings) -> int:
    """``lakeivm bench nested [--sizes 10000,100000] [--events 10000] [--sample 200] [--out DIR]``."""
    import argparse

    parser = argparse.ArgumentParser(prog="lakeivm bench nested", description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000", help="book sizes (bids rows), comma-separated")
    parser.add_argument("--events", type=int, default=10_000, help="events (= versions) per batch")
    parser.add_argument("--sample", type=int, default=200, help="versions the baselines are timed on")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", default="bench-results")
    args = parser.parse_args(argv)
    results = run_nested_bench([int(s) for s in args.sizes.split(",")], args.events, args.sample, args.seed, args.out)
    for run in results["runs"]:
        print(f"N={run['book_rows']:>8} G={run['distinct_prices']:>6}: index {run['seconds']['index']:.2f}s, "
              f"recompute {run['seconds']['recompute']:.1f}s (x{run['speedup']['recompute']:.0f}), "
              f"delta rule {run['seconds']['delta_rule']:.1f}s (x{run['speedup']['delta_rule']:.0f})")
    return 0


def run_nested_bench(sizes: list[int], events: int, sample: int, seed: int, out: str) -> dict:
    """Run the benchmark; returns (and writes) the results."""
    results = {"machine": machine(),
               "query": "vwap", "events_per_batch": events, "baseline_sample_versions": sample, "runs": []}
    for size in sizes:
        results["runs"].append(_one_size(size, events, min(sample, events), seed))
    save(out, "nested", results, _plot)
    return results


def _one_size(size: int, events: int, sample: int, seed: int) -> dict:
    from collections import defaultdict

    from lakeivm.datagen.orderbook import OrderBookGenerator
    from lakeivm.views.nested.evaluators import Vwap
    from lakeivm.views.nested.naive import DeltaRuleVwap

    gen = OrderBookGenerator(seed=seed, depth=500, max_volume=100)
    book = [e for e in gen.initial_book(2 * size) if e.table == "bids"]
    stream = [e for e in gen.events(2 * events, delete_ratio=0.3) if e.table == "bids"][:events]

    t0 = time.perf_counter()
    sums: dict = defaultdict(lambda: [0, 0, 0])
    for e in book:
        cell = sums[e.row.price]
        cell[0] += 1
        cell[1] += e.row.volume
        cell[2] += e.row.price * e.row.volume
    index = Vwap()
    index.load("bids", [((p,), tuple(c)) for p, c in sums.items()])
    load_seconds = time.perf_counter() - t0
    t0 = time.perf_counter()
    expected = [index.apply_all([e]) for e in stream]
    index_seconds = time.perf_counter() - t0 + load_seconds

    recompute_seconds, recompute_results = _recompute(book, stream[:sample])
    rule = DeltaRuleVwap()
    for e in book:
        rule.apply(e)
    t0 = time.perf_counter()
    rule_results = [rule.apply_all([e]) for e in stream[:sample]]
    rule_seconds = time.perf_counter() - t0
    assert recompute_results == expected[:sample] == rule_results, "a baseline disagrees with the index"
    scale = len(stream) / len(stream[:sample])
    seconds = {"index": index_seconds, "recompute": recompute_seconds * scale, "delta_rule": rule_seconds * scale}
    return {
        "book_rows": len(book), "distinct_prices": len(sums), "events": len(stream),
        "seconds": seconds, "index_load_seconds": load_seconds,
        "extrapolated": {"recompute": scale != 1, "delta_rule": scale != 1},
        "measured_versions": {"index": len(stream), "recompute": sample, "delta_rule": sample},
        "speedup": {m: seconds[m] / seconds["index"] for m in ("recompute", "delta_rule")},
        "non_null_results": sum(r is not None for r in expected),
    }


def _recompute(book: list, stream: list) -> tuple[float, list]:
    """Per version: VWAP from the live rows with numpy (sort, cumsum, cut); exact int64 sums."""
    import numpy as np

    rows = [(e.row.price, e.row.volume) for e in book]
    position: dict = {}
    for i, r in enumerate(rows):
        position.setdefault(r, []).append(i)
    out, t0 = [], time.perf_counter()
    for e in stream:
        r = (e.row.price, e.row.volume)
        if e.sign > 0:
            position.setdefault(r, []).append(len(rows))
            rows.append(r)
        else:  # swap-delete one copy
            i, last = position[r].pop(), rows[-1]
            rows[i] = last
            position[last].remove(len(rows) - 1)
            if i != len(rows) - 1:
                position[last].append(i)
            rows.pop()
        data = np.array(rows, dtype=np.int64)
        order = np.argsort(data[:, 0], kind="stable")
        price, volume = data[order, 0], data[order, 1]
        last_of_price = np.r_[price[1:] != price[:-1], True]
        running = np.cumsum(volume)[last_of_price]  # Σ vol for price <= p, one per distinct p
        keep = 4 * running > 3 * int(volume.sum())
        if not keep.any():
            out.append(None)
            continue
        cut = price[last_of_price][np.argmax(keep)]
        mask = price >= cut
        out.append(int((price[mask] * volume[mask]).sum()))
    return time.perf_counter() - t0, out


def _plot(results: dict, path: Path) -> None:
    use_agg()
    import matplotlib.pyplot as plt

    runs = results["runs"]
    sizes = [r["book_rows"] for r in runs]
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for method, marker in (("index", "o"), ("recompute", "s"), ("delta_rule", "^")):
        ax.plot(sizes, [r["seconds"][method] for r in runs], marker=marker, label=method)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("book rows (bids)")
    ax.set_ylabel(f"seconds for {results['events_per_batch']} per-version results")
    ax.set_title("VWAP per version: ordered index vs recompute vs delta rule")
    ax.legend()
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
