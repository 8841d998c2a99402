"""``lakeivm bench nested``: seconds to produce every per-version VWAP or TPC-H Q17 result, index vs baselines.

**VWAP** (``--query vwap``, the default). Workload (RPAI §5; a result per commit, where the index
pays off: docs/kinds/nested.md#state-commits-and-query-texts): an order book of N bids
(``OrderBookGenerator``: price random walk, integer ticks and volumes) and a batch of E bid events
(inserts and deletes, 30% deletes), one source version per event; every method must output the VWAP
after every event. Measured side by side, pure Python, on the same events:

* ``index``: the incremental evaluator (:class:`~lakeivm.views.nested.evaluators.Vwap`, an
  ordered aggregate index keyed by price), loaded from the book's per-price sums as the
  maintainer does, then ``apply`` + ``result`` per event: O(log G).
* ``recompute``: the query recomputed from scratch per version by the fastest closed form we know
  (numpy over the live rows: sort by price, cumulative volume, cut, sum): O(N log N) per version.
* ``delta_rule``: DBToaster's first-order maps with the comparison re-tested for every distinct
  price (:class:`~lakeivm.testing.nested.DeltaRuleVwap`): O(G^2) per version.
* ``general`` and ``general_sweep``: the nested kind's general algorithm
  (:mod:`lakeivm.views.nested.general`), which a query of the class that no shipped shape matches
  gets, run on VWAP's SQL: its per-price sums loaded as the maintainer does, then per version the
  qualifying range found in its ordered index (VWAP is §4.3's monotone case: O(log G)), or -- as a
  query outside that case gets -- a sweep of the G prices with the subquery's prefix sums
  (O(G log G); timed on ``--sample`` versions).

The baselines (all but the index) are timed on the first ``--sample`` versions and extrapolated linearly to all E
(the JSON says which numbers are extrapolated); their results are checked against the index's on
those versions. JSON + PNG under ``--out``.

**TPC-H Q17** (``--query q17``; the shipped view ``lakeivm/schemas/views/tpch_q17.yaml``, issue 6).
Workload (:func:`q17_workload`, numpy, no Spark): a lineitem multiset of N = 6M x SF rows
``(partkey, quantity, extendedprice)`` over P = 200k x SF parts, part keys uniform or Zipf over
part ranks (``p(rank r) ~ r^-s``, ranks shuffled over the keys), quantities uniform 1..50,
extendedprice = quantity x TPC-H's p_retailprice of the part, in integer cents (exact; the lake's
DECIMAL(15,2) as unscaled integers). The part table has one row per part; the view's
``p_brand``/``p_container`` filter is a fixed random subset of ``--part-share`` of the parts
(default 1/1000, TPC-H's 1/25 brands x 1/40 containers), chosen independently of the skew
(``--filtered hot`` picks the parts with the most lines instead); the other parts get other TPC-H
brands/containers. Then E lineitem events (30% deletes of uniformly chosen
live rows, inserts drawn like the base rows), one version per event. Methods, each producing the
exact result (a Fraction, None for SQL NULL) after every event:

* ``index``: the view's evaluator (:class:`~lakeivm.views.nested.evaluators.Q17`, made by the
  maintainer's ``make_evaluator`` from the shape the classifier binds for the shipped YAML), loaded
  from the per-key sums of ``Q17.STATE`` (a GROUP BY of lineitem on partkey, quantity and of part),
  then ``apply`` + ``result`` per event: O(log Q_pk) for the touched part's quantity index.
* ``recompute``: per version, the query from scratch with numpy over the live rows, filter first
  (the plan Spark would pick): gather the part filter per line (O(N)), then count and Σquantity per
  part over the selected lines (bincount), compare ``5*cnt*qty < Σqty``, sum the prices.
* ``delta_rule``: :class:`~lakeivm.testing.nested.DeltaRuleQ17`, DBToaster's first-order maps
  loaded from the same per-key sums, the touched part's comparison re-tested for every distinct
  quantity of that part: O(Q_pk) per event.

``seconds`` of index and delta rule include loading their state from the per-key sums (which
dominates at these sizes), not the GROUP BY that produces those sums (``state_rows_seconds``; the
maintainer persists them); the JSON also has ``per_event_seconds`` without the loads. ``speedup``
is a baseline's seconds over the index's: below 1, the baseline is faster. Timed sections run
with the cyclic GC off (as ``timeit`` does). Recompute is
timed on the first ``--sample`` versions and extrapolated linearly to E and checked against the
index on those versions. The delta rule is cheap per event but its cost is bimodal (only events on
the ~0.1% filtered parts trigger a re-test), so a short prefix would miss the expensive events: it
is run and timed on all E versions and checked against the index on every one.
"""
from __future__ import annotations

import gc
import time
from contextlib import contextmanager
from fractions import Fraction
from pathlib import Path

from lakeivm.bench import machine, save, use_agg
from lakeivm.config import Settings


def main(argv: list[str], settings: Settings) -> int:
    """``lakeivm bench nested [--query vwap|q17] [--sizes ...] [--scales ...] [--skews ...] [--events N] ...``."""
    import argparse

    parser = argparse.ArgumentParser(prog="lakeivm bench nested", description=__doc__.splitlines()[0])
    parser.add_argument("--query", choices=("vwap", "q17"), default="vwap", help="workload (default: vwap)")
    parser.add_argument("--sizes", default="10000,100000", help="vwap: book sizes (bids rows), comma-separated")
    parser.add_argument("--scales", default="0.1,1", help="q17: TPC-H scale factors (lineitem rows = 6M x SF)")
    parser.add_argument("--skews", default="uniform,zipf", help="q17: part-key distributions (uniform, zipf)")
    parser.add_argument("--zipf-s", type=float, default=1.0, help="q17: zipf exponent over part ranks")
    parser.add_argument("--part-share", type=float, default=0.001,
                        help="q17: share of parts passing the brand/container filter (TPC-H: 1/25 * 1/40)")
    parser.add_argument("--filtered", choices=("random", "hot"), default="random",
                        help="q17: which parts pass the filter: random (TPC-H) or those with the most lines")
    parser.add_argument("--events", type=int, default=10_000, help="events (= versions) per batch")
    parser.add_argument("--sample", type=int, default=200,
                        help="versions the recompute baseline (vwap: both baselines) is timed on")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", default="bench-results")
    args = parser.parse_args(argv)
    if args.query == "q17":
        results = run_q17_bench([float(s) for s in args.scales.split(",")], args.skews.split(","), args.events,
                                args.sample, args.seed, args.out, zipf_s=args.zipf_s, part_share=args.part_share,
                                filtered=args.filtered)
        for run in results["runs"]:
            print(q17_summary(run))
        return 0
    results = run_nested_bench([int(s) for s in args.sizes.split(",")], args.events, args.sample, args.seed, args.out)
    for run in results["runs"]:
        print(f"N={run['book_rows']:>8} G={run['distinct_prices']:>6}: index {run['seconds']['index']:.2f}s, "
              f"recompute {run['seconds']['recompute']:.1f}s (x{run['speedup']['recompute']:.0f}), "
              f"delta rule {run['seconds']['delta_rule']:.1f}s (x{run['speedup']['delta_rule']:.0f}), "
              f"general algorithm: range {run['seconds']['general']:.2f}s (x{run['speedup']['general']:.1f}), "
              f"sweep {run['seconds']['general_sweep']:.1f}s (x{run['speedup']['general_sweep']:.0f})")
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
    from lakeivm.testing.nested import DeltaRuleVwap
    from lakeivm.views.nested.evaluators import Vwap

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
    general_seconds, general_results = _general(book, stream, ranged=True)
    sweep_seconds, sweep_results = _general(book, stream[:sample], ranged=False)
    assert general_results == expected, "the general algorithm's range disagrees with the index"
    assert recompute_results == expected[:sample] == rule_results == sweep_results, "a baseline disagrees with the index"
    scale = len(stream) / len(stream[:sample])
    seconds = {"index": index_seconds, "recompute": recompute_seconds * scale, "delta_rule": rule_seconds * scale,
               "general": general_seconds, "general_sweep": sweep_seconds * scale}
    return {
        "book_rows": len(book), "distinct_prices": len(sums), "events": len(stream),
        "seconds": seconds, "index_load_seconds": load_seconds,
        "extrapolated": {"recompute": scale != 1, "delta_rule": scale != 1, "general": False, "general_sweep": scale != 1},
        "measured_versions": {"index": len(stream), "recompute": sample, "delta_rule": sample, "general": len(stream),
                              "general_sweep": sample},
        "speedup": {m: seconds[m] / seconds["index"] for m in ("recompute", "delta_rule", "general", "general_sweep")},
        "non_null_results": sum(r is not None for r in expected),
    }


def _general(book: list, stream: list, ranged: bool) -> tuple[float, list]:
    """Per version: VWAP by the general algorithm (its plan of VWAP's SQL), by its range in an ordered
    index (``ranged``: VWAP is §4.3's monotone case) or by its sweep of every price; the per-price sums
    loaded first, as the maintainer loads its index (included). Each row's term values (the plan's SQL,
    run by SQLite once per distinct row) are not timed: the maintainer reads them with the change feed."""
    import sqlite3

    import sqlglot

    from lakeivm.sql import DIALECT, parse_query
    from lakeivm.views.nested.general import General, RowEvent, general_plan
    from lakeivm.views.nested.queries import VWAP_SQL

    plan = general_plan(parse_query(VWAP_SQL, {"bids": {"broker_id": "bigint", "price": "bigint", "volume": "bigint"}}))
    (relation,) = plan.relations
    assert relation.keys == ("price",), relation.keys
    distinct = sorted({(e.row.price, e.row.volume) for e in [*book, *stream]})
    terms_sql = sqlglot.transpile(f"SELECT price, volume, {', '.join(sql for _, sql in relation.terms)} FROM bids",
                                  read=DIALECT, write="sqlite")[0]
    con = sqlite3.connect(":memory:")
    con.execute("CREATE TABLE bids (price, volume)")
    con.executemany("INSERT INTO bids VALUES (?, ?)", distinct)
    terms = {(r[0], r[1]): tuple(r[2:]) for r in con.execute(terms_sql)}
    with _no_gc():
        t0 = time.perf_counter()
        sums: dict = {}
        for e in book:
            cell = sums.setdefault((e.row.price,), [0] * len(relation.sums))
            for i, value in enumerate((1, *terms[(e.row.price, e.row.volume)])):
                cell[i] += value
        general = General(plan)
        if not ranged:
            general._monotone = [None]  # the sweep: what a query outside §4.3's monotone case gets
        general.load(0, sums.items())
        out = []
        for e in stream:
            general.apply(RowEvent((e.row.price,), terms[(e.row.price, e.row.volume)], e.sign))
            (row,) = general.result()
            out.append(None if row[0] is None else int(row[0]))
        return time.perf_counter() - t0, out


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
    for method, marker in (("index", "o"), ("recompute", "s"), ("delta_rule", "^"), ("general", "D"), ("general_sweep", "v")):
        ax.plot(sizes, [r["seconds"][method] for r in runs], marker=marker, label=method)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("book rows (bids)")
    ax.set_ylabel(f"seconds for {results['events_per_batch']} per-version results")
    ax.set_title("VWAP per version: ordered index vs recompute, delta rule, general algorithm")
    ax.legend()
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


# -- TPC-H Q17 --------------------------------------------------------------------------------------
Q17_VIEW = "tpch_q17.yaml"  # in the shipped views
Q17_SCHEMAS = {
    "lineitem": {"l_orderkey": "bigint", "l_partkey": "bigint", "l_quantity": "decimal(15,2)",
                 "l_extendedprice": "decimal(15,2)"},
    "part": {"p_partkey": "bigint", "p_brand": "string", "p_container": "string"},
}
LINES_PER_SF, PARTS_PER_SF = 6_000_000, 200_000
CONTAINERS = [f"{size} {kind}" for size in ("SM", "LG", "MED", "JUMBO", "WRAP")
              for kind in ("CASE", "BOX", "BAG", "JAR", "PKG", "PACK", "CAN", "DRUM")]
BRANDS = [f"Brand#{m}{n}" for m in range(1, 6) for n in range(1, 6)]


def q17_shape():
    """The nested shape of the shipped Q17 view, bound by the classifier (as the maintainer gets it)."""
    from lakeivm.config import SHIPPED_VIEWS
    from lakeivm.catalog.registry import classify, load_spec
    from lakeivm.views.nested.shape import nested_shape

    kind, query = classify(load_spec(SHIPPED_VIEWS / Q17_VIEW), Q17_SCHEMAS)
    shape = nested_shape(query)
    assert kind == "nested" and shape is not None and shape.name == "q17", f"{Q17_VIEW} is not the q17 shape"
    return shape


def q17_workload(scale: float, skew: str, events: int, seed: int, *, zipf_s: float = 1.0, part_share: float = 0.001,
                 filtered: str = "random", delete_ratio: float = 0.3, brand: str = "Brand#23",
                 container: str = "WRAP BOX") -> dict:
    """Base lineitem arrays, the part rows and E signed lineitem events (see module doc).

    ``filtered="random"`` (TPC-H: brand and container independent of the key) picks the parts
    passing the filter at random; ``"hot"`` picks the parts with the most base lines instead (the
    worst case for a per-part re-test under skew).

    Returns ``partkey``, ``quantity``, ``price`` (int64 arrays of the N base rows), ``parts`` (P),
    ``selected`` (bool per partkey 0..P: the part passes the filter), ``part_rows`` (one
    ``(p_partkey, p_brand, p_container)`` per part), ``events`` (:class:`Event` list) and
    ``positions`` (per event: the live-row slot a delete removes by swap-with-last, -1 for an
    insert appended at the end), so that the recompute baseline can replay the same live arrays.
    """
    import numpy as np

    from lakeivm.views.nested.events import Event, LineitemRow

    if skew not in ("uniform", "zipf"):
        raise ValueError(f"unknown skew {skew!r}; choose uniform or zipf")
    rng = np.random.default_rng(seed)
    n, parts = max(1, round(LINES_PER_SF * scale)), max(1, round(PARTS_PER_SF * scale))
    if skew == "uniform":
        def draw(k: int) -> np.ndarray:
            return rng.integers(1, parts + 1, k)
    else:
        cdf = np.cumsum(np.arange(1, parts + 1, dtype=np.float64) ** -zipf_s)
        cdf /= cdf[-1]
        key_of_rank = rng.permutation(parts) + 1

        def draw(k: int) -> np.ndarray:
            return key_of_rank[np.minimum(np.searchsorted(cdf, rng.random(k), side="right"), parts - 1)]
    keys = np.arange(parts + 1, dtype=np.int64)
    retail = 90_000 + (keys // 10) % 20_001 + 100 * (keys % 1_000)  # TPC-H p_retailprice, cents
    partkey = draw(n).astype(np.int64)
    quantity = rng.integers(1, 51, n, dtype=np.int64)
    price = quantity * retail[partkey]

    m = max(1, round(parts * part_share))
    if filtered == "random":
        chosen = rng.choice(parts, m, replace=False) + 1
    elif filtered == "hot":
        chosen = np.argsort(-np.bincount(partkey, minlength=parts + 1)[1:], kind="stable")[:m] + 1
    else:
        raise ValueError(f"unknown filtered={filtered!r}; choose random or hot")
    selected = np.zeros(parts + 1, dtype=bool)
    selected[chosen] = True
    brand_ix, container_ix = rng.integers(0, len(BRANDS), parts + 1), rng.integers(0, len(CONTAINERS), parts + 1)
    part_rows = []
    for pk in range(1, parts + 1):
        if selected[pk]:
            part_rows.append((pk, brand, container))
            continue
        b, c = BRANDS[brand_ix[pk]], CONTAINERS[container_ix[pk]]
        if b == brand and c == container:
            c = CONTAINERS[(container_ix[pk] + 1) % len(CONTAINERS)]
        part_rows.append((pk, b, c))

    live = [np.empty(n + events, dtype=np.int64) for _ in range(3)]  # swap-delete copies of the live rows
    for column, base in zip(live, (partkey, quantity, price)):
        column[:n] = base
    size = n
    new_keys, new_qty = draw(events).tolist(), rng.integers(1, 51, events).tolist()
    deletes, slots = (rng.random(events) < delete_ratio).tolist(), rng.random(events).tolist()
    retail_list = retail.tolist()
    stream, positions = [], []
    for i in range(events):
        if deletes[i] and size:
            j = min(int(slots[i] * size), size - 1)
            row = LineitemRow(*(int(column[j]) for column in live))
            size -= 1
            for column in live:
                column[j] = column[size]
            stream.append(Event("lineitem", row, -1))
            positions.append(j)
        else:
            pk, qty = new_keys[i], new_qty[i]
            row = LineitemRow(pk, qty, qty * retail_list[pk])
            for column, value in zip(live, (pk, qty, row.l_extendedprice)):
                column[size] = value
            size += 1
            stream.append(Event("lineitem", row, 1))
            positions.append(-1)
    del live
    return {"partkey": partkey, "quantity": quantity, "price": price, "parts": parts, "selected": selected,
            "part_rows": part_rows, "events": stream, "positions": positions}


def q17_state_rows(work: dict) -> dict[str, list]:
    """``Q17.STATE`` rows: lineitem per (partkey, quantity) -> (count, Σprice); part per row -> (count,)."""
    import numpy as np

    key = work["partkey"] * 64 + work["quantity"]  # quantities are 1..50
    order = np.argsort(key, kind="stable")
    ordered = key[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    counts = np.diff(np.r_[starts, len(ordered)])
    sums = np.add.reduceat(work["price"][order], starts)
    firsts = ordered[starts]
    lineitem = list(zip(zip((firsts // 64).tolist(), (firsts % 64).tolist()), zip(counts.tolist(), sums.tolist())))
    return {"lineitem": lineitem, "part": [(row, (1,)) for row in work["part_rows"]]}


def q17_index(shape, state: dict[str, list], events: list) -> tuple[float, float, list]:
    """Load the view's evaluator from the per-key sums, then one result per event: (load s, events s, results)."""
    from lakeivm.views.nested.maintainer import make_evaluator

    return _load_and_run(lambda: make_evaluator(shape), state, events)


def q17_delta_rule(shape, state: dict[str, list], events: list) -> tuple[float, float, list]:
    """:class:`DeltaRuleQ17` loaded from the same per-key sums, then one result per event."""
    from lakeivm.testing.nested import DeltaRuleQ17

    return _load_and_run(lambda: DeltaRuleQ17(**dict(shape.params)), state, events)


def _load_and_run(make, state: dict[str, list], events: list) -> tuple[float, float, list]:
    """Time loading ``make()`` from the per-key sums, then one result per event (GC off, as timeit)."""
    with _no_gc():
        t0 = time.perf_counter()
        evaluator = make()
        for table in ("lineitem", "part"):
            evaluator.load(table, state[table])
        load = time.perf_counter() - t0
        t0 = time.perf_counter()
        out = [evaluator.apply_all([e]) for e in events]
        return load, time.perf_counter() - t0, out


def q17_recompute(shape, work: dict, versions: int) -> tuple[float, list]:
    """Per version, Q17 from scratch over the live rows with numpy (filter first; module doc)."""
    import numpy as np

    params = dict(shape.params)
    num, den = Fraction(params["c"]).numerator, Fraction(params["c"]).denominator
    divisor = Fraction(params["divisor"])
    n, events = len(work["partkey"]), work["events"][:versions]
    partkey, quantity, price = (np.empty(n + len(events), dtype=np.int64) for _ in range(3))
    partkey[:n], quantity[:n], price[:n] = work["partkey"], work["quantity"], work["price"]
    selected, minlength = work["selected"], work["parts"] + 1
    size, out = n, []
    with _no_gc():
        t0 = time.perf_counter()
        for event, j in zip(events, work["positions"]):
            row = event.row
            if j < 0:
                partkey[size], quantity[size], price[size] = row.l_partkey, row.l_quantity, row.l_extendedprice
                size += 1
            else:
                assert (partkey[j], quantity[j], price[j]) == (row.l_partkey, row.l_quantity, row.l_extendedprice)
                size -= 1
                partkey[j], quantity[j], price[j] = partkey[size], quantity[size], price[size]
            lines = np.flatnonzero(selected[partkey[:size]])
            pk, qty = partkey[lines], quantity[lines]
            cnt = np.bincount(pk, minlength=minlength)
            sumq = np.bincount(pk, weights=qty, minlength=minlength).astype(np.int64)  # exact below 2^53
            keep = den * cnt[pk] * qty < num * sumq[pk]
            out.append(Fraction(int(price[lines][keep].sum())) / divisor if keep.any() else None)
        return time.perf_counter() - t0, out


@contextmanager
def _no_gc():
    """Time without the cyclic GC (as ``timeit`` does): its full collections walk every live object,
    so with millions of state objects they add noise that depends on the heap, not the method."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def q17_one(scale: float, skew: str, events: int, sample: int, seed: int, *, zipf_s: float = 1.0,
            part_share: float = 0.001, filtered: str = "random", progress=None) -> dict:
    """One Q17 run (one scale, one skew): times the three methods, checks they agree; returns the run's record."""
    import numpy as np

    say = progress or (lambda message: None)
    shape = q17_shape()
    params = dict(shape.params)
    t0 = time.perf_counter()
    work = q17_workload(scale, skew, events, seed, zipf_s=zipf_s, part_share=part_share, filtered=filtered,
                        brand=params["brand"], container=params["container"])
    generate_seconds = time.perf_counter() - t0
    t0 = time.perf_counter()
    state = q17_state_rows(work)
    state_seconds, state_keys = time.perf_counter() - t0, len(state["lineitem"])
    say(f"  SF {scale} {skew}: workload {generate_seconds:.1f}s, {state_keys} state keys {state_seconds:.1f}s")
    stream, sample = work["events"], min(sample, events)

    index_load, index_events, expected = q17_index(shape, state, stream)
    say(f"  index: load {index_load:.1f}s, {len(stream)} events {index_events:.2f}s")
    rule_load, rule_events, rule_results = q17_delta_rule(shape, state, stream)
    say(f"  delta rule: load {rule_load:.1f}s, {len(stream)} events {rule_events:.2f}s")
    assert rule_results == expected, "the delta rule disagrees with the index"
    del state
    recompute_sample, recompute_results = q17_recompute(shape, work, sample)
    say(f"  recompute: {sample} versions {recompute_sample:.2f}s")
    assert recompute_results == expected[:sample], "recompute disagrees with the index"

    scale_up = len(stream) / sample if sample else float("nan")
    seconds = {"index": index_load + index_events, "recompute": recompute_sample * scale_up,
               "delta_rule": rule_load + rule_events}
    per_event = {"index": index_events, "recompute": recompute_sample * scale_up, "delta_rule": rule_events}
    counts = np.bincount(work["partkey"], minlength=work["parts"] + 1)
    selected = work["selected"]
    on_selected = sum(bool(selected[e.row.l_partkey]) for e in stream)
    return {
        "scale_factor": scale, "skew": skew, "zipf_s": zipf_s if skew == "zipf" else None,
        "lineitem_rows": len(work["partkey"]), "parts": work["parts"], "parts_with_lines": int((counts > 0).sum()),
        "max_lines_per_part": int(counts.max()), "state_keys": state_keys,
        "filtered_parts": int(selected.sum()), "filtered_choice": filtered, "filtered_lines": int(counts[selected].sum()),
        "events": len(stream), "deletes": sum(e.sign < 0 for e in stream), "events_on_filtered_parts": on_selected,
        "seconds": seconds, "per_event_seconds": per_event,
        "load_seconds": {"index": index_load, "delta_rule": rule_load},
        "workload_seconds": generate_seconds, "state_rows_seconds": state_seconds,
        "extrapolated": {"index": False, "recompute": scale_up != 1, "delta_rule": False},
        "measured_versions": {"index": len(stream), "recompute": sample, "delta_rule": len(stream)},
        "checked_versions": {"recompute": sample, "delta_rule": len(stream)},
        "speedup": {m: seconds[m] / seconds["index"] for m in ("recompute", "delta_rule")},
        "speedup_per_event": {m: per_event[m] / per_event["index"] for m in ("recompute", "delta_rule")},
        "non_null_results": sum(r is not None for r in expected),
        "distinct_results": len(set(expected)),
    }


def run_q17_bench(scales: list[float], skews: list[str], events: int, sample: int, seed: int, out: str, *,
                  zipf_s: float = 1.0, part_share: float = 0.001, filtered: str = "random") -> dict:
    """Run the Q17 benchmark for every scale x skew; returns (and writes ``nested_q17.json``/``.png``) the results."""
    results = {"machine": machine(), "query": "q17", "view": Q17_VIEW, "events_per_batch": events,
               "baseline_sample_versions": sample, "part_share": part_share, "filtered": filtered, "delete_ratio": 0.3,
               "price_unit": "cents (integer)", "runs": []}
    for scale in scales:
        for skew in skews:
            print(f"-- q17 SF {scale} {skew}", flush=True)
            results["runs"].append(q17_one(scale, skew, events, sample, seed, zipf_s=zipf_s, part_share=part_share,
                                           filtered=filtered, progress=lambda m: print(m, flush=True)))
            save(out, "nested_q17", results, _plot_q17)
    save(out, "nested_q17", results, _plot_q17)
    return results


def q17_summary(run: dict) -> str:
    """One line per run: seconds (with loads), speedups vs the index, '*' marks an extrapolated number."""
    s, x, star = run["seconds"], run["speedup"], {m: "*" if e else "" for m, e in run["extrapolated"].items()}
    pe, px = run["per_event_seconds"], run["speedup_per_event"]
    return (f"SF={run['scale_factor']:<5} {run['skew']:<7} N={run['lineitem_rows']:>8} P={run['parts']:>6} "
            f"filtered={run['filtered_parts']} {run['filtered_choice']} ({run['events_on_filtered_parts']} events on them, "
            f"{run['distinct_results']} distinct results): "
            f"index {s['index']:.2f}s, recompute {s['recompute']:.1f}s{star['recompute']} (x{x['recompute']:.1f}), "
            f"delta rule {s['delta_rule']:.2f}s (x{x['delta_rule']:.2f}); without loads: index {pe['index']:.3f}s, "
            f"recompute x{px['recompute']:.0f}, delta rule {pe['delta_rule']:.3f}s (x{px['delta_rule']:.2f})")


def _plot_q17(results: dict, path: Path) -> None:
    use_agg()
    import matplotlib.pyplot as plt

    runs = results["runs"]
    labels = [f"SF {r['scale_factor']}\n{r['skew']}" for r in runs]
    methods = ("index", "recompute", "delta_rule")
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, key, title in ((axes[0], "seconds", "with state load"), (axes[1], "per_event_seconds", "events only")):
        width = 0.8 / len(methods)
        for i, method in enumerate(methods):
            xs = [k + (i - 1) * width for k in range(len(runs))]
            bars = ax.bar(xs, [r[key][method] for r in runs], width, label=method)
            for bar, run in zip(bars, runs):
                if run["extrapolated"][method]:
                    bar.set_hatch("//")
        ax.set_xticks(range(len(runs)))
        ax.set_xticklabels(labels)
        ax.set_yscale("log")
        ax.set_title(f"Q17, {results['events_per_batch']} per-version results: {title}")
        ax.grid(True, axis="y", which="both", alpha=0.3)
    axes[0].set_ylabel("seconds (hatched: extrapolated)")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
