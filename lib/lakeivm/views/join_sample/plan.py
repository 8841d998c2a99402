"""A view's SQL -> the join sampler's spec: slots, join attributes, pushed-down filters, outputs.

Each FROM occurrence (alias) is one relation slot of the join spec (a self-join has one slot per
occurrence, docs/kinds/join_sample.md#rows-slots-and-order). Equi-join columns are grouped into
equivalence classes, and each class is one natural-join attribute; columns joined with nothing are
not attributes (the index only needs the join keys; the sample's other columns are read back from
the sampled rows). Single-table filters are pushed down to the slot's input (exact: a filtered row
never reaches the index) with their qualifiers removed, so they can be evaluated on the table's
change rows. A row with a NULL join key joins nothing in SQL and is not inserted. Anything else --
aggregates, GROUP BY, subqueries, conditions over several relations that are not equalities,
computed SELECT items -- is rejected with UnsupportedQuery.

Row identity (docs/kinds/join_sample.md#rows-slots-and-order): Delta's change data feed carries no
stable row id, so a source row is identified by its values on the columns the view reads from its
table plus an occurrence number 0..m-1 among the m equal such rows (bag semantics, as SQL).
``row_id`` encodes both as JSON text, stable across runs: rebuilt from a snapshot, the m copies get
numbers 0..m-1 again.

Foreign keys (``foreign_keys: ["lineitem -> orders", ...]``, paper §4.4): each declared pair of
FROM aliases is merged into one relation of the sampler's join (a ``Group``, kept by ``PreJoin``),
repeatedly, so the sampler's index covers fewer, pre-joined relations.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from lakeivm.errors import UnsupportedQuery
from lakeivm.sql import DIALECT, Query

from .spec import JoinSpec

UNIT = "_lakeivm_unit"  # the attribute of a single-relation "join" (a plain reservoir over one table)


@dataclass(frozen=True)
class Slot:
    """One occurrence of a table: the spec relation ``alias`` over ``table``.

    ``key_positions`` are the positions, in the table's ``columns``, of the slot's join attributes
    (in the spec's attribute order for the slot); ``filters`` are unqualified SQL predicates.
    """

    alias: str
    table: str
    key_positions: tuple[int, ...]
    filters: tuple[str, ...]


@dataclass(frozen=True)
class Output:
    """A SELECT item: ``name`` <- column ``position`` (in ``columns[table]``) of slot ``alias``."""

    name: str
    alias: str
    position: int


@dataclass(frozen=True)
class Group:
    """One relation of the sampler's join: a slot, or slots merged along foreign keys (``name`` = aliases joined by +).

    ``attrs`` are the attributes the group shares with the other groups (``(UNIT,)`` if none).
    """

    name: str
    members: tuple[str, ...]
    attrs: tuple[str, ...]


@dataclass(frozen=True)
class SamplePlan:
    """What the join-sample maintainer needs from the view's SQL and spec (see module doc).

    ``spec`` joins the slots; ``sampler_spec`` joins the groups, which is ``spec`` without foreign keys.
    """

    spec: JoinSpec
    slots: tuple[Slot, ...]
    columns: Mapping[str, tuple[str, ...]]  # table -> the columns the view reads of it
    outputs: tuple[Output, ...]
    k: int
    groups: tuple[Group, ...] = ()
    sampler_spec: JoinSpec | None = None

    def __post_init__(self) -> None:
        if not self.groups:
            object.__setattr__(self, "groups", tuple(Group(s.alias, (s.alias,), self.spec.attrs(s.alias)) for s in self.slots))
            object.__setattr__(self, "sampler_spec", self.spec)

    @property
    def merged(self) -> tuple[Group, ...]:
        """The groups of several slots (foreign keys merged)."""
        return tuple(g for g in self.groups if len(g.members) > 1)

    @property
    def row_id_columns(self) -> tuple[str, ...]:
        """The sample's source-row-id columns, one per slot."""
        return tuple(f"{s.alias}_row_id" for s in self.slots)

    def slots_of(self, table: str) -> tuple[Slot, ...]:
        return tuple(s for s in self.slots if s.table == table)

    def join_values(self, slot: Slot, row: Sequence[Hashable]) -> tuple[Hashable, ...] | None:
        """The slot's join-attribute values of a table row, or None if one is NULL (the row joins nothing)."""
        if not slot.key_positions:
            return (0,)
        values = tuple(row[p] for p in slot.key_positions)
        return None if any(v is None for v in values) else values

    def fingerprint(self) -> str:
        """A digest of everything the persisted sample depends on; a change forces a re-bootstrap."""
        parts = [self.spec.to_mapping(), [list(map(str, (s.alias, s.table, s.key_positions, s.filters))) for s in self.slots],
                 {t: list(c) for t, c in self.columns.items()}, self.k]
        if self.merged:
            parts.append([list(g.members) for g in self.merged])
        text = json.dumps(parts, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def row_id(row: Sequence[Any], occurrence: int) -> str:
    """The stable id of the ``occurrence``-th copy of ``row`` (values of the view's columns of its table).

    >>> row_id((7, "a", None), 1)
    '[7,"a",null,1]'
    """
    return json.dumps([*row, occurrence], default=str, separators=(",", ":"), ensure_ascii=False)


def plan_sample(query: Query, options: Mapping[str, Any], source: str = "<spec>") -> SamplePlan:
    """Build and validate the sample plan of a join query with ``sample_size`` (see module doc)."""
    _reject(query, source)
    k = options.get("sample_size")
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise UnsupportedQuery(f"{source}: a join_sample view needs `sample_size: k` with k a positive integer, got {k!r}.")
    columns = {t: query.columns_of(t) for t in query.tables}
    attribute = _attributes(query, source)
    relations, slots = {}, []
    for rel in query.relations:
        keyed = [(attribute[(rel.alias, c)], columns[rel.table].index(c)) for c in rel.columns if (rel.alias, c) in attribute]
        keyed.sort()
        relations[rel.alias] = tuple(a for a, _ in keyed) or (UNIT,)
        slots.append(Slot(rel.alias, rel.table, tuple(p for _, p in keyed),
                          tuple(_unqualified(f) for f in query.filters.get(rel.alias, ()))))
    if len(relations) > 1 and any(attrs == (UNIT,) for attrs in relations.values()):
        lonely = [a for a, attrs in relations.items() if attrs == (UNIT,)]
        raise UnsupportedQuery(f"{source}: relation(s) {lonely} join no other relation (a Cartesian product); "
                               "add an equi-join condition linking every relation.")
    try:
        spec = JoinSpec(tuple(relations.items()))
    except UnsupportedQuery as err:
        raise UnsupportedQuery(f"{source}: {err}") from err
    outputs = tuple(_output(item, query, columns, source) for item in query.tree.expressions)
    _check_names(outputs, slots, source)
    groups = _groups(spec, options.get("foreign_keys") or [], source)
    if all(len(g.members) == 1 for g in groups):
        return SamplePlan(spec, tuple(slots), columns, outputs, k)
    try:
        sampler_spec = JoinSpec(tuple((g.name, g.attrs) for g in groups))
    except UnsupportedQuery as err:
        raise UnsupportedQuery(f"{source}: merging the foreign keys {options['foreign_keys']} leaves {err}") from err
    return SamplePlan(spec, tuple(slots), columns, outputs, k, groups, sampler_spec)


def _groups(spec: JoinSpec, foreign_keys: Sequence[str], source: str) -> tuple[Group, ...]:
    """Slots merged along the declared ``"referencing -> referenced"`` alias pairs (union-find), in FROM order."""
    names = spec.names
    if isinstance(foreign_keys, str) or not isinstance(foreign_keys, Sequence):
        raise UnsupportedQuery(f"{source}: foreign_keys must be a list such as ['lineitem -> orders'], got {foreign_keys!r}")
    root = {n: n for n in names}

    def find(x: str) -> str:
        while root[x] != x:
            x = root[x]
        return x

    for pair in foreign_keys:
        ends = [e.strip() for e in str(pair).split("->")]
        if len(ends) != 2 or not all(e in names for e in ends) or ends[0] == ends[1]:
            raise UnsupportedQuery(f"{source}: foreign key {pair!r} must read 'referencing -> referenced' with two of "
                                   f"the query's FROM aliases {list(names)}, e.g. '{names[-1]} -> {names[0]}'")
        if not set(spec.attrs(ends[0])) & set(spec.attrs(ends[1])) - {UNIT}:
            raise UnsupportedQuery(f"{source}: foreign key {pair!r}: {ends[0]} and {ends[1]} are not joined by an "
                                   "equality; declare only pairs the query joins on the referenced table's key")
        root[find(ends[0])] = find(ends[1])
    members = {}
    for name in names:
        members.setdefault(find(name), []).append(name)
    groups = []
    for group in sorted(members.values(), key=lambda g: names.index(g[0])):
        if len(group) == 1:
            groups.append(Group(group[0], tuple(group), spec.attrs(group[0])))
            continue
        inside = {a for m in group for a in spec.attrs(m)}
        outside = {a for n in names if n not in group for a in spec.attrs(n)}
        shared = tuple(a for a in spec.attributes if a in inside & outside)
        groups.append(Group("+".join(group), tuple(group), shared or (UNIT,)))
    return tuple(groups)


def _reject(query: Query, source: str) -> None:
    fix = "a join_sample view samples the rows of a plain join; aggregate when reading the sample, or drop sample_size"
    if query.group_keys or query.aggregates or query.tree.find(exp.AggFunc):
        raise UnsupportedQuery(f"{source}: aggregates and GROUP BY are not supported with sample_size; {fix}.")
    if query.has_subquery:
        raise UnsupportedQuery(f"{source}: subqueries are not supported with sample_size; {fix}.")
    if query.residual:
        raise UnsupportedQuery(
            f"{source}: condition(s) {list(query.residual)} relate several relations without being an equality "
            "of two columns; a join_sample view supports equi-joins and single-table filters only."
        )


def _attributes(query: Query, source: str) -> dict[tuple[str, str], str]:
    """(alias, column) -> its join attribute: the equivalence class of the equi-joins, named by a member."""
    parent: dict[tuple[str, str], tuple[str, str]] = {}

    def find(x: tuple[str, str]) -> tuple[str, str]:
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    for j in query.joins:
        a, b = find((j.left_alias, j.left_column)), find((j.right_alias, j.right_column))
        if a != b:
            parent[max(a, b)] = min(a, b)
    classes: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for member in parent:
        classes.setdefault(find(member), []).append(member)
    attribute = {}
    for root, members in classes.items():
        aliases = [alias for alias, _ in members]
        if len(set(aliases)) != len(aliases):
            raise UnsupportedQuery(
                f"{source}: the equi-joins make two columns of relation {root[0]!r} equal "
                f"({sorted(f'{a}.{c}' for a, c in members)}); state that as a filter on one relation instead."
            )
        for member in members:
            attribute[member] = f"{root[0]}.{root[1]}"
    return attribute


def _unqualified(predicate: str) -> str:
    tree = exp.maybe_parse(predicate, dialect=DIALECT)
    return tree.transform(lambda n: exp.column(n.name) if isinstance(n, exp.Column) else n).sql(DIALECT)


def _output(item: exp.Expression, query: Query, columns: Mapping[str, tuple[str, ...]], source: str) -> Output:
    body = item.this if isinstance(item, exp.Alias) else item
    if not isinstance(body, exp.Column):
        raise UnsupportedQuery(f"{source}: SELECT item {body.sql(DIALECT)} is not a plain column; a join_sample view "
                               "keeps source columns only: compute expressions when reading the sample.")
    table = next(r.table for r in query.relations if r.alias == body.table)
    return Output(item.alias_or_name, body.table, columns[table].index(body.name))


def _check_names(outputs: tuple[Output, ...], slots: list[Slot], source: str) -> None:
    names = [o.name for o in outputs] + [f"{s.alias}_row_id" for s in slots] + ["_lakeivm_slot"]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise UnsupportedQuery(f"{source}: the sample would have repeated column(s) {repeated} (SELECT items and the "
                               "<alias>_row_id columns); give each SELECT item a distinct name with AS.")
