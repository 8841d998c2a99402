"""Foreign-key merging for join samples (RSJoin §4.4, as SJoin): a group of relations kept as their join.

Each declared pair R_i -> R_j (R_i's join key references R_j's primary key) is merged into one
relation R_ij of the sampler's join, and merging repeats, so a chain of foreign keys (lineitem ->
orders -> customer) becomes one relation. ``PreJoin`` maintains a merged relation as the
incremental natural join of its members: a referencing row whose key has arrived joins at once; a
referenced row that arrives later joins every row waiting with its key (one hash index per member
and lookup key). Correctness needs no key to be unique -- the merged relation is the members'
exact join, so the sample stays uniform over the whole join -- but it stays small (one row per
referencing row) only when the declared keys are keys.

A merged row's id is its members' row ids joined by a newline, which JSON text (the form of every
row id, see ``plan.row_id``) never holds raw; ``split_id`` gives the members' ids back.
"""
from __future__ import annotations

from collections.abc import Hashable, Sequence

from lakeivm.errors import InvalidInput

SEPARATOR = "\n"
Row = tuple[Hashable, ...]


def split_id(merged_id: str) -> list[str]:
    """The members' row ids of a merged row id, in member order."""
    return merged_id.split(SEPARATOR)


class PreJoin:
    """The natural join of ``members`` (name, attributes), kept under inserts; rows out as ``out_attrs`` values.

    >>> group = PreJoin([("l", ("ok",)), ("o", ("ok", "ck"))], out_attrs=("ck",))
    >>> group.insert("l", "l1", (7,))  # waits for its order
    []
    >>> group.insert("o", "o7", (7, 3))
    [('l1\\no7', (3,))]
    """

    def __init__(self, members: Sequence[tuple[str, Sequence[str]]], out_attrs: Sequence[str]) -> None:
        self.members = tuple(name for name, _ in members)
        self.attrs = {name: tuple(attrs) for name, attrs in members}
        self.out_attrs = tuple(out_attrs)
        self.steps = {m: self._join_order(m) for m in self.members}
        self.index: dict[tuple[str, tuple[str, ...]], dict[Row, list[tuple[str, Row]]]] = {
            (m, lookup): {} for steps in self.steps.values() for m, lookup in steps}  # rows stored once, as tuples
        self._own = {m: [(lookup, index) for (owner, lookup), index in self.index.items() if owner == m] for m in self.members}
        # member order -> position in the order a row of `start` meets the members (start, then its steps)
        self._id_order = {start: tuple([start, *(m for m, _ in steps)].index(m) for m in self.members)
                          for start, steps in self.steps.items()}

    def insert(self, member: str, rid: str, keys: Row) -> list[tuple[str, Row]]:
        """Store a row of ``member``; return the merged rows it completes as (id, values), sorted by id.

        Sorting makes the output independent of the order earlier rows arrived in, so a rebuild from a
        snapshot and an incremental history feed the sampler the same sequence.
        """
        if not isinstance(rid, str) or SEPARATOR in rid:
            raise InvalidInput(f"row id {rid!r} of {member} must be a string without a newline to be merged")
        keys, row = tuple(keys), dict(zip(self.attrs[member], keys))
        stored = (rid, keys)
        for lookup, index in self._own[member]:
            index.setdefault(tuple(row[a] for a in lookup), []).append(stored)
        partial: list[tuple[tuple[str, ...], dict]] = [((rid,), row)]
        for other, lookup in self.steps[member]:  # extend every partial row by its matches in `other`
            index, attrs = self.index[(other, lookup)], self.attrs[other]
            partial = [(ids + (rid_,), {**env, **dict(zip(attrs, keys_))})
                       for ids, env in partial for rid_, keys_ in index.get(tuple(env[a] for a in lookup), ())]
            if not partial:
                return []
        order = self._id_order[member]
        return sorted((SEPARATOR.join(ids[i] for i in order), tuple(env[a] for a in self.out_attrs)) for ids, env in partial)

    def _join_order(self, start: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """The other members, each after one it shares an attribute with, with the attributes already bound."""
        bound, rest, steps = set(self.attrs[start]), [m for m in self.members if m != start], []
        while rest:
            member = next((m for m in rest if bound & set(self.attrs[m])), None)
            if member is None:
                raise InvalidInput(f"foreign-key group {list(self.members)} is not connected by join attributes")
            steps.append((member, tuple(a for a in self.attrs[member] if a in bound)))
            bound |= set(self.attrs[member])
            rest.remove(member)
        return tuple(steps)
