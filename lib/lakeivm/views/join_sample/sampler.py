"""Uniform k-samples of an acyclic join under inserts, with exact re-bootstrap and restartable state (RSJoin, Alg. 6).

``JoinSampler`` ties the dynamic join index (§4) to reservoir sampling with a predicate (§3): each
insert's implicit ΔJ is one batch, read only where the reservoir stops; dummies fail the predicate.
Expected total O(N log N + k log N log(N/k)) for N inserts (Cor. 4.3). Deletes and updates are out
of the paper's scope: ``rebootstrap`` rebuilds index and sample exactly from a snapshot.
``to_state`` holds the sample, w, q, counters and the RNG state but not the index, which
``from_state`` rebuilds from the snapshot of the inserted rows
(docs/kinds/join_sample.md#restarts-and-exact-re-bootstrap).
"""
from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lakeivm.errors import InvalidInput, StateError

from .bootstrap import bootstrap_sample
from .index import JoinIndex, RowId
from .reservoir import PredicateReservoir
from .spec import JoinSpec

STATE_VERSION = 1
Snapshot = Mapping[str, Iterable[tuple[RowId, Sequence[Hashable]]]]


@dataclass(frozen=True)
class JoinResult:
    """One sampled join result: the source row id per relation and the value per attribute, in spec order."""

    row_ids: tuple[tuple[str, RowId], ...]
    values: tuple[tuple[str, Hashable], ...]

    def as_record(self) -> dict[str, Any]:
        """A flat record: ``<relation>_row_id`` per relation, then one column per attribute."""
        return {**{f"{rel}_row_id": rid for rel, rid in self.row_ids}, **dict(self.values)}


class JoinSampler:
    """k uniform samples without replacement of the join ``spec``, after every insert (Alg. 6).

    Example::

        sampler = JoinSampler({"R1": ("a", "b"), "R2": ("b", "c")}, k=2, seed=7)
        sampler.insert("R1", 1, (0, 5))
        sampler.insert("R2", 1, (5, 9))
        sampler.sample()[0].as_record()  # {'R1_row_id': 1, 'R2_row_id': 1, 'a': 0, 'b': 5, 'c': 9}
    """

    def __init__(self, spec: JoinSpec | Mapping[str, Sequence[str]], k: int, seed: int) -> None:
        self.spec = spec if isinstance(spec, JoinSpec) else JoinSpec.from_mapping(spec)
        self.index = JoinIndex(self.spec)
        self.reservoir = PredicateReservoir(k, seed)

    def insert(self, relation: str, row_id: RowId, row: Sequence[Hashable]) -> None:
        """Insert one row (set semantics on row ids) and sample its new join results: O(log N) amortized + stops."""
        if not isinstance(row_id, (int, str)) or isinstance(row_id, bool):
            raise InvalidInput(f"row id {row_id!r} of {relation} must be an int or str so the sample persists as JSON")
        delta = self.index.insert(relation, row_id, row)
        self.reservoir.feed(delta.size, delta.retrieve)

    def insert_batch(self, rows: Iterable[tuple[str, RowId, Sequence[Hashable]]]) -> None:
        """Insert ``(relation, row_id, row)`` triples in the given (deterministic) order; any order is uniform."""
        for relation, row_id, row in rows:
            self.insert(relation, row_id, row)

    def rebootstrap(self, relations: Snapshot) -> None:
        """Replace index and sample by an exact uniform sample of the snapshot's join, seeded by the RNG state.

        Use after deletes or updates. Cost O(|E|·N log N) to rebuild plus O(k·|E|·log N) to sample.
        """
        self.index = _build_index(self.spec, relations)
        items, w = bootstrap_sample(self.index, self.reservoir.k, self.reservoir.rng)
        self.reservoir.restore(items, w)

    def sample(self) -> list[JoinResult]:
        """The current sample: min(k, |join|) distinct join results, in reservoir slot order."""
        return [self._result(ids) for ids in self.reservoir.items]

    def check_invariants(self) -> None:
        """Index and reservoir invariants, plus: every sampled item is a real, distinct join result."""
        self.index.check_invariants()
        self.reservoir.check_invariants()
        assert len(set(self.reservoir.items)) == len(self.reservoir.items), "the sample repeats a result"
        for ids in self.reservoir.items:
            assert _joins(self.spec, self.index, ids), f"sampled {ids} is not a join result"

    def to_state(self) -> dict[str, Any]:
        """Everything but the index, as JSON values: spec, reservoir (S, w, q, counters, RNG), rows per relation."""
        return {
            "version": STATE_VERSION,
            "spec": self.spec.to_mapping(),
            "reservoir": self.reservoir.to_state(),
            "row_counts": {name: len(rows) for name, rows in self.index.rows.items()},
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any], relations: Snapshot) -> JoinSampler:
        """Resume from ``to_state()`` output and the snapshot of every row inserted so far (any order)."""
        if state.get("version") != STATE_VERSION:
            raise StateError(f"join sampler state version {state.get('version')!r} is not {STATE_VERSION}; re-bootstrap")
        spec = JoinSpec.from_mapping(state["spec"])
        sampler = cls(spec, state["reservoir"]["k"], seed=0)
        sampler.index = _build_index(spec, relations)
        counts = {name: len(rows) for name, rows in sampler.index.rows.items()}
        if counts != state["row_counts"]:
            raise StateError(f"snapshot has {counts} rows but the state was saved at {state['row_counts']}; "
                             "pass the snapshot at the saved watermarks or re-bootstrap")
        sampler.reservoir = PredicateReservoir.from_state(state["reservoir"], decode_item=tuple)
        if not all(_joins(spec, sampler.index, ids) for ids in sampler.reservoir.items):
            raise StateError("a sampled result is not in the snapshot's join; the snapshot does not match the state")
        return sampler

    def _result(self, ids: tuple[RowId, ...]) -> JoinResult:
        values: dict[str, Hashable] = {}
        for name, rid in zip(self.spec.names, ids):
            values.update(zip(self.spec.attrs(name), self.index.rows[name][rid]))
        return JoinResult(
            row_ids=tuple(zip(self.spec.names, ids)),
            values=tuple((a, values[a]) for a in self.spec.attributes),
        )


def _build_index(spec: JoinSpec, relations: Snapshot) -> JoinIndex:
    unknown = set(relations) - set(spec.names)
    if unknown:
        raise InvalidInput(f"snapshot relations {sorted(unknown)} are not in the join spec {list(spec.names)}")
    index = JoinIndex(spec)
    for name in spec.names:
        for row_id, row in relations.get(name, ()):
            index.insert(name, row_id, row)
    return index


def _joins(spec: JoinSpec, index: JoinIndex, ids: tuple[RowId, ...]) -> bool:
    """Whether the rows ``ids`` exist and agree on every shared attribute."""
    binding: dict[str, Hashable] = {}
    for name, rid in zip(spec.names, ids):
        row = index.rows[name].get(rid)
        if row is None:
            return False
        for attribute, value in zip(spec.attrs(name), row):
            if binding.setdefault(attribute, value) != value:
                return False
    return len(ids) == len(spec.names)
