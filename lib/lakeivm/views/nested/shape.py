"""Recognize the nested-aggregate shapes the ``nested`` kind maintains, binding tables, columns, constants.

The paper's query class (§4.1, §4.3) is an aggregate whose WHERE compares a constant
or an uncorrelated aggregate with a correlated nested SUM/COUNT/AVG, correlated by equality or by
one inequality. Five shapes of it have evaluators (:mod:`lakeivm.views.nested.evaluators`):
Example 2.1, VWAP, MST, PSP and TPC-H Q17. Each is written below as a *pattern*: its SQL over
canonical tables (``bids``/``asks`` with ``broker_id, price, volume``; ``lineitem``, ``part``) with
``:name`` placeholders for its constants. A view's qualified SQL matches a pattern when the two
trees unify: every pattern table, column and relation occurrence maps to exactly one of the view's
(so any table and column names work), every placeholder to a literal, and ``=``, ``+``, ``*``,
``AND``, the order of FROM and of the conjuncts, and the direction of ``<``/``>`` may differ.

A nested query that matches no pattern but is in the paper's class gets the
``general`` shape (:mod:`lakeivm.views.nested.general`, the general algorithm of §4.2); anything
else gets :func:`diagnose`: the first construct outside the class (MIN/MAX, IN/EXISTS, two
correlated inequalities, a join condition, ...).
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from itertools import permutations
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.optimizer.qualify import qualify

from lakeivm.sql import DIALECT, Query, conjuncts
from lakeivm.views.nested.general import GeneralPlan, NotInClass, general_plan

BOOK = {"broker_id": "int", "price": "int", "volume": "int"}
CANONICAL = {
    "bids": BOOK,
    "asks": BOOK,
    "lineitem": {"l_partkey": "int", "l_quantity": "int", "l_extendedprice": "int"},
    "part": {"p_partkey": "int", "p_brand": "string", "p_container": "string"},
}
PATTERNS = {
    "example_2_1": """SELECT SUM(b.price * b.volume) FROM bids b
        WHERE :c * (SELECT SUM(b1.volume) FROM bids b1) = (SELECT SUM(b2.volume) FROM bids b2 WHERE b2.price = b.price)""",
    "vwap": """SELECT SUM(b.price * b.volume) FROM bids b
        WHERE :c * (SELECT SUM(b1.volume) FROM bids b1) < (SELECT SUM(b2.volume) FROM bids b2 WHERE b2.price <= b.price)""",
    "mst": """SELECT b.broker_id, SUM((a.price * a.volume) + (-1 * b.price * b.volume)) FROM bids b, asks a
        WHERE :c_asks * (SELECT SUM(a1.volume) FROM asks a1) > (SELECT SUM(a2.volume) FROM asks a2 WHERE a2.price > a.price)
          AND :c_bids * (SELECT SUM(b1.volume) FROM bids b1) > (SELECT SUM(b2.volume) FROM bids b2 WHERE b2.price > b.price)
        GROUP BY b.broker_id""",
    "psp": """SELECT SUM(a.price + -1 * b.price) FROM bids b, asks a
        WHERE b.volume > :c_bids * (SELECT SUM(b1.volume) FROM bids b1)
          AND a.volume > :c_asks * (SELECT SUM(a1.volume) FROM asks a1)""",
    "q17": """SELECT SUM(l.l_extendedprice) / :divisor FROM lineitem l, part p
        WHERE p.p_partkey = l.l_partkey AND p.p_brand = :brand AND p.p_container = :container
          AND l.l_quantity < (SELECT :c * AVG(l2.l_quantity) FROM lineitem l2 WHERE l2.l_partkey = p.p_partkey)""",
}
"""Canonical pattern SQL per shape; the numeric placeholders must bind to positive numbers."""
NUMERIC_PARAMS = {"c", "c_asks", "c_bids", "divisor"}
_COMMUTATIVE = (exp.EQ, exp.NEQ)
_ASSOCIATIVE = (exp.Add, exp.Mul)  # also commutative: a chain unifies as a bag of operands
_FLIPPED = {exp.GT: exp.LT, exp.GTE: exp.LTE}
_SELECT_ARGS = {"expressions", "from", "from_", "joins", "where", "group"}


@dataclass(frozen=True)
class NestedShape:
    """A view's query bound to one shipped shape.

    ``tables`` maps each canonical table of the pattern (``bids``, ``asks``, ``lineitem``,
    ``part``) to the view's table, ``columns`` each canonical table to {canonical column: view
    column}, ``params`` each placeholder to its literal (a Fraction for numbers, else the string),
    and ``outputs`` lists the view's output names in SELECT order.
    """

    name: str
    tables: Mapping[str, str]
    columns: Mapping[str, Mapping[str, str]]
    params: Mapping[str, Any]
    outputs: tuple[str, ...]
    group_output: str | None = field(default=None)
    plan: GeneralPlan | None = field(default=None)  # the ``general`` shape's plan (:mod:`.general`)

    def role_of(self, table: str) -> str:
        """The canonical table the view's ``table`` plays."""
        return next(role for role, actual in self.tables.items() if actual == table)


def nested_shape(query: Query) -> NestedShape | None:
    """The shipped shape ``query`` matches, with its bindings; else the ``general`` shape if the query is
    in its class (:mod:`lakeivm.views.nested.general`); None otherwise."""
    if not query.has_subquery:
        return None
    target = _canon(query.tree)
    for name, pattern in _patterns().items():
        for binding in _unify(pattern, target, {}):
            shape = _shape(name, binding, query)
            if shape is not None:
                return shape
    try:
        plan = general_plan(query)
    except NotInClass:
        return None
    roles = {f"r{i}": relation for i, relation in enumerate(plan.relations)}  # a relation's role: r<its index>
    columns = {role: {n: n for n in [*(f"k{i}" for i in range(len(r.keys))), *(name for name, _ in r.terms)]}
               for role, r in roles.items()}
    return NestedShape("general", {role: r.table for role, r in roles.items()}, columns, {},
                       tuple(o.name for o in query.outputs), None, plan)


def diagnose(query: Query) -> str:
    """Why a nested ``query`` is outside the shapes the nested kind maintains (the first reason found)."""
    tree = query.tree
    for node in tree.find_all(exp.In, exp.Exists):
        if node.find(exp.Select):
            return f"{node.key.upper()} with a subquery ({_short(node)}) is not a nested aggregate comparison; rewrite it as a join"
    for sub in tree.find_all(exp.Subquery):
        if sub.find_ancestor(exp.Where) is None:
            return f"a subquery outside WHERE ({_short(sub)}); only WHERE may compare with a nested aggregate"
    try:
        general_plan(query)
    except NotInClass as err:
        return str(err)
    return "the query is in the general class but was not recognized; please report it"


# -- unification -----------------------------------------------------------------------------------
def _patterns() -> dict[str, exp.Select]:
    if not _PATTERN_CACHE:
        for name, text in PATTERNS.items():
            tree = qualify(sqlglot.parse_one(text, dialect=DIALECT), schema=CANONICAL, dialect=DIALECT,
                           quote_identifiers=False)
            _PATTERN_CACHE[name] = _canon(tree)
    return _PATTERN_CACHE


_PATTERN_CACHE: dict[str, exp.Select] = {}


def _canon(tree: exp.Select) -> exp.Select:
    """A copy without parentheses and with ``x > y`` written ``y < x`` (``>=`` likewise)."""
    tree = tree.copy()
    for node in list(tree.find_all(exp.Paren)):
        if not isinstance(node.this, exp.Select):
            node.replace(node.this)
    for node in list(tree.find_all(exp.GT, exp.GTE)):
        node.replace(_FLIPPED[type(node)](this=node.expression, expression=node.this))
    return tree


def _unify(p: Any, q: Any, b: dict) -> Iterator[dict]:
    """Every extension of bindings ``b`` under which pattern node ``p`` equals query node ``q``."""
    if isinstance(p, exp.Placeholder):
        if isinstance(q, exp.Neg) and isinstance(q.this, exp.Literal) and not q.this.is_string:
            q = exp.Literal.number(f"-{q.this.this}")
        if isinstance(q, exp.Literal):
            yield from _bind(b, ("param", p.name), (q.is_string, q.this))
        return
    if type(p) is not type(q):
        return
    if isinstance(p, exp.Select):
        yield from _unify_select(p, q, b)
    elif isinstance(p, exp.Table):
        yield from _unify_table(p, q, b)
    elif isinstance(p, exp.Column):
        ps, qs = _source_of(p), _source_of(q)
        if ps is None or qs is None:
            return
        for b1 in _bind(b, ("relation", id(ps)), id(qs)):
            yield from _bind(b1, ("column", ps.name, p.name), q.name, injective_within=ps.name)
    elif isinstance(p, exp.And):
        yield from _unify_bags(conjuncts(p), conjuncts(q), b)
    elif isinstance(p, _ASSOCIATIVE):
        yield from _unify_bags(_operands(p), _operands(q), b)
    elif isinstance(p, _COMMUTATIVE):
        yield from _unify_seq([p.this, p.expression], [q.this, q.expression], b)
        yield from _unify_seq([p.this, p.expression], [q.expression, q.this], b)
    elif isinstance(p, exp.Alias):
        yield from _unify(p.this, q.this, b)  # output names are free
    else:
        keys = set(p.args) | set(q.args)
        pairs = [(p.args.get(k), q.args.get(k)) for k in sorted(keys)]
        yield from _unify_args(pairs, b)


def _operands(node: exp.Expression) -> list[exp.Expression]:
    """The operands of a chain of one operator, whatever its grouping: ``a * (b * c)`` -> [a, b, c]."""
    return [leaf for side in (node.this, node.expression)
            for leaf in (_operands(side) if type(side) is type(node) else [side])]


def _unify_args(pairs: list[tuple[Any, Any]], b: dict) -> Iterator[dict]:
    if not pairs:
        yield b
        return
    (pv, qv), rest = pairs[0], pairs[1:]
    if isinstance(pv, exp.Expression) or isinstance(qv, exp.Expression):
        if not (isinstance(pv, exp.Expression) and isinstance(qv, exp.Expression)):
            return
        for b1 in _unify(pv, qv, b):
            yield from _unify_args(rest, b1)
    elif isinstance(pv, list) or isinstance(qv, list):
        if not (isinstance(pv, list) and isinstance(qv, list)):
            return
        for b1 in _unify_seq(pv, qv, b):
            yield from _unify_args(rest, b1)
    elif (pv or None) == (qv or None) or (isinstance(pv, str) and isinstance(qv, str) and pv.lower() == qv.lower()):
        yield from _unify_args(rest, b)


def _unify_seq(ps: list, qs: list, b: dict) -> Iterator[dict]:
    if len(ps) != len(qs):
        return
    if not ps:
        yield b
        return
    for b1 in _unify(ps[0], qs[0], b):
        yield from _unify_seq(ps[1:], qs[1:], b1)


def _unify_bags(ps: list, qs: list, b: dict) -> Iterator[dict]:
    if len(ps) != len(qs):
        return
    for order in permutations(qs):
        yield from _unify_seq(ps, list(order), b)


def _unify_select(p: exp.Select, q: exp.Select, b: dict) -> Iterator[dict]:
    if any(q.args.get(k) for k in q.args if k not in _SELECT_ARGS):
        return
    p_group = p.args.get("group").expressions if p.args.get("group") else []
    q_group = q.args.get("group").expressions if q.args.get("group") else []
    for b1 in _unify_bags(_tables_of(p), _tables_of(q), b):
        for b2 in _unify_bags(_select_conditions(p), _select_conditions(q), b1):
            for b3 in _unify_seq(p.expressions, q.expressions, b2):
                yield from _unify_seq(p_group, q_group, b3)


def _unify_table(p: exp.Table, q: exp.Table, b: dict) -> Iterator[dict]:
    for b1 in _bind(b, ("table", p.name), q.name):
        yield from _bind(b1, ("relation", id(p)), id(q))


def _bind(b: dict, key: tuple, value: Any, injective_within: str | None = None) -> Iterator[dict]:
    """``b`` plus key -> value if consistent; values are one-to-one per kind (and per table for columns)."""
    if key in b:
        if b[key] == value:
            yield b
        return
    reverse = ("reverse", key[0], injective_within, value)
    if key[0] != "param" and reverse in b:
        return
    yield {**b, key: value, reverse: key}


def _shape(name: str, binding: dict, query: Query) -> NestedShape | None:
    tables = {k[1]: v for k, v in binding.items() if k[0] == "table"}
    columns: dict[str, dict[str, str]] = {role: {} for role in tables}
    for key, value in binding.items():
        if key[0] == "column":
            columns[key[1]][key[2]] = value
    params = {}
    for key, (is_string, text) in ((k, v) for k, v in binding.items() if k[0] == "param"):
        if key[1] in NUMERIC_PARAMS:
            if is_string or Fraction(text) <= 0:
                return None
            params[key[1]] = Fraction(text)
        else:
            params[key[1]] = text if is_string else None
            if params[key[1]] is None:
                return None
    if name == "mst":
        keys = [o for o in query.outputs if o.is_key]
        group = keys[0].name if keys else None
    else:
        group = None
    return NestedShape(name, tables, columns, params, tuple(o.name for o in query.outputs), group)


# -- tree helpers -----------------------------------------------------------------------------------
def _tables_of(select: exp.Select) -> list[exp.Table]:
    """The tables in ``select``'s own FROM and JOINs (not in subqueries)."""
    from_ = select.args.get("from") or select.args.get("from_")
    out = [from_.this] if from_ is not None and isinstance(from_.this, exp.Table) else []
    out += [j.this for j in select.args.get("joins") or [] if isinstance(j.this, exp.Table)]
    return out


def _select_conditions(select: exp.Select) -> list[exp.Expression]:
    """WHERE conjuncts plus JOIN ... ON conditions, so comma joins and ON joins match alike."""
    out = conjuncts(select.args.get("where"))
    for join in select.args.get("joins") or []:
        if join.args.get("on") is not None:
            out += conjuncts(join.args["on"])
    return out


def _source_of(column: exp.Column) -> exp.Table | None:
    """The table occurrence a qualified column refers to: the nearest enclosing SELECT defining its alias."""
    scope = column.find_ancestor(exp.Select)
    while scope is not None:
        for table in _tables_of(scope):
            if table.alias_or_name == column.table:
                return table
        scope = scope.find_ancestor(exp.Select)
    return None


def _short(node: exp.Expression, width: int = 90) -> str:
    text = node.sql(DIALECT)
    return text if len(text) <= width else text[: width - 3] + "..."
