"""Reference evaluation and delta propagation of F-IVM view trees against brute-force oracles.

Oracles: the flat join enumerated by nested loops (no view tree), aggregated directly with numpy;
and recomputation of every stored view from scratch after each batch of a random stream.
"""
from __future__ import annotations

import itertools
import random
import zlib

import numpy as np
import pytest

from lakeivm.errors import InvalidInput
from lakeivm.sql import parse_query
from lakeivm.testing.fivm import FactorizedViews, compute_views
from lakeivm.views.fivm.rings import CofactorRing, CountRing, SumVectorRing, ols_coefficients
from lakeivm.views.fivm.tree import build_view_tree
from lakeivm.views.fivm.vorder import derive_order

CHAIN = {"r": {"a": "int", "x": "int"}, "s": {"a": "int", "b": "int", "y": "int"}, "t": {"b": "int", "z": "int"}}
CHAIN_SQL = "SELECT {keys}SUM(r.x * s.y * t.z) FROM r JOIN s ON r.a = s.a JOIN t ON s.b = t.b{group}"
STAR = {"f": {"k1": "int", "k2": "int", "k3": "int", "x": "int"}} | {
    f"d{i}": {f"k{i}": "int", f"y{i}": "int"} for i in (1, 2, 3)
}
STAR_SQL = (
    "SELECT {keys}SUM(f.x * d1.y1) FROM f JOIN d1 ON f.k1 = d1.k1 JOIN d2 ON f.k2 = d2.k2 "
    "JOIN d3 ON f.k3 = d3.k3{group}"
)


def _query(template: str, schemas: dict, group: str = ""):
    keys, clause = (f"{group}, ", f" GROUP BY {group}") if group else ("", "")
    return parse_query(template.format(keys=keys, group=clause), schemas)


def _random_row(rng: random.Random, columns: dict) -> dict:
    return {c: rng.randint(0, 2) if c.startswith(("a", "b", "k")) else rng.randint(-3, 3) for c in columns}


def _rows(bag: dict) -> list:
    return [(dict(key), m) for key, m in bag.items() if m]


def _flat_join(order, relations: dict) -> list[tuple[dict, int]]:
    """Every join tuple as {variable: value} with its weight (product of multiplicities)."""
    out = []
    aliases = list(order.relations)
    for combo in itertools.product(*(relations[a] for a in aliases)):
        assignment: dict = {}
        ok = True
        for alias, (row, _) in zip(aliases, combo):
            for column, variable in order.columns[alias]:
                ok &= assignment.setdefault(variable, row[column]) == row[column]
        if ok:
            out.append((assignment, int(np.prod([m for _, m in combo]))))
    return out


def _bags(rng: random.Random, schemas: dict, size: int) -> dict:
    bags = {}
    for alias, columns in schemas.items():
        bag: dict = {}
        for _ in range(size):
            key = tuple(sorted(_random_row(rng, columns).items()))
            bag[key] = bag.get(key, 0) + 1
        bags[alias] = bag
    return bags


def test_cofactor_root_matches_numpy_on_flat_join_and_lstsq() -> None:
    rng = random.Random(3)
    bags = _bags(rng, CHAIN, 8)
    order = derive_order(_query(CHAIN_SQL, CHAIN))
    features = ("a", "x", "y", "z")
    ring = CofactorRing(features)
    tree = build_view_tree(order, set())
    relations = {a: _rows(b) for a, b in bags.items()}
    ((key, root),) = compute_views(tree, ring, relations)[tree.root.id].items()
    join = _flat_join(order, relations)
    x = np.array([[t[f] for f in features] for t, _ in join], dtype=float)
    w = np.array([m for _, m in join], dtype=float)
    assert key == () and len(join) > 10
    assert np.isclose(root.c, w.sum()) and np.allclose(root.s, x.T @ w) and np.allclose(root.q, x.T @ (w[:, None] * x))
    design = np.repeat(np.column_stack([np.ones(len(x)), x[:, [0, 1, 2]]]), w.astype(int), axis=0)
    label = np.repeat(x[:, 3], w.astype(int))
    expect, *_ = np.linalg.lstsq(design, label, rcond=None)
    theta = ols_coefficients(ring, root, "z")
    assert np.allclose([theta[n] for n in ("intercept", "a", "x", "y")], expect, atol=1e-8)


@pytest.mark.parametrize("group", ["", "s.a"])
def test_grouped_sums_match_flat_join(group: str) -> None:
    bags = _bags(random.Random(5), CHAIN, 7)
    order = derive_order(_query(CHAIN_SQL, CHAIN, group))
    ring = SumVectorRing((frozenset(), frozenset({"x", "y", "z"}), frozenset({"y"})))
    tree = build_view_tree(order, set())
    relations = {a: _rows(b) for a, b in bags.items()}
    expect: dict = {}
    for t, m in _flat_join(order, relations):
        key = tuple(t[v] for v in tree.root.keys)
        row = np.array([m, m * t["x"] * t["y"] * t["z"], m * t["y"]], dtype=float)
        expect[key] = expect.get(key, 0) + row
    expect = {k: v for k, v in expect.items() if np.any(v)}
    got = compute_views(tree, ring, relations)[tree.root.id]
    assert set(got) == set(expect)
    assert all(np.allclose(got[k], expect[k]) for k in got)


STREAMS = [
    (CHAIN_SQL, CHAIN, "", {"r", "s", "t"}),
    (CHAIN_SQL, CHAIN, "s.b", {"s"}),
    (STAR_SQL, STAR, "", {"f", "d1", "d2", "d3"}),
    (STAR_SQL, STAR, "d2.y2", {"f", "d3"}),
]


@pytest.mark.parametrize(("template", "schemas", "group", "updatable"), STREAMS)
@pytest.mark.parametrize("ring_name", ["count", "vector", "cofactor"])
def test_incremental_equals_recomputation_after_random_streams(template, schemas, group, updatable, ring_name) -> None:
    rng = random.Random(zlib.crc32(f"{template[:20]}{group}{ring_name}".encode()))
    order = derive_order(_query(template, schemas, group))
    tree = build_view_tree(order, updatable)
    variables = [v for v in order.variables if v not in order.free]
    ring = {
        "count": CountRing(),
        "vector": SumVectorRing((frozenset(), frozenset(variables[:2]))),
        "cofactor": CofactorRing(tuple(variables)),
    }[ring_name]
    bags = _bags(rng, schemas, 5)
    views = FactorizedViews(tree, ring, {a: _rows(b) for a, b in bags.items()})
    for _ in range(25):
        for alias in rng.sample(sorted(updatable), k=rng.randint(1, len(updatable))):
            delta = _random_delta(rng, bags[alias], schemas[alias])
            views.apply(alias, _rows(delta))
            for key, m in delta.items():
                bags[alias][key] = bags[alias].get(key, 0) + m
        views.check_invariants({a: _rows(b) for a, b in bags.items()})
    assert views.result() or not _flat_join(order, {a: _rows(b) for a, b in bags.items()})


def _random_delta(rng: random.Random, bag: dict, columns: dict) -> dict:
    """Inserts (some duplicates), deletes of live rows and updates (delete + insert); may be empty."""
    delta: dict = {}
    live = [k for k, m in bag.items() if m > 0]
    for _ in range(rng.randint(0, 4)):
        op = rng.random()
        if op < 0.4 or not live:
            key = tuple(sorted(_random_row(rng, columns).items()))
            delta[key] = delta.get(key, 0) + rng.choice([1, 1, 2])
        else:
            old = rng.choice(live)
            if bag[old] + delta.get(old, 0) > 0:
                delta[old] = delta.get(old, 0) - 1
                if op > 0.7:
                    new = tuple(sorted({**dict(old), **_random_row(rng, {c: 0 for c in list(columns)[-1:]})}.items()))
                    delta[new] = delta.get(new, 0) + 1
    return {k: m for k, m in delta.items() if m}


def test_ex41_style_deltas_and_apply_then_undo() -> None:
    rng = random.Random(11)
    bags = _bags(rng, CHAIN, 6)
    tree = build_view_tree(derive_order(_query(CHAIN_SQL, CHAIN)), {"t"})
    views = FactorizedViews(tree, CountRing(), {a: _rows(b) for a, b in bags.items()})
    before = dict(views.result())
    t_rows = _rows(bags["t"])
    delta = [(t_rows[0][0], -1), ({"b": 1, "z": 0}, 3)]
    deltas = views.apply("t", delta)
    assert [*deltas] == ["leaf_t", *(s.view.id for s in tree.path_to_root("t"))]
    after = {**bags["t"]}
    for row, m in delta:
        key = tuple(sorted(row.items()))
        after[key] = after.get(key, 0) + m
    fresh = compute_views(tree, CountRing(), {**{a: _rows(b) for a, b in bags.items()}, "t": _rows(after)})
    old = compute_views(tree, CountRing(), {a: _rows(b) for a, b in bags.items()})
    for vid, d in deltas.items():
        keys = set(fresh[vid]) | set(old[vid])
        assert {k: fresh[vid].get(k, 0) - old[vid].get(k, 0) for k in keys if fresh[vid].get(k, 0) != old[vid].get(k, 0)} == d
    views.apply("t", [(row, -m) for row, m in delta])
    assert views.result() == before
    with pytest.raises(InvalidInput):
        views.apply("r", delta)


def test_self_join_updates_each_occurrence_in_sequence() -> None:
    schemas = {"e": {"src": "int", "dst": "int", "w": "int"}}
    q = parse_query("SELECT e1.src, SUM(e1.w * e2.w) FROM e e1 JOIN e e2 ON e1.dst = e2.src GROUP BY e1.src", schemas)
    order = derive_order(q)
    tree = build_view_tree(order, {"e1", "e2"})
    rng = random.Random(2)
    edges: dict = {}
    ring = SumVectorRing((frozenset(), frozenset({"e1_w", "e2_w"})))
    assert {"e1_w", "e2_w"} <= set(order.variables)
    views = FactorizedViews(tree, ring, {"e1": [], "e2": []})
    for _ in range(15):
        delta = _random_delta(rng, edges, schemas["e"])
        for alias in ("e1", "e2"):
            views.apply(alias, _rows(delta))
        for key, m in delta.items():
            edges[key] = edges.get(key, 0) + m
        views.check_invariants({"e1": _rows(edges), "e2": _rows(edges)})
    assert views.result()
