"""The join sample of one view over table rows: row ids, slots and canonical order around JoinSampler (pure).

Input rows are ``(row, multiplicity, passes)``: the values of the view's columns of a table, a
signed count, and per slot of that table whether the row passes the slot's filters. A row's m copies
get the ids ``row_id(row, c) .. row_id(row, c+m-1)`` after the c copies already present (see
``plan``). Everything is processed in a canonical order -- rows by their id, slots in FROM order,
the copies of a row inserted into one slot before the next slot
(docs/kinds/join_sample.md#rows-slots-and-order) -- so the index rebuilt from a snapshot is a
function of the snapshot alone (not of its read order) and a rerun replays the very same random
process. Slots merged along foreign keys (``plan.merged``) pass through a ``PreJoin``: the sampler
sees the group's joined rows, and a sampled merged id splits back into its slots' row ids.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from lakeivm.errors import InvalidInput, StateError

from .plan import UNIT, SamplePlan, row_id
from .prejoin import PreJoin, split_id
from .reservoir import PredicateReservoir
from .sampler import JoinSampler

Rows = Iterable[tuple[Sequence[Any], int, Sequence[bool]]]


class SampleView:
    """A JoinSampler over the plan's slots plus what turns its items back into sample rows."""

    def __init__(self, plan: SamplePlan, sampler: JoinSampler, tables: Mapping[str, Rows]) -> None:
        self.plan, self.sampler = plan, sampler
        self.copies: dict[str, Counter] = {t: Counter() for t in plan.columns}
        self.values: dict[str, dict[str, tuple]] = {t: {} for t in plan.columns}
        self.prejoins = {g.name: PreJoin([(m, plan.spec.attrs(m)) for m in g.members], [a for a in g.attrs if a != UNIT])
                         for g in plan.merged}
        self._group = {m: g.name for g in plan.groups for m in g.members}
        self._snapshot = {g.name: [] for g in plan.groups}
        for table, rows in tables.items():
            for _, ids, joined in self._admit(table, rows):
                for slot, keys in joined:
                    for rid in ids:
                        self._snapshot[self._group[slot.alias]] += self._merge(slot.alias, rid, keys)

    @classmethod
    def bootstrap(cls, plan: SamplePlan, tables: Mapping[str, Rows], seed: int,
                  rng_from: Mapping[str, Any] | None = None) -> SampleView:
        """An exact uniform sample of the join of ``tables``, w from its Beta law.

        Why exact: docs/kinds/join_sample.md#restarts-and-exact-re-bootstrap. ``rng_from``: a stored state whose RNG continues (a re-bootstrap); else a fresh ``seed``.
        """
        view = cls(plan, JoinSampler(plan.sampler_spec, plan.k, seed), tables)
        if rng_from is not None:
            view.sampler.reservoir.rng.setstate(PredicateReservoir.from_state(rng_from["sampler"]["reservoir"]).rng.getstate())
        view.sampler.rebootstrap(view._snapshot)
        view._snapshot = {}
        return view

    @classmethod
    def resume(cls, plan: SamplePlan, state: Mapping[str, Any], tables: Mapping[str, Rows]) -> SampleView:
        """Continue from ``to_state()`` with the index rebuilt from the snapshot it was saved at."""
        if state.get("fingerprint") != plan.fingerprint():
            raise StateError("the stored sample was drawn for another query or sample_size; re-bootstrap it")
        view = cls(plan, JoinSampler(plan.sampler_spec, plan.k, 0), tables)
        view.sampler = JoinSampler.from_state(state["sampler"], view._snapshot)
        view._snapshot = {}
        return view

    def insert(self, table: str, rows: Rows) -> None:
        """Insert a batch of ``table``'s rows (multiplicities > 0) into each of its slots in turn (Alg. 6)."""
        admitted = [(ids, {s.alias: keys for s, keys in joined}) for _, ids, joined in self._admit(table, rows)]
        for slot in self.plan.slots_of(table):
            for ids, keys_by_slot in admitted:
                if slot.alias in keys_by_slot:
                    for rid in ids:
                        for merged_id, keys in self._merge(slot.alias, rid, keys_by_slot[slot.alias]):
                            self.sampler.insert(self._group[slot.alias], merged_id, keys)

    def records(self) -> list[tuple]:
        """The sample rows: (reservoir slot, *SELECT outputs, *source row ids), min(k, |join|) of them."""
        tables = {s.alias: s.table for s in self.plan.slots}
        out = []
        for position, ids in enumerate(self.sampler.reservoir.items):
            by_alias = {}
            for group, rid in zip(self.sampler.spec.names, ids):
                by_alias.update(zip(self.prejoins[group].members, split_id(rid)) if group in self.prejoins else [(group, rid)])
            outputs = [self.values[tables[o.alias]][by_alias[o.alias]][o.position] for o in self.plan.outputs]
            out.append((position, *outputs, *(by_alias[s.alias] for s in self.plan.slots)))
        return out

    def to_state(self) -> dict[str, Any]:
        """JSON values: the query fingerprint and the sampler's state (S, w, q, counters, RNG); no index."""
        return {"fingerprint": self.plan.fingerprint(), "sampler": self.sampler.to_state()}

    def _merge(self, alias: str, rid: str, keys: tuple) -> list[tuple[str, tuple]]:
        """The sampler rows a slot's row makes: itself, or the joined rows it completes in its foreign-key group."""
        group = self._group[alias]
        if group not in self.prejoins:
            return [(rid, keys)]
        return [(merged_id, values or (0,)) for merged_id, values in self.prejoins[group].insert(alias, rid, keys)]

    def _admit(self, table: str, rows: Rows):
        """Yield (values, new ids, [(slot, join values)]) per row in canonical order; record copies and values."""
        slots = self.plan.slots_of(table)
        canonical = sorted(((row_id(tuple(values), 0), tuple(values), m, tuple(passes)) for values, m, passes in rows),
                           key=lambda r: r[0])
        for _, values, m, passes in canonical:
            if m <= 0 or len(passes) != len(slots):
                raise InvalidInput(f"row {values} of {table} has multiplicity {m} and {len(passes)} filter flags for "
                                   f"{len(slots)} slots; only inserts (m > 0) are sampled, deletes re-bootstrap")
            joined = [(s, keys) for s, ok in zip(slots, passes) if ok and (keys := self.plan.join_values(s, values)) is not None]
            if not joined:
                continue  # in no slot's join: never sampled, so its copies need no ids
            first = self.copies[table][values]
            ids = [row_id(values, first + i) for i in range(m)]
            self.copies[table][values] += m
            self.values[table].update(dict.fromkeys(ids, values))
            yield values, ids, joined
