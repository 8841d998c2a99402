"""Oracle for the fivm kind: F-IVM view trees over dicts, evaluated from scratch and maintained under deltas.

A plain-Python model of what ``lakeivm.views.fivm``'s maintainer does on Spark, for the tests
(tests/views/fivm/test_core.py checks it against the flat join by brute force); no product code
runs it. It mirrors Nikolic and Olteanu, *Incremental View Maintenance with Triple Lock
Factorization Benefits*: view trees (§3, Fig. 3) and delta propagation (§4, Fig. 4).

Relations are lists of ``(row, multiplicity)`` with rows as ``{column: value}``; a view's contents
map key tuples (values of ``view.keys`` in order) to ring payloads with no zero payloads.

``compute_views`` evaluates every view bottom-up: join the children on shared keys, multiply
payloads, lift and sum out the marginalized variables, group by the keys. ``FactorizedViews``
keeps the stored views μ(τ, U) and ``apply`` pushes one relation's delta up its leaf-to-root path,
joining each step's delta with the stored siblings (δV@X = ⊕_X δV_j ⊗ ⊗_{i≠j} V_i, §4) and adding
it into every stored view on the path. A batch over several relations is applied one relation at
a time (§4). Cost per update: the join of the delta with the sibling views on the path,
i.e. O(1) view keys per single-tuple update when the delta binds all sibling keys (Ex. 4.1).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lakeivm.errors import InvalidInput
from lakeivm.views.fivm.rings import Ring
from lakeivm.views.fivm.tree import View, ViewTree

Rows = Sequence[tuple[Mapping[str, Any], int]]
ViewData = dict[tuple, Any]


def compute_views(tree: ViewTree, ring: Ring, relations: Mapping[str, Rows]) -> dict[str, ViewData]:
    """Every view of ``tree`` from scratch, keyed by view id (Fig. 3). Linear in the database for
    acyclic joins, up to the size of the factorized join."""
    missing = set(tree.order.relations) - set(relations)
    if missing:
        raise InvalidInput(f"no rows given for relations {sorted(missing)}; pass an empty list for an empty relation.")
    out: dict[str, ViewData] = {}
    _compute(tree, ring, tree.root, relations, out)
    return out


class FactorizedViews:
    """The stored views μ(τ, U) of a view tree, maintained under signed deltas (F-IVM §4).

    Example::

        views = FactorizedViews(tree, CountRing(), {"r": [...], "s": [...]})
        views.apply("r", [({"a": 1, "b": 2}, +1)])
        views.result()   # the root view: {group key tuple: payload}
    """

    def __init__(self, tree: ViewTree, ring: Ring, relations: Mapping[str, Rows]) -> None:
        self.tree = tree
        self.ring = ring
        everything = compute_views(tree, ring, relations)
        self.stored: dict[str, ViewData] = {vid: everything[vid] for vid in tree.stored}

    def result(self) -> ViewData:
        """The root view: the query result per group."""
        return self.stored[self.tree.root.id]

    def apply(self, alias: str, rows: Rows) -> dict[str, ViewData]:
        """Propagate δ``alias`` = ``rows`` along its path and add it into the stored views (Fig. 4).

        Returns the delta of every view on the path (leaf first), e.g. to check Ex. 4.1.
        Cost: one join of the running delta with the stored siblings per step.
        """
        if alias not in self.tree.updatable:
            raise InvalidInput(f"relation {alias!r} is not updatable in this tree (updatable: {sorted(self.tree.updatable)}).")
        leaf = self.tree.leaf(alias)
        delta = _leaf_data(self.tree, self.ring, leaf, rows)
        deltas = {leaf.id: delta}
        for step in self.tree.path_to_root(alias):
            inputs = [(step.child, delta)] + [(s, self.stored[s.id]) for s in step.siblings]
            delta = _join_marginalize(self.ring, step.view, inputs)
            deltas[step.view.id] = delta
        for vid, d in deltas.items():
            if vid in self.stored:
                _add_into(self.ring, self.stored[vid], d)
        return deltas

    def check_invariants(self, relations: Mapping[str, Rows]) -> None:
        """Every stored view equals its recomputation from ``relations`` (same keys, close payloads)."""
        fresh = compute_views(self.tree, self.ring, relations)
        for vid, data in self.stored.items():
            assert set(data) == set(fresh[vid]), f"{vid}: keys differ: {set(data) ^ set(fresh[vid])}"
            for key, payload in data.items():
                assert self.ring.close(payload, fresh[vid][key]), f"{vid}[{key}]: {payload} != {fresh[vid][key]}"


def _compute(tree: ViewTree, ring: Ring, view: View, relations: Mapping[str, Rows], out: dict[str, ViewData]) -> ViewData:
    if view.relation is not None:
        data = _leaf_data(tree, ring, view, relations[view.relation])
    else:
        inputs = [(c, _compute(tree, ring, c, relations, out)) for c in view.children]
        data = _join_marginalize(ring, view, inputs)
    out[view.id] = data
    return data


def _leaf_data(tree: ViewTree, ring: Ring, view: View, rows: Rows) -> ViewData:
    """⊕ over the private variables of one relation: group by the leaf keys, lift what is summed out."""
    column = {v: c for c, v in reversed(tree.order.columns[view.relation])}
    out: ViewData = {}
    for row, m in rows:
        payload = ring.from_multiplicity(m)
        for v in view.marginalized:
            payload = ring.mul(payload, ring.lift(v, row[column[v]]))
        key = tuple(row[column[v]] for v in view.keys)
        out[key] = ring.add(out[key], payload) if key in out else payload
    return {k: p for k, p in out.items() if not ring.is_zero(p)}


def _join_marginalize(ring: Ring, view: View, inputs: list[tuple[View, ViewData]]) -> ViewData:
    """⊕_X (V_1 ⊗ … ⊗ V_k) grouped by ``view.keys``; the first input drives the join."""
    (first, data), rest = inputs[0], inputs[1:]
    partial = [(dict(zip(first.keys, key)), p) for key, p in data.items()]
    for child, child_data in rest:
        partial = _hash_join(ring, partial, child, child_data)
    out: ViewData = {}
    for assignment, payload in partial:
        for v in view.marginalized:
            payload = ring.mul(payload, ring.lift(v, assignment[v]))
        key = tuple(assignment[v] for v in view.keys)
        out[key] = ring.add(out[key], payload) if key in out else payload
    return {k: p for k, p in out.items() if not ring.is_zero(p)}


def _hash_join(ring: Ring, partial: list[tuple[dict, Any]], child: View, data: ViewData) -> list[tuple[dict, Any]]:
    if not partial:
        return []
    shared = [v for v in child.keys if v in partial[0][0]]
    index: dict[tuple, list[tuple[tuple, Any]]] = {}
    for key, p in data.items():
        row = dict(zip(child.keys, key))
        index.setdefault(tuple(row[v] for v in shared), []).append((key, p))
    out = []
    for assignment, payload in partial:
        for key, p in index.get(tuple(assignment[v] for v in shared), []):
            out.append(({**assignment, **dict(zip(child.keys, key))}, ring.mul(payload, p)))
    return out


def _add_into(ring: Ring, target: ViewData, delta: ViewData) -> None:
    """V := V ⊎ δV, deleting keys whose stored payload is dead (as the maintainer's MERGE does)."""
    for key, p in delta.items():
        total = ring.add(target[key], p) if key in target else p
        if ring.is_dead(total):
            target.pop(key, None)
        else:
            target[key] = total
