"""The nested kind's general algorithm (RPAI paper §4.2, Alg. 3; §4.3 for several relations).

The class: the cross product of one or more tables ``R1 a, R2 b, ...`` (distinct tables, no join
condition), filtered by a WHERE whose top-level AND terms each read one relation (the paper's
independent filters, §4.3), each built from AND, OR, NOT, comparisons, ``IS NULL``, ``+``, ``-``,
``*``, literals, that relation's columns and scalar subqueries ``(SELECT e FROM R r2 WHERE ...)``
over one of the tables, where ``e`` is arithmetic over ``SUM``/``COUNT`` of ``r2``'s expressions and
the subquery's WHERE has uncorrelated filters on ``r2`` plus -- over the term's own relation's table
-- a correlation of equalities ``r2.a = r.b`` and at most one inequality ``r2.a θ r.b`` (θ one of
``<, <=, >, >=``), or none (an uncorrelated aggregate). The SELECT: ``SUM``/``COUNT``/``AVG`` of sums
of per-relation expressions (``SUM(a.price - b.price)``), with ``+``, ``-``, ``*`` and literals; a
division or AVG only as a whole output (Spark rounds it once, at the output's type); an optional
GROUP BY of one relation's columns. So both sides of a comparison may be correlated (the paper's
SQ1), the correlated column may differ from the outer one (SQ2), OR may join nested comparisons,
and MST- and PSP-like queries may sum other expressions.

State (the paper's bound maps, §4.2): per relation, its table's rows grouped by every column its
predicates, correlations and the GROUP BY read (the *keys*), with per-key sums of the *terms*: the
row count and each aggregate's per-row value and non-NULL count (a filtered one as ``CASE WHEN``).
The maintainer keeps these indexes in Delta as absolute sums and feeds this evaluator each commit's
signed rows.

Evaluation sweeps each relation's keys (O(G log G) for G keys per result): each correlated
subquery's sums are cumulated along its inequality column within its equality partition and
looked up by binary search per outer key; the keys whose filter holds add their sums; a sum over
the cross product is ``Σ_i S_i · Π_{l≠i} C_l`` (S_i relation i's part of the summed expression over
its qualifying rows, C_l the qualifying rows of l whose part is not NULL). This is the general
algorithm's O(n) per update, with n the distinct keys, not the rows. Where a relation's filter is
§4.3's case -- one comparison ``a·q + d θ e``, ``q`` a SUM or COUNT correlated by one inequality on
the relation's only key column, ``a`` a non-zero constant, ``d`` and ``e`` uncorrelated -- and no
weight is negative, ``q`` is monotone in the key, so the passing keys are one range, found in an
ordered index of the per-key sums (the column-keyed RPAI,
docs/kinds/nested.md#keyed-by-the-column-not-by-the-aggregate) in O(log n), as the shipped shapes
(VWAP, Example 2.1, MST, PSP, Q17) do with their hand-written indexes (§4.3); a negative weight
falls back to the sweep. Uncorrelated aggregates are kept as running totals. Arithmetic is exact
(Fraction); comparisons are only allowed where Spark's are exact too (no DOUBLE column, no AVG or
division compared).
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from math import prod
from typing import Any

from lakeivm.errors import InvalidInput

COUNT_TERM = "cnt"
Ast = tuple  # ("lit", v) | ("col", key index) | ("agg", i) | ("sub", i) | ("bin", op, a, b) | ("neg", a)
#              | ("cmp", op, a, b) | ("and", a, b) | ("or", a, b) | ("not", a) | ("isnull", a)


class NotInClass(Exception):
    """The query is outside the class above; the message names the construct."""


@dataclass(frozen=True)
class AggRef:
    """A subquery's SUM or COUNT as the index terms that give it: ``value`` (None for a COUNT) and
    ``count`` (the non-NULL values counted; ``cnt`` for ``COUNT(*)``). AVG is refused inside a comparison."""

    func: str
    value: str | None
    count: str


@dataclass(frozen=True)
class OuterAgg:
    """An output's SUM, COUNT or AVG over the relations' cross product: per relation, the terms of its
    part of the aggregated expression, (value, non-NULL count); (None, ``cnt``) for a relation it
    does not read."""

    func: str
    parts: tuple[tuple[str | None, str], ...]


@dataclass(frozen=True)
class Subquery:
    """A scalar subquery over relation ``relation``'s table: ``expr`` over its aggregates ``aggs``;
    correlated by ``equal`` (inner key, outer key) pairs and at most one ``inequality`` (inner key,
    θ, outer key) meaning ``inner θ outer`` (keys of that same relation)."""

    expr: Ast
    aggs: tuple[AggRef, ...]
    relation: int
    equal: tuple[tuple[int, int], ...]
    inequality: tuple[int, str, int] | None


@dataclass(frozen=True)
class Relation:
    """One relation of the cross product: its table, its index layout (``keys``: the table's columns;
    ``terms``: name -> SQL of a per-row value over the table) and its filter."""

    table: str
    keys: tuple[str, ...]
    terms: tuple[tuple[str, str], ...]
    where: Ast | None

    @property
    def sums(self) -> tuple[str, ...]:
        """The index's per-key sums: the row count, then each term."""
        return (COUNT_TERM, *(name for name, _ in self.terms))


@dataclass(frozen=True)
class GeneralPlan:
    """A query of the class: its relations, subqueries, output aggregates, GROUP BY (key indices of
    relation ``group_relation``) and outputs."""

    relations: tuple[Relation, ...]
    subqueries: tuple[Subquery, ...]
    aggs: tuple[OuterAgg, ...]
    group_relation: int
    group: tuple[int, ...]
    outputs: tuple[tuple[str, Ast], ...]
    compared: tuple[tuple[str, str], ...]  # (table, column) of every value compared or summed

    def inexact(self, schemas: Mapping[str, Mapping[str, str]]) -> str | None:
        """Why Spark's arithmetic would not be exact on these types (a DOUBLE or FLOAT column), or None."""
        for table, column in self.compared:
            kind = str(schemas.get(table, {}).get(column, "")).lower()
            if kind in ("double", "float", "real"):
                return (f"column {table}.{column} is {kind.upper()}: Spark compares and sums it inexactly and the nested "
                        "kind's exact arithmetic would disagree; store it as DECIMAL")
        return None


@dataclass(frozen=True)
class RowEvent:
    """One source row of relation ``relation`` (its keys and term values) inserted (+1) or deleted (-1)."""

    keys: tuple[Any, ...]
    terms: tuple[Any, ...]
    sign: int = 1
    relation: int = 0


class General:
    """The evaluator of a :class:`GeneralPlan`: per-key sums per relation, and the sweep of the module doc."""

    def __init__(self, plan: GeneralPlan) -> None:
        self.plan = plan
        self._groups: list[dict[tuple, list[Any]]] = [{} for _ in plan.relations]
        self._positions = [{name: i for i, name in enumerate(r.sums)} for r in plan.relations]
        self._where = [_compile(r.where) if r.where is not None else None for r in plan.relations]
        self._outputs = [_compile(expr) for _, expr in plan.outputs]
        self._subqueries = [_compile(sub.expr) for sub in plan.subqueries]
        # what a result may keep from the last: a relation's filtered sums while no relation it reads changed
        self._reads = [{r, *(plan.subqueries[i].relation for i in _subqueries_in(rel.where))}
                       for r, rel in enumerate(plan.relations)]
        self._changed: set[int] = set(range(len(plan.relations)))
        self._lookups: list[_SubqueryLookup | None] = [None] * len(plan.subqueries)
        self._totals: list[dict[tuple, list[Any]] | None] = [None] * len(plan.relations)
        self._monotone = [_Monotone.of(plan, r) for r in range(len(plan.relations))]  # §4.3's O(log n) case, if it is one
        self._all = [[0] * len(r.sums) for r in plan.relations]  # each relation's sums over all its rows

    def apply(self, event: RowEvent) -> None:
        x = event.sign
        self._add(event.relation, tuple(event.keys), [x, *(0 if t is None else x * t for t in event.terms)])

    def load(self, relation: int | str, rows: Iterable[tuple[tuple, tuple]]) -> None:
        """Add stored per-key sums ``(keys, sums)`` of a relation (its index, or role ``r<index>``)."""
        index = int(relation[1:]) if isinstance(relation, str) else relation
        for keys, sums in rows:
            self._add(index, tuple(keys), list(sums))

    def _add(self, relation: int, key: tuple, sums: Sequence[Any]) -> None:
        self._changed.add(relation)
        self._all[relation] = [a + b for a, b in zip(self._all[relation], sums)]
        if self._monotone[relation] is not None and key[0] is not None:
            self._monotone[relation].index.add(key[0], sums)
        groups = self._groups[relation]
        cell = groups.get(key)
        if cell is None:
            cell = groups[key] = [0] * len(sums)
        for i, value in enumerate(sums):
            cell[i] += value
        if not cell[0]:
            del groups[key]  # no row left: every term sums to zero too

    def result(self) -> list[tuple]:
        """The query's rows, each a tuple of its outputs in SELECT order (exact numbers, None for NULL)."""
        plan, lookups = self.plan, self._lookups
        for i, sub in enumerate(plan.subqueries):
            if sub.relation in self._changed:
                lookups[i] = None

        def subquery(i: int, key: tuple) -> Any:  # a subquery's prefix sums built when first read
            if lookups[i] is None:
                sub = plan.subqueries[i]
                uncorrelated = not sub.equal and sub.inequality is None  # then: the relation's sums over all its rows
                groups = {(): self._all[sub.relation]} if uncorrelated else self._groups[sub.relation]
                lookups[i] = _SubqueryLookup(sub, self._subqueries[i], groups, self._positions[sub.relation])
            return lookups[i].value(key)
        for r in range(len(plan.relations)):
            if self._totals[r] is None or self._reads[r] & self._changed:
                self._totals[r] = self._qualifying(r, subquery)
        self._changed.clear()
        totals = self._totals
        grouped = totals[plan.group_relation] if plan.group else {(): None}
        if any(not totals[r] for r in range(len(totals)) if r != plan.group_relation or not plan.group):
            grouped = {} if plan.group else grouped  # an empty relation: no pair, so no group
        rows = []
        for group in grouped:
            vectors = [totals[r].get(group if plan.group and r == plan.group_relation else (),
                                     [0] * len(self._positions[r])) for r in range(len(totals))]
            aggs = [_outer_value(a, vectors, self._positions) for a in plan.aggs]
            key = [None] * len(plan.relations[plan.group_relation].keys)
            for i, value in zip(plan.group, group):
                key[i] = value
            rows.append(tuple(output(tuple(key), None, aggs) for output in self._outputs))
        return rows

    def _qualifying(self, r: int, subquery: Callable) -> dict[tuple, list[Any]]:
        """Relation ``r``'s qualifying rows summed per GROUP BY value (``()`` unless it is grouped)."""
        plan, where = self.plan, self._where[r]
        if self._monotone[r] is not None:
            try:
                sums = self._monotone[r].qualifying(subquery)
            except InvalidInput:  # a negative weight: the cut is not one range, so sweep (below)
                pass
            else:
                null = self._groups[r].get((None,))  # a NULL key matches no correlated row: evaluated on its own
                if null is not None and where((None,), subquery, None) is True:
                    sums = [a + b for a, b in zip(sums, null)]
                return {(): sums} if sums[0] else {}
        by = plan.group if plan.group and r == plan.group_relation else ()
        totals: dict[tuple, list[Any]] = {}
        for key, sums in self._groups[r].items():
            if where is not None and where(key, subquery, None) is not True:
                continue
            cell = totals.setdefault(tuple(key[i] for i in by), [0] * len(sums))
            for i, value in enumerate(sums):
                cell[i] += value
        return totals


_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}


class _Monotone:
    """A relation's filter ``a·q + d θ e`` (paper §4.3: one comparison with a nested SUM or COUNT ``q``
    correlated by one inequality on the relation's only key column ``k``; ``a`` a non-zero literal; ``d``
    and ``e`` uncorrelated): with non-negative weights ``q`` is monotone in ``k``, so the rows that pass
    are one range of keys, found in an ordered index of the per-key sums in O(log n) (the column-keyed
    RPAI: docs/kinds/nested.md#keyed-by-the-column-not-by-the-aggregate) instead of a sweep."""

    def __init__(self, sub: Subquery, position: Mapping[str, int], op: str, bound: Ast, width: int) -> None:
        from lakeivm.views.nested.index import TreapSums

        self.index = TreapSums(width)
        agg = sub.aggs[0]
        self._weight = position[agg.value if agg.func == "SUM" else agg.count]
        self._nonnull = position[agg.count] if agg.func == "SUM" else None  # SUM over no value is NULL
        self._inner = sub.inequality[1]  # q(k) sums the rows k' with k' θ k
        self._op, self._bound = op, _compile(bound)  # the filter is q(k) op bound

    @staticmethod
    def of(plan: GeneralPlan, r: int) -> _Monotone | None:
        relation = plan.relations[r]
        where = relation.where
        if (len(relation.keys) != 1 or (plan.group and plan.group_relation == r) or where is None
                or where[0] != "cmp" or where[1] not in _FLIP or _reads_columns(where)):
            return None
        correlated = {i for i, sub in enumerate(plan.subqueries) if sub.equal or sub.inequality}
        left, right = (_subqueries_in(side) & correlated for side in where[2:])
        if len(left | right) != 1 or (left and right):
            return None
        op, side, other = (where[1], where[2], where[3]) if left else (_FLIP[where[1]], where[3], where[2])
        (i,) = left | right
        sub = plan.subqueries[i]
        if sub.equal or sub.inequality[0] != 0 or sub.inequality[2] != 0 or sub.expr != ("agg", 0):
            return None
        affine = _affine(side, i)
        if affine is None or affine[0] == 0 or sub.aggs[0].func not in ("SUM", "COUNT"):
            return None
        coefficient, rest = affine
        bound = ("bin", "/", ("bin", "-", other, rest), ("lit", coefficient))
        position = {name: j for j, name in enumerate(relation.sums)}
        return _Monotone(sub, position, _FLIP[op] if coefficient < 0 else op, bound, len(relation.sums))

    def qualifying(self, subquery: Callable) -> list[Any]:
        """The sums of the keys that pass; InvalidInput if a weight is negative (no single range then)."""
        index = self.index
        width = index.width
        index.check_searchable(self._weight)  # a negative weight: q is not monotone, no single range
        bound = self._bound((), subquery, None)
        if bound is None or not len(index):
            return [0] * width
        prefix = self._inner in ("<", "<=")  # q = R(k) (prefix sums), else q = total - R(k)
        inclusive = self._inner in ("<=", ">")  # R(k) sums the keys <= k, else the keys < k
        if prefix:
            span = self._range(self._weight, inclusive, self._op, bound)
        else:
            span = self._range(self._weight, inclusive, _FLIP[self._op], _number(index.total()[self._weight]) - bound)
        if self._nonnull is not None:  # and q not NULL: some non-NULL value in the summed rows
            nonnull = (self._range(self._nonnull, inclusive, ">", 0) if prefix
                       else self._range(self._nonnull, inclusive, "<", index.total()[self._nonnull]))
            span = _intersect(span, nonnull)
        return self._sums(span)

    def _range(self, component: int, inclusive: bool, op: str, value: Any) -> tuple | None:
        """The keys with ``R(k) op value``, as (low, high) bounds each None or (key, inclusive), or None for
        no key. R(k), the running sum of ``component`` over the keys <= k (``inclusive``) or < k, never
        decreases: ``>``/``>=`` hold from the first key that passes on, ``<=``/``<`` before it."""
        strict = op in (">", "<=")  # {R > value} and its complement, else {R >= value} and its complement
        test = (lambda run: run > value) if strict else (lambda run: run >= value)
        if test(0):
            upper = (None, None)  # R >= 0 at every key
        else:
            first, _ = self.index.first_key_where(component, test)
            upper = None if first is None else ((first, inclusive), None)  # R over keys < k: from the key after
        if op in (">", ">="):
            return upper
        if upper is None:
            return (None, None)
        if upper == (None, None):
            return None
        key, closed = upper[0]
        return (None, (key, not closed))

    def _sums(self, span: tuple | None) -> list[Any]:
        index = self.index
        if span is None:
            return [0] * index.width
        low, high = span
        if low is not None and high is not None and (low[0] > high[0] or (low[0] == high[0] and not (low[1] and high[1]))):
            return [0] * index.width
        top = index.total() if high is None else (index.sum_le(high[0]) if high[1] else index.sum_lt(high[0]))
        bottom = (0,) * index.width if low is None else (index.sum_lt(low[0]) if low[1] else index.sum_le(low[0]))
        return [a - b for a, b in zip(top, bottom)]


def _intersect(a: tuple | None, b: tuple | None) -> tuple | None:
    """Two key ranges' intersection (bounds as in ``_Monotone._range``)."""
    if a is None or b is None:
        return None
    low = max((x for x in (a[0], b[0]) if x is not None), key=lambda x: (x[0], not x[1]), default=None)
    high = min((x for x in (a[1], b[1]) if x is not None), key=lambda x: (x[0], x[1]), default=None)
    return (low, high)


def _reads_columns(node: Ast) -> bool:
    return node[0] == "col" or any(isinstance(child, tuple) and _reads_columns(child) for child in node[1:])


def _affine(node: Ast, i: int) -> tuple[Fraction, Ast] | None:
    """``node`` as ``a·sub_i + rest`` with a literal ``a`` and ``rest`` free of ``sub_i``, or None."""
    if node == ("sub", i):
        return Fraction(1), ("lit", Fraction(0))
    if i not in _subqueries_in(node):
        return Fraction(0), node
    tag = node[0]
    if tag == "neg":
        inner = _affine(node[1], i)
        return None if inner is None else (-inner[0], ("neg", inner[1]))
    if tag == "bin" and node[1] in ("+", "-"):
        left, right = _affine(node[2], i), _affine(node[3], i)
        if left is None or right is None:
            return None
        a = left[0] + right[0] if node[1] == "+" else left[0] - right[0]
        return a, ("bin", node[1], left[1], right[1])
    if tag == "bin" and node[1] == "*":
        for constant, factor in ((node[2], node[3]), (node[3], node[2])):
            value = _constant(constant)
            if value is not None:
                inner = _affine(factor, i)
                return None if inner is None else (value * inner[0], ("bin", "*", constant, inner[1]))
    return None


def _constant(node: Ast) -> Fraction | None:
    """The value of an Ast of number literals, ``-``, ``+`` and ``*`` (``-1``, ``2 * 0.5``), or None."""
    if node[0] == "lit":
        return node[1] if isinstance(node[1], Fraction) else None
    if node[0] == "neg":
        inner = _constant(node[1])
        return None if inner is None else -inner
    if node[0] == "bin" and node[1] in ("+", "-", "*"):
        left, right = _constant(node[2]), _constant(node[3])
        return None if left is None or right is None else _OPS[node[1]](left, right)
    return None


class _SubqueryLookup:
    """One subquery's value per outer key: its sums partitioned by the equality columns and cumulated
    along the inequality column (the bound map of §4.2, with prefix sums for the range).

    A static prefix-sum array per partition, built once per result and then only read (a bisect and
    a lookup), not the project's dynamic ``FenwickSums``: built with ``FenwickSums.from_items`` and
    read by ``sum_le``/``sum_lt`` instead, the sweep of ``bench nested`` took longer: a bisect over a
    flat array beats a tree's walk when nothing is added between reads."""

    def __init__(self, sub: Subquery, expr: Compiled, groups: Mapping[tuple, Sequence[Any]],
                 position: Mapping[str, int]) -> None:
        self.sub, self._expr = sub, expr
        self._columns = sorted({position[n] for a in sub.aggs for n in (a.value, a.count) if n is not None})
        self._local = {c: i for i, c in enumerate(self._columns)}
        parts: dict[tuple, dict[Any, list[Any]]] = {}
        for key, sums in groups.items():
            eq = tuple(key[inner] for inner, _ in sub.equal)
            at = key[sub.inequality[0]] if sub.inequality else 0
            if None in eq or at is None:
                continue  # NULL never equals nor compares
            cell = parts.setdefault(eq, {}).setdefault(at, [0] * len(self._columns))
            for j, c in enumerate(self._columns):
                cell[j] += sums[c]
        self._parts: dict[tuple, tuple[list[Any], list[list[Any]]]] = {}
        for eq, by_value in parts.items():
            points = sorted(by_value)
            running, cumulative = [0] * len(self._columns), []
            for p in points:
                running = [r + v for r, v in zip(running, by_value[p])]
                cumulative.append(running)
            self._parts[eq] = (points, cumulative)
        self._names = {n: self._local[p] for n, p in position.items() if p in self._local}
        self._cache: dict[tuple, Any] = {}

    def value(self, key: tuple) -> Any:
        sub = self.sub
        probe = (tuple(key[outer] for _, outer in sub.equal), key[sub.inequality[2]] if sub.inequality else None)
        if probe not in self._cache:
            sums = self._sums(*probe)
            aggs = [_agg_value(a, sums, self._names) for a in sub.aggs]
            self._cache[probe] = self._expr((), None, aggs)
        return self._cache[probe]

    def _sums(self, eq: tuple, at: Any) -> list[Any]:
        zero = [0] * len(self._columns)
        if None in eq or eq not in self._parts:
            return zero
        points, cumulative = self._parts[eq]
        if self.sub.inequality is None:
            return cumulative[-1]
        if at is None:
            return zero
        op, total = self.sub.inequality[1], cumulative[-1]
        below = {"<": bisect_left, "<=": bisect_right, ">": bisect_right, ">=": bisect_left}[op](points, at)
        prefix = cumulative[below - 1] if below else zero
        return prefix if op in ("<", "<=") else [t - p for t, p in zip(total, prefix)]


def _agg_value(agg: AggRef, sums: Sequence[Any], position: Mapping[str, int]) -> Any:
    """A subquery's SUM (NULL over no value) or COUNT from its terms' sums."""
    count = sums[position[agg.count]]
    if agg.func == "COUNT":
        return Fraction(count)
    return _number(sums[position[agg.value]]) if count else None


def _subqueries_in(node: Ast | None) -> set[int]:
    """The subqueries an Ast reads."""
    if node is None or node[0] == "lit":
        return set()
    if node[0] == "sub":
        return {node[1]}
    return set().union(*(_subqueries_in(child) for child in node[1:] if isinstance(child, tuple)))


def _outer_value(agg: OuterAgg, vectors: Sequence[Sequence[Any]], positions: Sequence[Mapping[str, int]]) -> Any:
    """An output aggregate over the cross product: ``Σ_i S_i · Π_{l≠i} C_l`` over ``Π C_l`` pairs."""
    counts = [v[positions[r][count]] for r, (v, (_, count)) in enumerate(zip(vectors, agg.parts))]
    pairs = prod(counts)
    if agg.func == "COUNT":
        return Fraction(pairs)
    if not pairs:
        return None
    total = sum(_number(v[positions[r][value]]) * prod(counts[:r] + counts[r + 1:])
                for r, (v, (value, _)) in enumerate(zip(vectors, agg.parts)) if value is not None)
    return Fraction(total) if agg.func == "SUM" else Fraction(total) / pairs


def _number(value: Any) -> Any:
    return Fraction(value) if isinstance(value, (int, Decimal, Fraction)) and not isinstance(value, bool) else value


Compiled = Callable[[tuple, Callable[[int, tuple], Any] | None, Sequence[Any] | None], Any]


def _compile(node: Ast) -> Compiled:
    """``node`` as a function of (key, subquery value by index, aggregate values) under SQL's NULL rules
    (three-valued AND/OR/NOT); compiled once per plan, called per key."""
    tag = node[0]
    if tag == "lit":
        value = node[1]
        return lambda key, sub, aggs: value
    if tag == "col":
        i = node[1]
        return lambda key, sub, aggs: _number(key[i])
    if tag == "agg":
        i = node[1]
        return lambda key, sub, aggs: aggs[i]
    if tag == "sub":
        i = node[1]
        return lambda key, sub, aggs: sub(i, key)
    if tag in ("neg", "not", "isnull"):
        inner = _compile(node[1])
        if tag == "isnull":
            return lambda key, sub, aggs: inner(key, sub, aggs) is None
        flip = (lambda v: -v) if tag == "neg" else (lambda v: not v)
        return lambda key, sub, aggs: None if (v := inner(key, sub, aggs)) is None else flip(v)
    if tag in ("bin", "cmp"):
        op, left, right = _OPS[node[1]], _compile(node[2]), _compile(node[3])

        def binary(key, sub, aggs):
            a = left(key, sub, aggs)
            if a is None:
                return None
            b = right(key, sub, aggs)
            return None if b is None else op(a, b)
        return binary
    left, right = _compile(node[1]), _compile(node[2])
    decisive = tag == "or"  # the value that decides alone: FALSE for AND, TRUE for OR

    def logical(key, sub, aggs):
        a = left(key, sub, aggs)
        if a is decisive:
            return decisive
        b = right(key, sub, aggs)
        return decisive if b is decisive else (None if a is None or b is None else not decisive)
    return logical


def _divide(a: Any, b: Any) -> Any:
    return None if b == 0 else Fraction(a) / Fraction(b)


_OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "/": _divide,
        "=": lambda a, b: a == b, "<>": lambda a, b: a != b, "<": lambda a, b: a < b, "<=": lambda a, b: a <= b,
        ">": lambda a, b: a > b, ">=": lambda a, b: a >= b}


def describe(plan: GeneralPlan) -> str:
    """What ``lakeivm explain`` says of a general plan: each relation's index keys and each subquery's correlation."""
    relations = [f"{r.table}'s rows summed per ({', '.join(r.keys)}), {len(r.terms)} sums besides the count"
                 for r in plan.relations]
    subs = []
    for i, sub in enumerate(plan.subqueries, 1):
        keys = plan.relations[sub.relation].keys
        parts = [f"{keys[a]} = outer {keys[b]}" for a, b in sub.equal]
        if sub.inequality:
            a, op, b = sub.inequality
            parts.append(f"{keys[a]} {op} outer {keys[b]}")
        subs.append(f"subquery {i}: " + (" AND ".join(parts) if parts else "uncorrelated"))
    product = " x ".join(r.table for r in plan.relations)
    per_commit = [f"{r.table}'s passing rows are one range of {r.keys[0]}, found in an ordered index (§4.3, O(log n))"
                  if _Monotone.of(plan, i) is not None else f"{r.table}'s distinct keys are swept (O(keys))"
                  for i, r in enumerate(plan.relations)]
    return (f"nested, the general algorithm (RPAI §4.2{', §4.3: the cross product ' + product if len(relations) > 1 else ''}): "
            f"{'; '.join(relations)}; {'; '.join(subs)}. Per commit: {'; '.join(per_commit)}")


# -- recognition ------------------------------------------------------------------------------------
def general_plan(query: Any) -> GeneralPlan:
    """``query`` (a qualified :class:`~lakeivm.sql.Query`) as a plan of the class; :class:`NotInClass`
    naming the first construct outside it."""
    return _Recognizer(query.tree).plan()


_UNSUPPORTED_SELECT = ("having", "order", "limit", "offset", "distinct", "qualify", "windows", "with", "with_",
                       "laterals", "pivots")


class _Relation:
    """A relation's index layout and filter, as recognition builds them."""

    def __init__(self, table: str, alias: str) -> None:
        self.table, self.alias = table, alias
        self.keys: dict[str, int] = {}
        self.terms: dict[str, str] = {}  # SQL -> term name
        self.conjuncts: list[Ast] = []

    def key(self, column: str) -> int:
        return self.keys.setdefault(column, len(self.keys))

    def term(self, sql: str) -> str:
        return self.terms.setdefault(sql, f"t{len(self.terms)}")

    def built(self) -> Relation:
        where = None
        for conjunct in self.conjuncts:
            where = conjunct if where is None else ("and", where, conjunct)
        return Relation(self.table, tuple(self.keys), tuple((n, s) for s, n in self.terms.items()), where)


class _Recognizer:
    def __init__(self, tree: Any) -> None:
        from sqlglot import exp

        self.exp = exp
        self.tree = tree
        self.relations: list[_Relation] = []
        self.by_alias: dict[str, int] = {}
        self.subqueries: list[Subquery] = []
        self.aggs: list[OuterAgg] = []
        self.compared: dict[tuple[str, str], None] = {}

    def plan(self) -> GeneralPlan:
        exp, tree = self.exp, self.tree
        for arg in _UNSUPPORTED_SELECT:
            if tree.args.get(arg):
                raise NotInClass(f"{arg.upper()} in a nested-aggregate query (the general class is an aggregate over "
                                 "one table, or a cross product of several, with no HAVING, DISTINCT, ORDER BY or LIMIT)")
        for table in _cross_product(tree):
            if table.name in {r.table for r in self.relations}:
                raise NotInClass(f"table {table.name!r} occurs twice in FROM; the general nested class reads each "
                                 "table once")
            self.by_alias[table.alias_or_name] = len(self.relations)
            self.relations.append(_Relation(table.name, table.alias_or_name))
        group_aliases = {node.table for node in (tree.args["group"].expressions if tree.args.get("group") else [])
                         if isinstance(node, exp.Column)}
        group_relation = self.by_alias.get(next(iter(group_aliases)), 0) if len(group_aliases) == 1 else 0
        group = []
        for node in (tree.args["group"].expressions if tree.args.get("group") else []):
            if not (isinstance(node, exp.Column) and node.table in self.by_alias and len(group_aliases) == 1):
                raise NotInClass(f"GROUP BY {node.sql()}: the general nested class groups by columns of one relation")
            group.append(self._key(group_relation, node.name))
        where = tree.args.get("where")
        for conjunct in (list(where.this.flatten()) if where is not None and isinstance(where.this, exp.And)
                         else [where.this] if where is not None else []):
            read = self._outer_relations(conjunct)
            if len(read) > 1:
                names = " and ".join(self.relations[r].table for r in sorted(read))
                raise NotInClass(f"the condition {_short(conjunct)} reads {names}: a join condition; the general nested class "
                                 "filters each relation on its own (paper §4.3), an equi-join is maintained only in "
                                 "TPC-H Q17's shape")
            r = read.pop() if read else 0
            self.relations[r].conjuncts.append(self._convert(conjunct, "where", r))
        outputs = []
        for item in tree.expressions:
            node = item.this if isinstance(item, exp.Alias) else item
            outputs.append((item.alias_or_name, self._output(node, group_relation, group)))
        if not self.subqueries:
            raise NotInClass("no nested aggregate in WHERE")
        return GeneralPlan(tuple(r.built() for r in self.relations), tuple(self.subqueries), tuple(self.aggs),
                           group_relation, tuple(group), tuple(outputs), tuple(self.compared))

    # -- pieces -----------------------------------------------------------------------------------
    def _key(self, r: int, column: str) -> int:
        self.compared[self.relations[r].table, column] = None
        return self.relations[r].key(column)

    def _outer_relations(self, node: Any) -> set[int]:
        """The outer relations whose columns ``node`` reads (in its subqueries' correlations too)."""
        return {self.by_alias[c.table] for c in node.find_all(self.exp.Column) if c.table in self.by_alias}

    def _output(self, node: Any, group_relation: int, group: list[int]) -> Ast:
        exp = self.exp
        if isinstance(node, exp.Div):  # rounded once by Spark, at the output's type: exact then rounded here
            return ("bin", "/", self._convert(node.this, "output", group_relation, group=group),
                    self._convert(node.expression, "output", group_relation, group=group))
        if isinstance(node, exp.Avg):
            return ("agg", self._outer_aggregate(node, allow_avg=True))
        return self._convert(node, "output", group_relation, group=group)

    def _convert(self, node: Any, scope: str, r: int, alias: str | None = None, filt: str | None = None,
                 aggs: list[AggRef] | None = None, group: list[int] | None = None) -> Ast:
        """A WHERE term of relation ``r`` (``where``), a subquery's value over relation ``r`` (``sub``, rows of
        ``alias`` filtered by ``filt``) or an output (``output``; ``r`` the grouped relation) as an Ast."""
        exp = self.exp
        convert = lambda n: self._convert(n, scope, r, alias, filt, aggs, group)  # noqa: E731
        if isinstance(node, exp.Paren):
            return convert(node.this)
        if isinstance(node, exp.Literal):
            if node.is_string:
                return ("lit", node.this)
            if "e" in node.this.lower():
                raise NotInClass(f"the literal {node.this} is a DOUBLE in Spark; write it as a decimal")
            return ("lit", Fraction(node.this))
        if isinstance(node, exp.Null):
            return ("lit", None)
        if isinstance(node, exp.Boolean):
            return ("lit", bool(node.this))
        if isinstance(node, exp.Neg):
            return ("neg", convert(node.this))
        for kind, op in ((exp.Add, "+"), (exp.Sub, "-"), (exp.Mul, "*")):
            if isinstance(node, kind):
                return ("bin", op, convert(node.this), convert(node.expression))
        if isinstance(node, exp.Div):
            raise NotInClass(f"the division {node.sql()}: Spark rounds it (or computes it in DOUBLE) before "
                             "comparing; multiply the other side instead")
        if isinstance(node, exp.AggFunc):
            if scope == "where":
                raise NotInClass(f"the aggregate {node.sql()} in WHERE")
            if scope == "output":
                return ("agg", self._outer_aggregate(node))
            return ("agg", self._aggregate(node, r, alias, filt, aggs))
        if isinstance(node, exp.Column):
            own = self.relations[r].alias
            if scope == "where" and node.table == own:
                return ("col", self._key(r, node.name))
            if scope == "output" and node.table == own and self.relations[r].keys.get(node.name) in (group or []):
                return ("col", self.relations[r].keys[node.name])
            raise NotInClass(f"the column {node.sql()} outside an aggregate in "
                             f"{'a subquery' if scope == 'sub' else 'the SELECT (not a GROUP BY column)'}")
        if scope == "where":
            for kind, op in ((exp.EQ, "="), (exp.NEQ, "<>"), (exp.LT, "<"), (exp.LTE, "<="), (exp.GT, ">"), (exp.GTE, ">=")):
                if isinstance(node, kind):
                    return ("cmp", op, convert(node.this), convert(node.expression))
            if isinstance(node, exp.And):
                return ("and", convert(node.this), convert(node.expression))
            if isinstance(node, exp.Or):
                return ("or", convert(node.this), convert(node.expression))
            if isinstance(node, exp.Not):
                return ("not", convert(node.this))
            if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
                return ("isnull", convert(node.this))
            if isinstance(node, exp.Subquery):
                return ("sub", self._subquery(node, r))
        raise NotInClass(f"{node.sql()} ({type(node).__name__}) is outside the general nested class")

    def _streamable(self, node: Any, allow_avg: bool) -> None:
        exp = self.exp
        if isinstance(node, (exp.Min, exp.Max)):
            raise NotInClass(f"the nested aggregate {node.sql()} is not streamable under deletes (paper §4.3: only "
                             "SUM, COUNT and AVG); use SUM, COUNT or AVG")
        if not isinstance(node, (exp.Sum, exp.Count, exp.Avg)):
            raise NotInClass(f"the aggregate {node.sql()}: only SUM, COUNT and AVG are maintained")
        if isinstance(node, exp.Avg) and not allow_avg:
            raise NotInClass(f"{node.sql()} compared or combined: Spark rounds AVG (DECIMAL to 4 more digits, else DOUBLE); "
                             "compare SUM with a multiple of COUNT instead")
        if isinstance(node.this, exp.Distinct):
            raise NotInClass(f"{node.sql()}: DISTINCT inside a nested-aggregate query")

    def _aggregate(self, node: Any, r: int, alias: str, filt: str | None, into: list[AggRef]) -> int:
        """A subquery's aggregate over relation ``r``'s rows (``alias``), filtered by ``filt``: its terms."""
        exp = self.exp
        self._streamable(node, allow_avg=False)
        relation, arg = self.relations[r], node.this
        if isinstance(node, exp.Count) and (arg is None or isinstance(arg, exp.Star)):
            ref = AggRef("COUNT", None, COUNT_TERM if filt is None else relation.term(f"CASE WHEN {filt} THEN 1 ELSE 0 END"))
        else:
            value = self._row_sql(arg, {alias: r}, f"the argument of {node.sql()}")
            cond = f"({value}) IS NOT NULL" if filt is None else f"({filt}) AND ({value}) IS NOT NULL"
            count = relation.term(f"CASE WHEN {cond} THEN 1 ELSE 0 END")
            ref = (AggRef("COUNT", None, count) if isinstance(node, exp.Count)
                   else AggRef("SUM", relation.term(f"CASE WHEN {cond} THEN {value} ELSE 0 END"), count))
        into.append(ref)
        return len(into) - 1

    def _outer_aggregate(self, node: Any, allow_avg: bool = False) -> int:
        """An output aggregate over the cross product: its argument split into per-relation parts (a sum of
        terms that each read one relation; a literal term goes with the first relation)."""
        exp = self.exp
        self._streamable(node, allow_avg)
        func = "AVG" if isinstance(node, exp.Avg) else "COUNT" if isinstance(node, exp.Count) else "SUM"
        arg = node.this
        parts: dict[int, list[str]] = {}
        if not (isinstance(node, exp.Count) and (arg is None or isinstance(arg, exp.Star))):
            for negated, addend in _addends(arg, exp):
                read = self._outer_relations(addend)
                if len(read) > 1:
                    raise NotInClass(f"{node.sql()} multiplies or combines columns of two relations in {addend.sql()}; "
                                     "the general nested class sums per-relation terms over the cross product")
                r = read.pop() if read else 0
                sql = self._row_sql(addend, {self.relations[r].alias: r}, f"the argument of {node.sql()}")
                parts.setdefault(r, []).append(f"-({sql})" if negated else f"({sql})")
        refs = []
        for r, relation in enumerate(self.relations):
            if r not in parts:
                refs.append((None, COUNT_TERM))
                continue
            value = " + ".join(parts[r])
            count = relation.term(f"CASE WHEN ({value}) IS NOT NULL THEN 1 ELSE 0 END")
            refs.append((None if func == "COUNT" else relation.term(f"CASE WHEN ({value}) IS NOT NULL THEN {value} ELSE 0 END"),
                         count))
        self.aggs.append(OuterAgg(func, tuple(refs)))
        return len(self.aggs) - 1

    def _row_sql(self, node: Any, aliases: Mapping[str, int], what: str) -> str:
        """``node``, an expression over one relation's row (``aliases``: its alias -> relation), as SQL over
        the table's own columns."""
        exp = self.exp
        if node.find(exp.Subquery, exp.AggFunc, exp.Select):
            raise NotInClass(f"{what} nests a subquery or an aggregate")
        node = node.copy()
        for column in node.find_all(exp.Column):
            if column.table not in aliases:
                raise NotInClass(f"{what} reads {column.sql()}, a column of another relation")
            self.compared[self.relations[aliases[column.table]].table, column.name] = None
            column.set("table", None)
        from lakeivm.sql import DIALECT

        return node.sql(DIALECT)

    def _subquery(self, node: Any, r: int) -> int:
        """A scalar subquery in relation ``r``'s filter."""
        exp = self.exp
        inner = node.this
        if not isinstance(inner, exp.Select) or len(inner.expressions) != 1:
            raise NotInClass(f"the subquery {_short(node)} is not a single aggregate")
        for arg in _UNSUPPORTED_SELECT + ("group",):
            if inner.args.get(arg):
                raise NotInClass(f"{arg.upper()} inside the subquery {_short(node)}")
        table = _single_table(inner)
        over = next((i for i, rel in enumerate(self.relations) if table is not None and rel.table == table.name), None)
        if over is None:
            name = table.name if table is not None else "more than one table"
            raise NotInClass(f"the subquery {_short(node)} reads {name!r}, a table the outer query does not read "
                             "(the general nested class sums over the outer query's tables)")
        alias, outer = table.alias_or_name, self.relations[r].alias
        filters, equal, inequality = [], [], None
        where = inner.args.get("where")
        for conjunct in (list(where.this.flatten()) if where is not None and isinstance(where.this, exp.And)
                         else [where.this] if where is not None else []):
            if conjunct.find(exp.Subquery):
                raise NotInClass(f"a nested aggregate inside a nested aggregate ({_short(node)}; the paper's NQ1/NQ2 shapes)")
            others = [c for c in conjunct.find_all(exp.Column) if c.table != alias]
            if not others:
                filters.append(self._row_sql(conjunct, {alias: over}, f"the filter {conjunct.sql()}"))
                continue
            if any(c.table != outer for c in others) or over != r:
                raise NotInClass(f"the correlation {conjunct.sql()} ties the subquery over {table.name} to another relation's "
                                 "row; a subquery is correlated with the rows of its own table only")
            ops = {exp.EQ: "=", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">="}
            op = ops.get(type(conjunct))
            if op is None:
                raise NotInClass(f"the correlation {conjunct.sql()} is neither an equality nor one inequality")
            left, right = conjunct.this, conjunct.expression
            if not (isinstance(left, exp.Column) and isinstance(right, exp.Column)):
                raise NotInClass(f"the correlation {conjunct.sql()} compares expressions, not columns (the paper's SQ2 shape)")
            if left.table == outer and right.table == alias:
                left, right, op = right, left, {"=": "=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}[op]
            if not (left.table == alias and right.table == outer):
                raise NotInClass(f"the correlation {conjunct.sql()} does not compare the subquery's row with the outer row")
            pair = (self._key(r, left.name), self._key(r, right.name))
            if op == "=":
                equal.append(pair)
            elif inequality is not None:
                raise NotInClass(f"the subquery {_short(node)} is correlated by 2 inequalities; "
                                 "only one inequality (a range of groups) is supported")
            else:
                inequality = (pair[0], op, pair[1])
        filt = " AND ".join(f"({f})" for f in filters) or None
        aggs: list[AggRef] = []
        value = inner.expressions[0]
        expr = self._convert(value.this if isinstance(value, exp.Alias) else value, "sub", over, alias, filt, aggs)
        if not aggs:
            raise NotInClass(f"the subquery {_short(node)} is not an aggregate")
        self.subqueries.append(Subquery(expr, tuple(aggs), over, tuple(equal), inequality))
        return len(self.subqueries) - 1


def _addends(node: Any, exp: Any, negated: bool = False) -> list[tuple[bool, Any]]:
    """The terms of a sum, each with whether it is subtracted: ``a.x - (b.y + 1)`` -> [(F, a.x), (T, b.y), (T, 1)]."""
    if isinstance(node, exp.Paren):
        return _addends(node.this, exp, negated)
    if isinstance(node, exp.Add):
        return _addends(node.this, exp, negated) + _addends(node.expression, exp, negated)
    if isinstance(node, exp.Sub):
        return _addends(node.this, exp, negated) + _addends(node.expression, exp, not negated)
    return [(negated, node)]


def _cross_product(select: Any) -> list[Any]:
    """The tables of ``select``'s FROM and of its joins without a condition (comma, CROSS JOIN)."""
    from sqlglot import exp

    from_ = select.args.get("from") or select.args.get("from_")
    tables = [from_.this] if from_ is not None else []
    for join in select.args.get("joins") or []:
        if join.args.get("on") is not None or join.args.get("using") or join.side or join.kind not in ("", "CROSS", None):
            raise NotInClass(f"the join {_short(join)}: the general nested class takes a cross product of tables filtered "
                             "each on its own (paper §4.3); an equi-join is maintained only in TPC-H Q17's shape")
        tables.append(join.this)
    for table in tables:
        if not isinstance(table, exp.Table):
            raise NotInClass(f"{_short(table)} in FROM is not a table")
    return tables


def _single_table(select: Any) -> Any:
    """The one table of ``select``'s FROM with no JOIN, or None."""
    from sqlglot import exp

    from_ = select.args.get("from") or select.args.get("from_")
    if from_ is None or select.args.get("joins") or not isinstance(from_.this, exp.Table):
        return None
    return from_.this


def _short(node: Any, width: int = 90) -> str:
    text = node.sql()
    return text if len(text) <= width else text[: width - 3] + "..."
