"""Variables and variable orders of an equi-join query (F-IVM §3, Def. 3.1).

A *variable* is an equivalence class of joined columns. A variable order is a rooted tree over the
*order variables* -- join variables (in two or more relations) and free (GROUP BY) variables -- in
which each relation's order variables lie on one root-to-leaf path; each relation hangs as a leaf
below its lowest order variable. A relation's private bound variables are not in the order: they are
compressed into the relation's leaf view, which marginalizes them all at once
(docs/kinds/fivm.md#choices-the-paper-leaves-open).

``derive_order`` picks an order from the join graph (free variables on top, then the variable in
most relations, recursing into connected components); ``parse_order`` validates an explicit one
from a spec. Both reject cyclic (non-α-acyclic) joins via the GYO reduction, pointing triangles
to the ``triangle`` kind, and reject Cartesian products.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import sqlglot
from sqlglot import exp

from lakeivm.errors import UnsupportedQuery
from lakeivm.sql import DIALECT, Query

OrderSpec = Mapping[str, object] | list | str


@dataclass(frozen=True)
class Variable:
    """One query variable: the columns (alias, column) equated by the join conditions."""

    name: str
    members: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class OrderNode:
    """A variable of the order with its child variables and the relations (aliases) hung below it."""

    variable: str
    children: tuple[OrderNode, ...]
    relations: tuple[str, ...]

    def variables(self) -> tuple[str, ...]:
        """This node's variable and all variables below it, preorder."""
        return (self.variable,) + tuple(v for c in self.children for v in c.variables())

    def render(self, depth: int = 0) -> list[str]:
        lines = ["  " * depth + self.variable + (f"  [{', '.join(self.relations)}]" if self.relations else "")]
        return lines + [line for c in self.children for line in c.render(depth + 1)]


@dataclass(frozen=True)
class VariableOrder:
    """A variable order over a query: ``root`` is None only for a single relation without join or
    free variables. ``columns[alias]`` maps each used column of a relation to its variable."""

    variables: Mapping[str, Variable]
    columns: Mapping[str, tuple[tuple[str, str], ...]]
    free: tuple[str, ...]
    root: OrderNode | None

    @property
    def relations(self) -> tuple[str, ...]:
        return tuple(self.columns)

    def variables_of(self, alias: str) -> tuple[str, ...]:
        """All variables of relation ``alias`` (order variables and private ones)."""
        return tuple(dict.fromkeys(v for _, v in self.columns[alias]))

    def order_variables(self) -> tuple[str, ...]:
        return self.root.variables() if self.root else ()

    def check_invariants(self) -> None:
        """Def. 3.1: each order variable once; each relation's order variables on its leaf's root path."""
        in_order = self.order_variables()
        assert len(in_order) == len(set(in_order)), f"variable twice in the order: {in_order}"
        assert set(self.free) <= set(in_order) or (not self.free and self.root is None)
        placed: dict[str, tuple[str, ...]] = {}
        for node, path in _walk(self.root, ()) if self.root else ():
            for alias in node.relations:
                placed[alias] = path + (node.variable,)
        for alias in self.columns:
            mine = set(self.variables_of(alias)) & set(in_order)
            if self.root is not None:
                assert alias in placed, f"relation {alias} is not hung in the order"
                assert mine <= set(placed[alias]), f"{alias}'s variables {mine} are not on its path"


def variables_of(query: Query) -> tuple[dict[str, Variable], dict[str, tuple[tuple[str, str], ...]]]:
    """The query's variables (join equivalence classes) and each relation's column -> variable map."""
    parent: dict[tuple[str, str], tuple[str, str]] = {}
    members = [(r.alias, c) for r in query.relations for c in r.columns]
    for m in members:
        parent[m] = m

    def find(m: tuple[str, str]) -> tuple[str, str]:
        while parent[m] != m:
            m = parent[m]
        return m

    for j in query.joins:
        left, right = (j.left_alias, j.left_column), (j.right_alias, j.right_column)
        parent[find(right)] = find(left)
    classes: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for m in members:
        classes.setdefault(find(m), []).append(m)
    column_count: dict[str, int] = {}
    for group in classes.values():
        column_count[group[0][1]] = column_count.get(group[0][1], 0) + 1
    variables: dict[str, Variable] = {}
    of_member: dict[tuple[str, str], str] = {}
    for group in classes.values():
        alias, column = group[0]
        name = column if column_count[column] == 1 else f"{alias}_{column}"
        while name in variables:
            name += "_"
        if len({a for a, _ in group}) < len(group):
            raise UnsupportedQuery(
                f"variable {name}: two columns of the same relation are equated ({group}); "
                "filter that relation with a WHERE on its own columns instead."
            )
        variables[name] = Variable(name, tuple(group))
        of_member.update({m: name for m in group})
    columns = {r.alias: tuple((c, of_member[(r.alias, c)]) for c in r.columns) for r in query.relations}
    return variables, columns


def derive_order(query: Query) -> VariableOrder:
    """A variable order from the join graph: free variables on top, each component rooted at the
    variable shared by most relations (ties: first in FROM order). O(V·R) per level."""
    variables, columns, free = _prepare(query)
    order_vars = _order_variables(variables, free)
    rels = {a: {v for _, v in cols if v in order_vars} for a, cols in columns.items()}
    rank = {v: i for i, v in enumerate(variables)}
    nodes, leaves = _decompose(rels, set(free), rank)
    return _finish(variables, columns, free, nodes, leaves)


def parse_order(query: Query, spec: OrderSpec) -> VariableOrder:
    """An explicit variable order from a spec, validated against the query (Def. 3.1).

    ``spec`` is a nested mapping ``{variable: children}`` where children is a mapping, a list of
    names/mappings, a single name or None, e.g. ``{"A": ["B", {"C": ["D", "E"]}]}``. A variable is
    named by its variable name or by any ``alias.column`` of its class. Private bound variables may
    be listed (as in the paper's Fig. 2) and are compressed into their relation's leaf.
    """
    variables, columns, free = _prepare(query)
    order_vars = _order_variables(variables, free)
    by_ref = {name: name for name in variables} | {f"{a}.{c}": v.name for v in variables.values() for a, c in v.members}
    tree = _read_spec(spec, by_ref)
    listed = [v for _, v in _flatten(tree)]
    if len(listed) != len(set(listed)):
        raise UnsupportedQuery(f"variable_order lists a variable twice: {listed}; list each variable once.")
    missing = order_vars - set(listed)
    if missing:
        raise UnsupportedQuery(f"variable_order misses join/group-by variables {sorted(missing)}; add them to the order.")
    for v in set(listed) - order_vars:
        tree = _drop(tree, v)
    parents = {child: par for par, child in _flatten(tree)}
    nodes = [_hang(name, kids, columns, order_vars, parents) for name, kids in tree]
    return _finish(variables, columns, free, nodes, [])


def check_acyclic(query: Query) -> None:
    """Reject joins that are not α-acyclic (GYO reduction over the relations' variable sets).

    F-IVM's view sizes are bounded by the factorized join only for acyclic joins (§6); a cyclic
    view can be quadratic. Triangles are pointed to the ``triangle`` kind.
    """
    _, columns = variables_of(query)
    edges = [frozenset(v for _, v in cols) for cols in columns.values()]
    changed = True
    while changed and len(edges) > 1:
        changed = False
        counts: dict[str, int] = {}
        for e in edges:
            for v in e:
                counts[v] = counts.get(v, 0) + 1
        reduced = [frozenset(v for v in e if counts[v] > 1) for e in edges]
        kept = [e for i, e in enumerate(reduced) if not any(e <= f and (e != f or j < i) for j, f in enumerate(reduced) if j != i)]
        changed = kept != edges
        edges = kept
    if len(edges) > 1:
        hint = " It is a triangle join: register it with `kind: triangle`." if _is_triangle(edges) else ""
        raise UnsupportedQuery(
            f"the join is cyclic (GYO leaves {[sorted(e) for e in edges]}); F-IVM maintains acyclic joins only.{hint}"
        )


def aggregate_variables(query: Query, order: VariableOrder) -> tuple[frozenset[str], ...]:
    """The variables multiplied by each aggregate, for ``SumVectorRing`` (Ex. 2.5): component 0 is
    COUNT(*), component k + 1 is ``query.aggregates[k]``. Each SUM must be a product of distinct
    bound columns, since each variable is lifted once, at its own view."""
    of_member = {m: v.name for v in order.variables.values() for m in v.members}
    out = [frozenset()]
    for agg in query.aggregates:
        if agg.func != "SUM":
            raise UnsupportedQuery(f"{agg.func} has no additive inverse, so F-IVM cannot maintain it; use kind: first_order.")
        if agg.sql is None:
            out.append(frozenset())
            continue
        node = sqlglot.parse_one(agg.sql, dialect=DIALECT)
        factors = list(node.flatten()) if isinstance(node, exp.Mul) else [node]
        names = [of_member.get((f.table, f.name)) if isinstance(f, exp.Column) else None for f in factors]
        if None in names or len(set(names)) < len(names) or set(names) & set(order.free):
            raise UnsupportedQuery(
                f"SUM({agg.sql}): F-IVM sums products of distinct non-GROUP-BY columns; "
                "compute other expressions as a column of the source table first."
            )
        out.append(frozenset(names))
    return tuple(out)


def _prepare(query: Query) -> tuple[dict[str, Variable], dict, tuple[str, ...]]:
    check_acyclic(query)
    variables, columns = variables_of(query)
    of_member = {m: v.name for v in variables.values() for m in v.members}
    free = []
    for key in query.group_keys:
        alias, _, column = key.sql.partition(".")
        if (alias, column) not in of_member:
            raise UnsupportedQuery(f"GROUP BY {key.sql} is not a plain column; F-IVM groups by columns only.")
        free.append(of_member[(alias, column)])
    return variables, columns, tuple(dict.fromkeys(free))


def _order_variables(variables: Mapping[str, Variable], free: tuple[str, ...]) -> set[str]:
    return {v.name for v in variables.values() if len(v.members) > 1} | set(free)


def _decompose(rels: dict[str, set[str]], free: set[str], rank: dict[str, int]) -> tuple[list[OrderNode], list[str]]:
    leaves = [a for a, vs in rels.items() if not vs]
    nodes = []
    for component in _components({a: vs for a, vs in rels.items() if vs}):
        candidates = set().union(*component.values())
        if candidates & free:
            candidates &= free
        pick = min(candidates, key=lambda v: (-sum(v in vs for vs in component.values()), rank[v]))
        children, hung = _decompose({a: vs - {pick} for a, vs in component.items()}, free, rank)
        nodes.append(OrderNode(pick, tuple(children), tuple(hung)))
    return nodes, leaves


def _components(rels: dict[str, set[str]]) -> list[dict[str, set[str]]]:
    out: list[dict[str, set[str]]] = []
    for alias, vs in rels.items():
        touching = [c for c in out if any(vs & ws for ws in c.values())]
        merged = {alias: vs}
        for c in touching:
            merged |= c
            out.remove(c)
        out.append(merged)
    return out


def _finish(variables: dict, columns: dict, free: tuple[str, ...], nodes: list[OrderNode], leaves: list[str]) -> VariableOrder:
    if len(nodes) + len(leaves) > 1 or (nodes and leaves):
        raise UnsupportedQuery("the join has a Cartesian product (disconnected relations); add the missing join condition.")
    order = VariableOrder(variables, columns, free, nodes[0] if nodes else None)
    order.check_invariants()
    return order


def _read_spec(spec: object, by_ref: Mapping[str, str]) -> list[tuple[str, list]]:
    if spec is None:
        return []
    if isinstance(spec, str):
        spec = [spec]
    if isinstance(spec, Mapping):
        spec = [{k: v} for k, v in spec.items()]
    if not isinstance(spec, list):
        raise UnsupportedQuery(f"variable_order: expected a mapping, list or name, got {spec!r}.")
    out = []
    for item in spec:
        pairs = item.items() if isinstance(item, Mapping) else [(item, None)]
        for ref, kids in pairs:
            if ref not in by_ref:
                raise UnsupportedQuery(f"variable_order names unknown variable {ref!r}; known: {sorted(by_ref)}.")
            out.append((by_ref[ref], _read_spec(kids, by_ref)))
    return out


def _flatten(tree: list[tuple[str, list]], parent: str | None = None) -> list[tuple[str | None, str]]:
    return [p for name, kids in tree for p in [(parent, name)] + _flatten(kids, name)]


def _drop(tree: list[tuple[str, list]], variable: str) -> list[tuple[str, list]]:
    out = []
    for name, kids in tree:
        out += _drop(kids, variable) if name == variable else [(name, _drop(kids, variable))]
    return out


def _hang(name: str, kids: list, columns: Mapping, order_vars: set[str], parents: dict) -> OrderNode:
    children = tuple(_hang(k, grand, columns, order_vars, parents) for k, grand in kids)
    below = set().union(*(c.variables() for c in children)) if children else set()
    hung = []
    for alias, cols in columns.items():
        mine = {v for _, v in cols} & order_vars
        if name in mine and not (mine & below):
            path = {name}
            node = name
            while parents.get(node) is not None:
                node = parents[node]
                path.add(node)
            if not mine <= path:
                raise UnsupportedQuery(
                    f"variable_order: relation {alias}'s variables {sorted(mine)} are not on one root-to-leaf path; "
                    "put them on one branch."
                )
            hung.append(alias)
    return OrderNode(name, children, tuple(hung))


def _walk(node: OrderNode, path: tuple[str, ...]):
    yield node, path
    for c in node.children:
        yield from _walk(c, path + (node.variable,))


def _is_triangle(edges: list[frozenset[str]]) -> bool:
    return len(edges) == 3 and all(len(e) == 2 for e in edges) and len(set().union(*edges)) == 3
