"""Recognize the triangle count Q = Σ R(a,b)·S(b,c)·T(c,a) in a view's query IR.

The three relations may be three tables or one edge table joined with itself three times (graph
triangles). Each is oriented as (x, y): x joins the previous relation of the cycle R→S→T→R, y the
next one, so R.y = S.x, S.y = T.x and T.y = R.x (IVM^ε §2-3: each relation is partitioned on x).
"""
from __future__ import annotations

from dataclasses import dataclass

from lakeivm.sql import Query

ROLES = ("R", "S", "T")
NEXT = {"R": "S", "S": "T", "T": "R"}
PREV = {"R": "T", "S": "R", "T": "S"}


@dataclass(frozen=True)
class Side:
    """One relation of the triangle: ``alias`` of ``table`` with columns ``x`` (partition) and ``y``."""

    role: str
    alias: str
    table: str
    x: str
    y: str


@dataclass(frozen=True)
class TriangleShape:
    """The triangle's three sides in role order and the name of its COUNT(*) output."""

    sides: tuple[Side, Side, Side]
    output: str

    def side(self, role: str) -> Side:
        return self.sides[ROLES.index(role)]

    def sides_of(self, table: str) -> tuple[Side, ...]:
        """The sides a table plays (three for an edge table joined with itself)."""
        return tuple(s for s in self.sides if s.table == table)


def triangle_shape(query: Query) -> TriangleShape | None:
    """The triangle shape of ``query``, or None when it is anything else.

    A triangle: three relations, three equi-joins forming a cycle on two distinct columns per
    relation, no filters, no GROUP BY, and a single output COUNT(*).
    """
    if len(query.relations) != 3 or len(query.joins) != 3 or query.group_keys or query.residual:
        return None
    if any(query.filters.values()) or len(query.outputs) != 1 or len(query.aggregates) != 1:
        return None
    if query.aggregates[0].sql is not None or query.outputs[0].finalize_sql != "_lakeivm_count":
        return None
    r, s, t = (rel.alias for rel in query.relations)
    column = {}
    for join in query.joins:
        pair = frozenset((join.left_alias, join.right_alias))
        if len(pair) != 2 or pair in column:
            return None
        column[pair] = {join.left_alias: join.left_column, join.right_alias: join.right_column}
    if set(column) != {frozenset((r, s)), frozenset((s, t)), frozenset((t, r))}:
        return None
    orient = {r: (column[frozenset((t, r))][r], column[frozenset((r, s))][r]),
              s: (column[frozenset((r, s))][s], column[frozenset((s, t))][s]),
              t: (column[frozenset((s, t))][t], column[frozenset((t, r))][t])}
    if any(x == y for x, y in orient.values()):
        return None
    tables = {rel.alias: rel.table for rel in query.relations}
    sides = tuple(Side(role, alias, tables[alias], *orient[alias]) for role, alias in zip(ROLES, (r, s, t)))
    return TriangleShape(sides, query.outputs[0].name)  # type: ignore[arg-type]
