"""``lakeivm bench join-sample``: insertions per second of RSJoin vs two baselines, and their memory.

Workload (as the paper's graph experiments, §6): line-3 R1(a,b) ⋈ R2(b,c) ⋈ R3(c,d) and star-3
S1(x,a) ⋈ S2(x,b) ⋈ S3(x,c) where every relation holds all edges of one R-MAT power-law graph
(``datagen.graph.rmat_edges``), each relation's edges shuffled separately and the three streams
interleaved round-robin (3·E inserts). ``olc`` is a foreign-key chain L(ok) ⋈ O(ok,ck) ⋈ C(ck) shaped
like lineitem ⋈ orders ⋈ customer: E lines over E/4 orders over E/40 customers, uniform keys, all
rows in one shuffled stream (lines often arrive before their order). Methods, all pure Python, each in a forked child:

- ``rsjoin``: ``JoinSampler`` (dynamic index + reservoir with a predicate, Alg. 6);
- ``rsjoin_fk`` (query ``olc`` only): the foreign-key chain merged first (``PreJoin``, §4.4), so the
  sampler is a reservoir over one pre-joined relation -- the paper's RSJoin_opt;
- ``shj``: symmetric hash join enumerating each insert's new results into Algorithm R;
- ``resample``: the join materialized by the same enumeration, and a fresh uniform k-sample of it
  drawn every ``--resample-every`` inserts (one maintenance run).

Baselines enumerate every join result, so they get a time budget (``--budget``) and, for
``resample``, a cap on materialized results; the report gives how far each got and RSJoin's time
over the same inserts (``speedup``). Early in the stream the join is small and every method is
cheap; ``--warm F`` measures the steady state instead: the first F of the stream is loaded untimed
(RSJoin: index and exact sample of the loaded join,
docs/kinds/join_sample.md#restarts-and-exact-re-bootstrap, as a view's bootstrap does; SHJ: its hash
tables, its reservoir counter set to the loaded join's size) and the rest is timed. ``resample``
would have to materialize the loaded join and is skipped when that exceeds its cap. Memory: RSS
growth of the child from its start to the end of the run (every method only accumulates state, so
this is its peak).
Results: JSON + PNG under ``--out``.
"""
from __future__ import annotations

import math
import multiprocessing
import random
import resource
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from lakeivm.bench import machine, save, use_agg
from lakeivm.config import Settings

QUERIES = {
    "line3": {"R1": ("a", "b"), "R2": ("b", "c"), "R3": ("c", "d")},
    "star3": {"S1": ("x", "a"), "S2": ("x", "b"), "S3": ("x", "c")},
    "olc": {"L": ("ok",), "O": ("ok", "ck"), "C": ("ck",)},  # lineitem -> orders -> customer, TPC-H-like keys
}
FOREIGN_KEY_QUERIES = {"olc"}  # where rsjoin_fk (the chain merged into one relation, §4.4) applies
CHECKPOINTS = 10_000  # elapsed time is recorded after every 0.01% of the timed stream
PAPER_US_PER_INSERT = 13.0  # RSJoin, line-4 over Epinions, C++ (paper Fig. 6, mean update time)


def main(argv: list[str], settings: Settings) -> int:
    """``lakeivm bench join-sample [--edges 100000] [--ks 1000,100000] [--queries line3,star3] [--budget 120] [--warm F] [--out DIR]``."""
    import argparse


    parser = argparse.ArgumentParser(prog="lakeivm bench join-sample", description=__doc__.splitlines()[0])
    parser.add_argument("--edges", default="100000", help="graph sizes (edges), comma-separated")
    parser.add_argument("--ks", default="1000,100000", help="sample sizes, comma-separated")
    parser.add_argument("--queries", default="line3,star3")
    parser.add_argument("--methods", default="rsjoin,rsjoin_fk,shj,resample")
    parser.add_argument("--budget", type=float, default=120.0, help="seconds per baseline run")
    parser.add_argument("--max-results", type=int, default=5_000_000, help="resample: cap on materialized results")
    parser.add_argument("--resample-every", type=int, default=1000, help="resample: inserts per re-draw")
    parser.add_argument("--warm", type=float, default=0.0, help="share of the stream loaded untimed before timing the rest")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", default="bench-results")
    args = parser.parse_args(argv)
    if not 0 <= args.warm < 1:
        parser.error(f"--warm must be in [0, 1), got {args.warm}")
    results = {"machine": machine(), "paper_us_per_insert_line4_cpp": PAPER_US_PER_INSERT, "budget_s": args.budget,
               "resample_every": args.resample_every, "max_results": args.max_results, "warm": args.warm, "runs": []}
    for edges in [int(e) for e in args.edges.split(",")]:
        graph = _graph(edges, args.seed)
        results.setdefault("graphs", {})[str(edges)] = _degrees(graph)
        for query in args.queries.split(","):
            stream = _stream(query, graph, args.seed)
            loaded, timed = stream[:int(args.warm * len(stream))], stream[int(args.warm * len(stream)):]
            loaded_join = _join_size(QUERIES[query], loaded) if loaded else 0
            for k in [int(k) for k in args.ks.split(",")]:
                rsjoin = None
                for method in args.methods.split(","):
                    if method == "rsjoin_fk" and query not in FOREIGN_KEY_QUERIES:
                        continue
                    if method == "resample" and loaded_join > args.max_results:
                        print(f"{query} E={edges:,} k={k:,} resample: skipped, the loaded join has {loaded_join:,} results "
                              f"(> --max-results {args.max_results:,})", flush=True)
                        continue
                    run = _measure(method, query, loaded, timed, k, loaded_join, args)
                    run.update(edges=edges, query=query, k=k, method=method, inserts=len(timed), loaded=len(loaded),
                               loaded_join=loaded_join)
                    rsjoin = run if method == "rsjoin" else rsjoin
                    if rsjoin is not None and method != "rsjoin":
                        run["rsjoin_seconds_same_inserts"] = _seconds_at(rsjoin, run["done"])
                        run["speedup"] = run["seconds"] / max(run["rsjoin_seconds_same_inserts"], 1e-9)
                    results["runs"].append(run)
                    print(_line(run), flush=True)
                    save(args.out, "join_sample", results)  # kept current: a long run can be cut
    save(args.out, "join_sample", results, _plot)
    print(f"wrote {args.out}/join_sample.json and {args.out}/join_sample.png")
    return 0


def run_rsjoin(query: str, loaded: list, stream: list, k: int, loaded_join: int, budget: float, args) -> dict:
    from lakeivm.views.join_sample import JoinSampler

    sampler = JoinSampler(QUERIES[query], k, seed=args.seed)
    if loaded:
        snapshot: dict = {}
        for rel, rid, row in loaded:
            snapshot.setdefault(rel, []).append((rid, row))
        sampler.rebootstrap(snapshot)
    done = _timed(stream, lambda rel, rid, row, deadline: sampler.insert(rel, rid, row), budget)
    r = sampler.reservoir
    return {**done, "sample": len(r.items), "batch_positions": r.counters["seen"], "stops": r.counters["stops"],
            "dummy_stops": r.counters["dummy_stops"]}


def run_rsjoin_fk(query: str, loaded: list, stream: list, k: int, loaded_join: int, budget: float, args) -> dict:
    from lakeivm.views.join_sample import JoinSampler
    from lakeivm.views.join_sample.plan import UNIT
    from lakeivm.views.join_sample.prejoin import PreJoin

    group, name = PreJoin(list(QUERIES[query].items()), out_attrs=()), "+".join(QUERIES[query])
    sampler = JoinSampler({name: (UNIT,)}, k, seed=args.seed)
    if loaded:
        sampler.rebootstrap({name: [(mid, (0,)) for rel, rid, row in loaded for mid, _ in group.insert(rel, str(rid), row)]})

    def insert(rel, rid, row, deadline):
        for merged_id, _ in group.insert(rel, str(rid), row):
            sampler.insert(name, merged_id, (0,))

    done = _timed(stream, insert, budget)
    return {**done, "sample": len(sampler.reservoir.items), "stops": sampler.reservoir.counters["stops"]}


def run_shj(query: str, loaded: list, stream: list, k: int, loaded_join: int, budget: float, args) -> dict:
    join, rng = SymmetricHashJoin(QUERIES[query]), random.Random(args.seed)
    for rel, rid, row in loaded:
        join.insert(rel, rid, row)  # stored, not enumerated: the lazy generator is dropped
    seen = loaded_join  # Algorithm R's counter after the loaded join; its k sampled items do not change the timing
    sample: list = [None] * min(k, loaded_join)

    def insert(rel, rid, row, deadline):
        nonlocal seen
        for result in join.insert(rel, rid, row):  # Algorithm R: one draw per result
            seen += 1
            if len(sample) < k:
                sample.append(result)
            else:
                j = rng.randrange(seen)
                if j < k:
                    sample[j] = result
            if not seen & 0xFFFF and time.perf_counter() > deadline:
                raise _Stop

    return {**_timed(stream, insert, budget), "results": seen - loaded_join, "sample": len(sample)}


def run_resample(query: str, loaded: list, stream: list, k: int, loaded_join: int, budget: float, args) -> dict:
    join, rng = SymmetricHashJoin(QUERIES[query]), random.Random(args.seed)
    materialized: list = [result for rel, rid, row in loaded for result in join.insert(rel, rid, row)]
    state = {"sample": [], "capped": False, "count": 0}

    def insert(rel, rid, row, deadline):
        for result in join.insert(rel, rid, row):
            materialized.append(result)
            if not len(materialized) & 0xFFFF and (len(materialized) > args.max_results or time.perf_counter() > deadline):
                state["capped"] = len(materialized) > args.max_results
                raise _Stop
        state["count"] += 1
        if state["count"] % args.resample_every == 0:
            state["sample"] = [materialized[i] for i in rng.sample(range(len(materialized)), min(k, len(materialized)))]

    done = _timed(stream, insert, budget)
    return {**done, "results": len(materialized) - loaded_join, "sample": len(state["sample"]), "capped": state["capped"]}


class SymmetricHashJoin:
    """Each insert's new results ΔQ(R, t), enumerated by hash probes along the join tree (a baseline, §1.3)."""

    def __init__(self, spec) -> None:
        from lakeivm.views.join_sample.spec import JoinSpec

        self.spec = JoinSpec.from_mapping(spec)
        self.edges = self.spec.directed_edges()
        self.tables: list[dict] = [{} for _ in self.edges]  # edge i: key(child) -> [(rid, row)] of the child
        self.slot = {name: i for i, name in enumerate(self.spec.names)}
        self.into = {name: [i for i, e in enumerate(self.edges) if e.parent == name] for name in self.spec.names}
        self.out = {name: [i for i, e in enumerate(self.edges) if e.child == name] for name in self.spec.names}

    def insert(self, relation: str, rid, row) -> Iterator[tuple]:
        """Store the row, then yield its new join results as row-id tuples (slot order), lazily."""
        for i in self.out[relation]:
            key = tuple(row[p] for p in self.edges[i].child_key)
            self.tables[i].setdefault(key, []).append((rid, row))
        ids = [None] * len(self.slot)
        ids[self.slot[relation]] = rid
        return self._product([(i, row) for i in self.into[relation]], ids)

    def _product(self, pending: list[tuple[int, tuple]], ids: list) -> Iterator[tuple]:
        """Every way to bind the subtrees below the (edge, parent row) pairs in ``pending``."""
        if not pending:
            yield tuple(ids)
            return
        (i, parent_row), rest = pending[0], pending[1:]
        edge = self.edges[i]
        for rid, row in self.tables[i].get(tuple(parent_row[p] for p in edge.parent_key), ()):
            ids[self.slot[edge.child]] = rid
            yield from self._product([(c, row) for c in edge.children] + rest, ids)


class _Stop(Exception):
    pass


def _timed(stream: list, insert: Callable, budget: float) -> dict:
    """Insert the stream until done or ``budget`` seconds pass; elapsed seconds after every 0.01% (marks).

    ``seconds`` ends at the last completed insert, so an insert cut by the budget costs nothing.
    """
    step = max(1, len(stream) // CHECKPOINTS)
    marks, start, done = [], time.perf_counter(), 0
    deadline, last = start + budget, start
    try:
        for i, (rel, rid, row) in enumerate(stream):
            insert(rel, rid, row, deadline)
            done, last = i + 1, time.perf_counter()
            if done % step == 0:
                marks.append((done, last - start))
            if last > deadline:
                break
    except _Stop:
        pass
    seconds = last - start
    return {"done": done, "seconds": seconds, "complete": done == len(stream), "marks": marks,
            "us_per_insert": 1e6 * seconds / max(done, 1)}


def _seconds_at(run: dict, inserts: int) -> float:
    """A run's elapsed seconds after its first ``inserts`` inserts, interpolated between its marks."""
    points = [(0, 0.0), *run["marks"], (run["done"], run["seconds"])]
    for (n0, t0), (n1, t1) in zip(points, points[1:]):
        if n0 <= inserts <= n1:
            return t0 + (t1 - t0) * (inserts - n0) / max(n1 - n0, 1)
    return run["seconds"]


def _join_size(spec: dict, rows: list) -> int:
    """|join| of the (relation, row id, row) triples by counting along the join tree (no enumeration)."""
    from lakeivm.views.join_sample.spec import JoinSpec

    join = JoinSpec.from_mapping(spec)
    edges = join.directed_edges()
    by_rel: dict = {}
    for rel, _, row in rows:
        by_rel.setdefault(rel, []).append(row)
    weights: dict = {}

    def weight(i: int) -> dict:  # edge i (child -> parent): key -> Σ over child rows of Π of their subtrees
        if i not in weights:
            edge, w = edges[i], {}
            for row in by_rel.get(edge.child, ()):
                product = 1
                for c in edge.children:
                    product *= weight(c).get(tuple(row[p] for p in edges[c].parent_key), 0)
                key = tuple(row[p] for p in edge.child_key)
                w[key] = w.get(key, 0) + product
            weights[i] = w
        return weights[i]

    root = join.names[0]
    into = [i for i, e in enumerate(edges) if e.parent == root]
    total = 0
    for row in by_rel.get(root, ()):
        product = 1
        for i in into:
            product *= weight(i).get(tuple(row[p] for p in edges[i].parent_key), 0)
        total += product
    return total


def _measure(method: str, query: str, loaded: list, stream: list, k: int, loaded_join: int, args) -> dict:
    """Run one method in a forked child (so memory is its own); returns its report."""
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe()
    budget = float("inf") if method == "rsjoin" else args.budget
    proc = ctx.Process(target=_child, args=(child, method, query, loaded, stream, k, loaded_join, budget, args))
    proc.start()
    report = parent.recv()
    proc.join()
    return report


def _child(conn, method: str, query: str, loaded: list, stream: list, k: int, loaded_join: int, budget: float, args) -> None:
    start_rss = _rss_kib()
    run = {"rsjoin": run_rsjoin, "rsjoin_fk": run_rsjoin_fk, "shj": run_shj, "resample": run_resample}[method]
    try:
        started = time.perf_counter()
        report = run(query, loaded, stream, k, loaded_join, budget, args)
        report["load_seconds"] = time.perf_counter() - started - report["seconds"]
    except BaseException as err:  # report it rather than leave the parent waiting
        conn.send({"error": repr(err), "done": 0, "seconds": 0.0, "complete": False, "marks": [], "us_per_insert": 0.0,
                   "memory_mib": 0.0})
        raise
    report["memory_mib"] = (_rss_kib() - start_rss) / 1024  # what the run keeps (ru_maxrss would start at the parent's peak)
    conn.send(report)


def _rss_kib() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() // 1024


def _graph(edges: int, seed: int) -> list[tuple[int, int]]:
    """R-MAT edges over 2^scale vertices with scale = ⌈log2(edges/8)⌉: average out-degree 4-8, like Epinions (~7)."""
    from lakeivm.datagen.graph import rmat_edges

    scale = max(10, math.ceil(math.log2(edges / 8)))
    return [(int(a), int(b)) for a, b in rmat_edges(scale, edges, seed=seed)]


def _degrees(graph: list[tuple[int, int]]) -> dict:
    from collections import Counter

    out, into = Counter(a for a, _ in graph), Counter(b for _, b in graph)
    return {"vertices": len(set(out) | set(into)), "max_out_degree": max(out.values()), "max_in_degree": max(into.values())}


def _stream(query: str, graph: list[tuple[int, int]], seed: int) -> list:
    """Every relation holds all edges, each in its own shuffled order; the streams interleave round-robin."""
    rng = random.Random(seed)
    if query == "olc":
        return _foreign_key_stream(len(graph), rng)
    orders = []
    for _ in QUERIES[query]:
        order = list(range(len(graph)))
        rng.shuffle(order)
        orders.append(order)
    return [(rel, i, graph[i]) for position in range(len(graph)) for rel, order in zip(QUERIES[query], orders)
            for i in (order[position],)]


def _foreign_key_stream(lines: int, rng: random.Random) -> list:
    """``olc``: lines -> orders (4 lines each on average) -> customers (10 orders each), one shuffled stream."""
    orders, customers = max(1, lines // 4), max(1, lines // 40)
    stream = [("C", c, (c,)) for c in range(customers)]
    stream += [("O", o, (o, rng.randrange(customers))) for o in range(orders)]
    stream += [("L", i, (rng.randrange(orders),)) for i in range(lines)]
    rng.shuffle(stream)
    return stream


def _line(run: dict) -> str:
    status = "complete" if run["complete"] else f"stopped at {run['done']}/{run['inserts']} inserts"
    extra = f", {run['results']:,} results enumerated" if "results" in run else ""
    if "speedup" in run and run["method"] == "rsjoin_fk":
        extra += f"; {1 / max(run['speedup'], 1e-9):,.2f}x the speed of RSJoin without foreign keys on the same inserts"
    elif "speedup" in run:
        extra += f"; {run['speedup']:,.1f}x RSJoin's time on the same inserts"
    warm = f" after {run['loaded']:,} loaded inserts ({run['load_seconds']:.1f} s)" if run.get("loaded") else ""
    return (f"{run['query']} E={run['edges']:,} k={run['k']:,} {run['method']:>8}: {run['us_per_insert']:.1f} µs/insert "
            f"({1e6 / max(run['us_per_insert'], 1e-9):,.0f}/s){warm}, {run['memory_mib']:.0f} MiB, {status}{extra}")


def _plot(results: dict, path: Path) -> None:
    use_agg()
    import matplotlib.pyplot as plt

    configs = sorted({(r["query"], r["edges"], r["k"]) for r in results["runs"]})
    methods = ["rsjoin", "rsjoin_fk", "shj", "resample"]
    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(13, 4.5))
    width = 0.8 / len(methods)
    for j, method in enumerate(methods):
        runs = [next((r for r in results["runs"] if (r["query"], r["edges"], r["k"]) == c and r["method"] == method), None)
                for c in configs]
        xs = [i + j * width for i in range(len(configs))]
        ax_t.bar(xs, [r["us_per_insert"] if r else 0 for r in runs], width, label=method)
        ax_m.bar(xs, [r["memory_mib"] if r else 0 for r in runs], width, label=method)
        for x, r in zip(xs, runs):
            if r and not r["complete"]:
                ax_t.annotate(f"{100 * r['done'] / r['inserts']:.0f}%", (x, r["us_per_insert"]), ha="center", fontsize=7)
    labels = [f"{q}\nE={e:,}\nk={k:,}" for q, e, k in configs]
    for ax, title in ((ax_t, "µs per insert (log; % = share of stream done in budget)"), (ax_m, "RSS growth, MiB")):
        ax.set_xticks([i + width for i in range(len(configs))], labels, fontsize=7)
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=8)
    ax_t.set_yscale("log")
    ax_t.axhline(PAPER_US_PER_INSERT, color="grey", linestyle=":", linewidth=1)
    warm = f", timed after {results.get('warm', 0):.0%} of the stream loaded" if results.get("warm") else ""
    fig.suptitle(f"join-sample: RSJoin vs symmetric hash join vs re-sampling (pure Python, {results['machine']['cores']} cores{warm})")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
