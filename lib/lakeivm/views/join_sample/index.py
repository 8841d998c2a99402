"""Dynamic join index for acyclic joins: bucketed degree upper bounds and implicit delta batches (§4, Alg. 7-9).

For each directed tree edge d = (e -> p) and each key value t of key(e) the index keeps
``cnt[d][t]`` = Σ_{t' ∈ R_e ⋉ t} Π_{children c} cnt~[c][π t'] (exact |R_e ⋉ t| at a leaf) with cnt~
= 2^⌈log2 cnt⌉, and the tuples of R_e ⋉ t in buckets by the power of two of their product. The paper
keeps one copy per rooted tree; the counts depend only on the edge's direction, so the copies share
one set of counts per directed edge. An inserted tuple's new results form the implicit array ΔJ
(Alg. 8), read one position at a time by ``Delta.retrieve`` (Alg. 9, O(log N)); at the root the
exact cnt of each child is the mixed-radix size, which drops the top padding. IndexUpdate (Alg. 7,
its removal test corrected to ``old > 0``: docs/kinds/join_sample.md#algorithm-7s-removal-test)
costs O(log N) amortized.
"""
from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from math import prod
from lakeivm.errors import InvalidInput

from .spec import DirectedEdge, JoinSpec

RowId = Hashable
Row = tuple[Hashable, ...]
Key = tuple[Hashable, ...]


def round_up(count: int) -> int:
    """cnt~: the least power of two >= count, and 0 for 0."""
    return 0 if count == 0 else 1 << (count - 1).bit_length()


class _EdgeState:
    """The maintained part of one directed edge: counts, buckets, bucket positions, parent lookup."""

    __slots__ = ("edge", "cnt", "buckets", "where", "parent_rows", "up")

    def __init__(self, edge: DirectedEdge) -> None:
        self.edge = edge
        self.cnt: dict[Key, int] = {}
        self.buckets: dict[Key, dict[int, list[RowId]]] = {}
        self.where: dict[RowId, tuple[int, int]] = {}
        self.parent_rows: dict[Key, list[RowId]] = {}
        self.up: list[_EdgeState] = []


@dataclass(frozen=True)
class Delta:
    """ΔJ of one insert (Alg. 8): ``size`` positions, ``retrieve(z)`` gives row ids in spec order or None (a dummy).

    Valid until the next insert into the index.
    """

    index: JoinIndex
    relation: str
    row_id: RowId
    size: int

    def retrieve(self, z: int) -> tuple[RowId, ...] | None:
        """Position z of ΔJ (Alg. 9): O(log N) per tree level."""
        if not 0 <= z < self.size:
            raise InvalidInput(f"delta position {z} is outside [0, {self.size})")
        return self.index.retrieve_delta(self.relation, self.row_id, z)

    def real_results(self) -> list[tuple[RowId, ...]]:
        """Every real result of ΔJ, by reading all positions: O(|ΔJ| log N), for tests and audits."""
        results = (self.index.retrieve_delta(self.relation, self.row_id, z) for z in range(self.size))
        return [r for r in results if r is not None]


class JoinIndex:
    """The dynamic index of §4.2-§4.3 over one acyclic join spec (insert-only, row ids unique per relation)."""

    def __init__(self, spec: JoinSpec) -> None:
        self.spec = spec
        self.rows: dict[str, dict[RowId, Row]] = {name: {} for name in spec.names}
        self.slot = {name: i for i, name in enumerate(spec.names)}
        self.edges = [_EdgeState(e) for e in spec.directed_edges()]
        for state in self.edges:
            for c in state.edge.children:
                self.edges[c].up.append(state)
        self._out = {name: [s for s in self.edges if s.edge.child == name] for name in spec.names}
        self._in = {name: [s for s in self.edges if s.edge.parent == name] for name in spec.names}

    def insert(self, relation: str, row_id: RowId, row: Sequence[Hashable]) -> Delta:
        """Insert one tuple and return its implicit ΔJ (Alg. 6 lines 1-4); O(log N) amortized."""
        values = self._validate(relation, row_id, row)
        self.rows[relation][row_id] = values
        for state in self._in[relation]:
            state.parent_rows.setdefault(_project(values, state.edge.parent_key), []).append(row_id)
        for state in self._out[relation]:
            self._update(state, row_id, values, 0)
        return Delta(self, relation, row_id, prod(self._root_sizes(relation, values)))

    def retrieve_delta(self, relation: str, row_id: RowId, z: int) -> tuple[RowId, ...] | None:
        """Position z of the ΔJ of ``row_id`` in the tree rooted at ``relation``; None for a dummy."""
        values = self.rows[relation][row_id]
        out: list[RowId] = [None] * len(self.slot)
        out[self.slot[relation]] = row_id
        for state, size in zip(reversed(self._in[relation]), reversed(self._root_sizes(relation, values))):
            z, digit = divmod(z, size)
            if not self._retrieve_key(state, _project(values, state.edge.parent_key), digit, out):
                return None
        return tuple(out)

    def edges_into(self, relation: str) -> list[int]:
        """Ids of the edges (c -> relation): the root's children in the tree rooted at ``relation``."""
        return [i for i, s in enumerate(self.edges) if s.edge.parent == relation]

    def check_invariants(self) -> None:
        """Assert §4.2: cnt matches its definition, Σ 2^i|Φ_i| = cnt, one bucket per tuple, and Lemma 4.4."""
        exact = exact_counts(self)
        for i, state in enumerate(self.edges):
            e = state.edge
            recount: dict[Key, int] = {}
            seen = 0
            for rid, row in self.rows[e.child].items():
                key, weight = _project(row, e.child_key), self._product(state, row)
                recount[key] = recount.get(key, 0) + weight
                if weight:
                    exp, pos = state.where[rid]
                    assert 1 << exp == weight and state.buckets[key][exp][pos] == rid
                    seen += 1
                else:
                    assert rid not in state.where
            assert seen == len(state.where) == sum(len(b) for bs in state.buckets.values() for b in bs.values())
            recount = {k: v for k, v in recount.items() if v}
            assert {k: v for k, v in state.cnt.items() if v} == recount, f"cnt of {e.child}->{e.parent} drifted"
            for key, buckets in state.buckets.items():
                assert all(buckets.values()), "an empty bucket was kept"
                assert sum(len(b) << exp for exp, b in buckets.items()) == state.cnt.get(key, 0)
            subtree = _subtree_size(self.edges, i)
            for key, count in recount.items():
                assert exact[i].get(key, 0) <= count
                assert round_up(count) <= (1 << subtree) * exact[i].get(key, 0), "Lemma 4.4 bound broken"
            for key, rids in state.parent_rows.items():
                assert all(_project(self.rows[e.parent][r], e.parent_key) == key for r in rids)

    def _validate(self, relation: str, row_id: RowId, row: Sequence[Hashable]) -> Row:
        attrs = self.spec.attrs(relation)
        values = tuple(row)
        if len(values) != len(attrs):
            raise InvalidInput(f"row {row_id!r} of {relation} has {len(values)} values for attributes {attrs}")
        if row_id in self.rows[relation]:
            raise InvalidInput(
                f"row id {row_id!r} was already inserted into {relation}; processing an insert twice "
                "biases the sample: check the watermarks"
            )
        return values

    def _root_sizes(self, relation: str, values: Row) -> list[int]:
        return [s.cnt.get(_project(values, s.edge.parent_key), 0) for s in self._in[relation]]

    def _product(self, state: _EdgeState, row: Row, skip: _EdgeState | None = None) -> int:
        """Π over the child edges of cnt~ at the row's keys (1 at a leaf)."""
        return prod(
            round_up(self.edges[c].cnt.get(_project(row, self.edges[c].edge.parent_key), 0))
            for c in state.edge.children if self.edges[c] is not skip
        )

    def _update(self, state: _EdgeState, row_id: RowId, row: Row, old: int) -> None:
        """IndexUpdate (Alg. 7): re-bucket the row, update cnt, and propagate when cnt~ changes."""
        new = self._product(state, row)
        if new == old:
            return
        key = _project(row, state.edge.child_key)
        if old > 0:
            _bucket_remove(state, key, row_id)
        if new > 0:
            bucket = state.buckets.setdefault(key, {}).setdefault(new.bit_length() - 1, [])
            state.where[row_id] = (new.bit_length() - 1, len(bucket))
            bucket.append(row_id)
        before = state.cnt.get(key, 0)
        state.cnt[key] = before + new - old
        if round_up(state.cnt[key]) == round_up(before) or not state.up:
            return
        parent_rows = self.rows[state.edge.parent]
        for parent_id in state.parent_rows.get(key, ()):
            parent_row = parent_rows[parent_id]
            for up in state.up:
                self._update(up, parent_id, parent_row, round_up(before) * self._product(up, parent_row, skip=state))

    def _retrieve_key(self, state: _EdgeState, key: Key, z: int, out: list[RowId]) -> bool:
        """Case 3 of Alg. 9: position z among the buckets of key, then the tuple's own product."""
        if z >= state.cnt.get(key, 0):
            return False
        buckets = state.buckets[key]
        for exp in sorted(buckets):
            weight = len(buckets[exp]) << exp
            if z < weight:
                j, z = divmod(z, 1 << exp)
                row_id = buckets[exp][j]
                out[self.slot[state.edge.child]] = row_id
                return self._retrieve_row(state, self.rows[state.edge.child][row_id], z, out)
            z -= weight
        raise AssertionError("cnt exceeds the bucket weights; run check_invariants()")

    def _retrieve_row(self, state: _EdgeState, row: Row, z: int, out: list[RowId]) -> bool:
        """Case 2 of Alg. 9: mixed-radix digits of z over the children's cnt~, most significant first."""
        for c in reversed(state.edge.children):
            child = self.edges[c]
            key = _project(row, child.edge.parent_key)
            z, digit = divmod(z, round_up(child.cnt[key]))
            if not self._retrieve_key(child, key, digit, out):
                return False
        return True


def exact_counts(index: JoinIndex) -> list[dict[Key, int]]:
    """Exact |(⋈ T_e) ⋉ t| per directed edge and key, bottom-up (Yannakakis counting): O(|E|·N)."""
    counts: list[dict[Key, int] | None] = [None] * len(index.edges)

    def count(i: int) -> dict[Key, int]:
        if counts[i] is None:
            e = index.edges[i].edge
            below = [(index.edges[c].edge.parent_key, count(c)) for c in e.children]
            table: dict[Key, int] = {}
            for row in index.rows[e.child].values():
                key = _project(row, e.child_key)
                table[key] = table.get(key, 0) + prod(sub.get(_project(row, pos), 0) for pos, sub in below)
            counts[i] = {k: v for k, v in table.items() if v}
        return counts[i]

    return [count(i) for i in range(len(index.edges))]


def _project(row: Row, positions: tuple[int, ...]) -> Key:
    return tuple(row[p] for p in positions)


def _bucket_remove(state: _EdgeState, key: Key, row_id: RowId) -> None:
    exp, pos = state.where.pop(row_id)
    bucket = state.buckets[key][exp]
    last = bucket.pop()
    if last != row_id:
        bucket[pos] = last
        state.where[last] = (exp, pos)
    if not bucket:
        del state.buckets[key][exp]


def _subtree_size(edges: list[_EdgeState], i: int) -> int:
    return 1 + sum(_subtree_size(edges, c) for c in edges[i].edge.children)
