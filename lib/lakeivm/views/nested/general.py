"""The nested kind's general algorithm (RPAI paper §4.2, Alg. 3; digest §1.4, §4.2) over one relation.

The class: one table ``R r`` in FROM; a WHERE built from AND, OR, NOT, comparisons, ``IS NULL``, ``+``,
``-``, ``*``, literals, ``r``'s columns and scalar subqueries ``(SELECT e FROM R r2 WHERE ...)``, where
``e`` is arithmetic over ``SUM``/``COUNT`` of ``r2``'s expressions, and the subquery's WHERE has
uncorrelated filters on ``r2`` plus a correlation of equalities ``r2.a = r.b`` and at most one
inequality ``r2.a θ r.b`` (θ one of ``<, <=, >, >=``), or none (an uncorrelated aggregate); an outer
SELECT of ``SUM``/``COUNT``/``AVG`` over ``r`` with ``+``, ``-``, ``*`` and literals, a division or
AVG only as a whole output (Spark rounds it once, at the output's type), and an optional GROUP BY of
``r``'s columns. So both sides of a comparison may be correlated (the paper's SQ1), the correlated
column may differ from the outer one (SQ2), and OR may join nested comparisons.

State (the paper's bound maps, §4.2): rows of ``R`` grouped by every column the predicates, the
correlations and the GROUP BY read (the *keys*), with per-key sums of the *terms*: the row count and
each aggregate's per-row value and non-NULL count (a filtered one as ``CASE WHEN``). The maintainer
keeps this index in Delta as absolute sums and feeds this evaluator each commit's signed rows.

Evaluation sweeps the keys (O(G log G) for G keys per result): each correlated subquery's sums are
cumulated along its inequality column within its equality partition, and looked up by binary search
per outer key; each key whose predicate holds adds its outer sums. This is the general algorithm's
O(n) per update, with n the distinct keys, not the rows; the shipped shapes (VWAP, Example 2.1, MST,
PSP, Q17) keep their O(log n) indexes (§4.3-4.7). Arithmetic is exact (Fraction); comparisons
are only allowed where Spark's are exact too (no DOUBLE column, no AVG or division compared).
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any

COUNT_TERM = "cnt"
Ast = tuple  # ("lit", v) | ("col", key index) | ("agg", i) | ("sub", i) | ("bin", op, a, b) | ("neg", a)
#              | ("cmp", op, a, b) | ("and", a, b) | ("or", a, b) | ("not", a) | ("isnull", a)


class NotInClass(Exception):
    """The query is outside the class above; the message names the construct."""


@dataclass(frozen=True)
class AggRef:
    """A SUM, COUNT or AVG as the index terms that give it: ``value`` (None for a COUNT) and ``count``
    (the non-NULL values counted; ``cnt`` for ``COUNT(*)``)."""

    func: str
    value: str | None
    count: str


@dataclass(frozen=True)
class Subquery:
    """A scalar subquery: ``expr`` over its aggregates ``aggs``; correlated by ``equal`` (inner key,
    outer key) pairs and at most one ``inequality`` (inner key, θ, outer key) meaning ``inner θ outer``."""

    expr: Ast
    aggs: tuple[AggRef, ...]
    equal: tuple[tuple[int, int], ...]
    inequality: tuple[int, str, int] | None


@dataclass(frozen=True)
class GeneralPlan:
    """A query of the class: the index layout (``keys``: the table's columns; ``terms``: name -> SQL of
    a per-row value over the table), the predicate, its subqueries and the outputs."""

    table: str
    keys: tuple[str, ...]
    terms: tuple[tuple[str, str], ...]
    where: Ast | None
    subqueries: tuple[Subquery, ...]
    aggs: tuple[AggRef, ...]
    group: tuple[int, ...]
    outputs: tuple[tuple[str, Ast], ...]
    compared: tuple[str, ...]  # the columns whose values are compared or summed into compared values

    @property
    def sums(self) -> tuple[str, ...]:
        """The index's per-key sums: the row count, then each term."""
        return (COUNT_TERM, *(name for name, _ in self.terms))

    def inexact(self, schema: Mapping[str, str]) -> str | None:
        """Why Spark's comparisons would not be exact on ``schema``'s types (a DOUBLE or FLOAT column), or None."""
        for column in self.compared:
            kind = str(schema.get(column, "")).lower()
            if kind in ("double", "float", "real"):
                return (f"column {column!r} is {kind.upper()}: Spark compares it inexactly and the nested kind's exact "
                        "arithmetic would disagree at ties; store it as DECIMAL")
        return None


@dataclass(frozen=True)
class RowEvent:
    """One source row (its keys and term values) inserted (+1) or deleted (-1)."""

    keys: tuple[Any, ...]
    terms: tuple[Any, ...]
    sign: int = 1


class General:
    """The evaluator of a :class:`GeneralPlan`: per-key sums, and the sweep of the module doc."""

    def __init__(self, plan: GeneralPlan) -> None:
        self.plan = plan
        self._groups: dict[tuple, list[Any]] = {}
        self._width = len(plan.sums)
        self._where = _compile(plan.where) if plan.where is not None else None
        self._outputs = [_compile(expr) for _, expr in plan.outputs]
        self._subqueries = [_compile(sub.expr) for sub in plan.subqueries]

    def apply(self, event: RowEvent) -> None:
        x = event.sign
        self._add(tuple(event.keys), [x, *(0 if t is None else x * t for t in event.terms)])

    def load(self, table: str, rows: Iterable[tuple[tuple, tuple]]) -> None:
        """Add stored per-key sums ``(keys, sums)`` (layout ``plan.keys``, ``plan.sums``)."""
        for keys, sums in rows:
            self._add(tuple(keys), list(sums))

    def _add(self, key: tuple, sums: Sequence[Any]) -> None:
        cell = self._groups.get(key)
        if cell is None:
            cell = self._groups[key] = [0] * self._width
        for i, value in enumerate(sums):
            cell[i] += value
        if not cell[0]:
            del self._groups[key]  # no row left: every term sums to zero too

    def result(self) -> list[tuple]:
        """The query's rows, each a tuple of its outputs in SELECT order (exact numbers, None for NULL)."""
        plan, position = self.plan, {name: i for i, name in enumerate(self.plan.sums)}
        lookups = [_SubqueryLookup(s, expr, self._groups, position) for s, expr in zip(plan.subqueries, self._subqueries)]
        subquery = lambda i, key: lookups[i].value(key)  # noqa: E731
        totals: dict[tuple, list[Any]] = {}
        for key, sums in self._groups.items():
            if self._where is not None and self._where(key, subquery, None) is not True:
                continue
            group = tuple(key[i] for i in plan.group)
            cell = totals.setdefault(group, [0] * self._width)
            for i, value in enumerate(sums):
                cell[i] += value
        if not plan.group and not totals:
            totals[()] = [0] * self._width  # an ungrouped aggregate has one row over no rows
        rows = []
        for group, sums in totals.items():
            aggs = [_agg_value(a, sums, position) for a in plan.aggs]
            key = [None] * len(plan.keys)
            for i, value in zip(plan.group, group):
                key[i] = value
            rows.append(tuple(output(tuple(key), None, aggs) for output in self._outputs))
        return rows


class _SubqueryLookup:
    """One subquery's value per outer key: its sums partitioned by the equality columns and cumulated
    along the inequality column (the bound map of §4.2, with prefix sums for the range)."""

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
    count = sums[position[agg.count]]
    if agg.func == "COUNT":
        return Fraction(count)
    if not count:
        return None
    value = _number(sums[position[agg.value]])
    return value if agg.func == "SUM" else value / count


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
    """What ``lakeivm explain`` says of a general plan: the index's keys and each subquery's correlation."""
    subs = []
    for i, sub in enumerate(plan.subqueries, 1):
        parts = [f"{plan.keys[a]} = outer {plan.keys[b]}" for a, b in sub.equal]
        if sub.inequality:
            a, op, b = sub.inequality
            parts.append(f"{plan.keys[a]} {op} outer {plan.keys[b]}")
        subs.append(f"subquery {i}: " + (" AND ".join(parts) if parts else "uncorrelated"))
    return (f"nested, the general algorithm (RPAI §4.2): {plan.table}'s rows summed per ({', '.join(plan.keys)}), "
            f"{len(plan.terms)} sums besides the count; {'; '.join(subs)}. Each commit's result sweeps the distinct keys "
            "(the shipped shapes VWAP, Example 2.1, MST, PSP and TPC-H Q17 keep O(log n) indexes instead)")


# -- recognition ------------------------------------------------------------------------------------
def general_plan(query: Any) -> GeneralPlan:
    """``query`` (a qualified :class:`~lakeivm.sql.Query`) as a plan of the class; :class:`NotInClass`
    naming the first construct outside it."""
    return _Recognizer(query.tree).plan()


_UNSUPPORTED_SELECT = ("having", "order", "limit", "offset", "distinct", "qualify", "windows", "with", "with_",
                       "laterals", "pivots")


class _Recognizer:
    def __init__(self, tree: Any) -> None:
        from sqlglot import exp

        self.exp = exp
        self.tree = tree
        self.keys: dict[str, int] = {}
        self.terms: dict[str, str] = {}  # SQL -> term name
        self.subqueries: list[Subquery] = []
        self.aggs: list[AggRef] = []
        self.compared: dict[str, None] = {}

    def plan(self) -> GeneralPlan:
        exp, tree = self.exp, self.tree
        for arg in _UNSUPPORTED_SELECT:
            if tree.args.get(arg):
                raise NotInClass(f"{arg.upper()} in a nested-aggregate query (the general class reads one table "
                                 "with no JOIN, HAVING, DISTINCT, ORDER BY or LIMIT)")
        table = _single_table(tree)
        if table is None:
            raise NotInClass("the query reads more than one table; the general nested class reads one (joins are "
                             "maintained only in the shipped shapes MST, PSP and TPC-H Q17)")
        self.table, self.alias = table.name, table.alias_or_name
        group = []
        for node in (tree.args["group"].expressions if tree.args.get("group") else []):
            if not (isinstance(node, exp.Column) and node.table == self.alias):
                raise NotInClass(f"GROUP BY {node.sql()} is not a column of {self.table}")
            group.append(self._key(node.name))
        where = tree.args.get("where")
        where_ast = self._convert(where.this, "where") if where is not None else None
        outputs = []
        for item in tree.expressions:
            node = item.this if isinstance(item, exp.Alias) else item
            outputs.append((item.alias_or_name, self._output(node, group)))
        if not self.subqueries:
            raise NotInClass("no nested aggregate in WHERE")
        return GeneralPlan(self.table, tuple(self.keys), tuple((n, s) for s, n in self.terms.items()), where_ast,
                           tuple(self.subqueries), tuple(self.aggs), tuple(group), tuple(outputs), tuple(self.compared))

    # -- pieces -----------------------------------------------------------------------------------
    def _key(self, column: str) -> int:
        self.compared[column] = None
        return self.keys.setdefault(column, len(self.keys))

    def _term(self, sql: str) -> str:
        return self.terms.setdefault(sql, f"t{len(self.terms)}")

    def _output(self, node: Any, group: list[int]) -> Ast:
        exp = self.exp
        if isinstance(node, exp.Div):  # rounded once by Spark, at the output's type: exact then rounded here
            return ("bin", "/", self._convert(node.this, "output", group=group), self._convert(node.expression, "output", group=group))
        if isinstance(node, exp.Avg):
            return ("agg", self._aggregate(node, self.alias, None, self.aggs, allow_avg=True))
        return self._convert(node, "output", group=group)

    def _convert(self, node: Any, scope: str, alias: str | None = None, filt: str | None = None,
                 aggs: list[AggRef] | None = None, group: list[int] | None = None) -> Ast:
        """A WHERE (``where``), a subquery's value (``sub``, rows of ``alias`` filtered by ``filt``) or an
        output (``output``) as an Ast."""
        exp = self.exp
        convert = lambda n: self._convert(n, scope, alias, filt, aggs, group)  # noqa: E731
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
            owner, into = (self.alias, self.aggs) if scope == "output" else (alias, aggs)
            return ("agg", self._aggregate(node, owner, filt if scope == "sub" else None, into))
        if isinstance(node, exp.Column):
            if scope == "where" and node.table == self.alias:
                return ("col", self._key(node.name))
            if scope == "output" and node.table == self.alias and self.keys.get(node.name) in (group or []):
                return ("col", self.keys[node.name])
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
                return ("sub", self._subquery(node))
        raise NotInClass(f"{node.sql()} ({type(node).__name__}) is outside the general nested class")

    def _aggregate(self, node: Any, alias: str, filt: str | None, into: list[AggRef], allow_avg: bool = False) -> int:
        exp = self.exp
        name = node.sql_name() if hasattr(node, "sql_name") else type(node).__name__.upper()
        if isinstance(node, (exp.Min, exp.Max)):
            raise NotInClass(f"the nested aggregate {node.sql()} is not streamable under deletes (paper §4.3: only "
                             "SUM, COUNT and AVG); use SUM, COUNT or AVG")
        if not isinstance(node, (exp.Sum, exp.Count, exp.Avg)):
            raise NotInClass(f"the aggregate {node.sql()}: only SUM, COUNT and AVG are maintained")
        if isinstance(node, exp.Avg) and not allow_avg:
            raise NotInClass(f"{node.sql()} compared or combined: Spark rounds AVG (DECIMAL to 4 more digits, else DOUBLE); "
                             "compare SUM with a multiple of COUNT instead")
        arg = node.this
        if isinstance(arg, exp.Distinct):
            raise NotInClass(f"{node.sql()}: DISTINCT inside a nested-aggregate query")
        if isinstance(node, exp.Count) and (arg is None or isinstance(arg, exp.Star)):
            ref = AggRef("COUNT", None, COUNT_TERM if filt is None else self._term(f"CASE WHEN {filt} THEN 1 ELSE 0 END"))
        else:
            value = self._row_sql(arg, alias, f"the argument of {node.sql()}")
            cond = f"({value}) IS NOT NULL" if filt is None else f"({filt}) AND ({value}) IS NOT NULL"
            count = self._term(f"CASE WHEN {cond} THEN 1 ELSE 0 END")
            ref = (AggRef("COUNT", None, count) if isinstance(node, exp.Count)
                   else AggRef(name.upper(), self._term(f"CASE WHEN {cond} THEN {value} ELSE 0 END"), count))
        into.append(ref)
        return len(into) - 1

    def _row_sql(self, node: Any, alias: str, what: str) -> str:
        """``node``, an expression over ``alias``'s row, as SQL over the table's own columns."""
        exp = self.exp
        if node.find(exp.Subquery, exp.AggFunc, exp.Select):
            raise NotInClass(f"{what} nests a subquery or an aggregate")
        node = node.copy()
        for column in node.find_all(exp.Column):
            if column.table != alias:
                raise NotInClass(f"{what} reads {column.sql()}, a column of another relation")
            self.compared[column.name] = None
            column.set("table", None)
        from lakeivm.sql import DIALECT

        return node.sql(DIALECT)

    def _subquery(self, node: Any) -> int:
        exp = self.exp
        inner = node.this
        if not isinstance(inner, exp.Select) or len(inner.expressions) != 1:
            raise NotInClass(f"the subquery {_short(node)} is not a single aggregate")
        for arg in _UNSUPPORTED_SELECT + ("group",):
            if inner.args.get(arg):
                raise NotInClass(f"{arg.upper()} inside the subquery {_short(node)}")
        table = _single_table(inner)
        if table is None or table.name != self.table:
            name = table.name if table is not None else "more than one table"
            raise NotInClass(f"the subquery {_short(node)} reads {name!r}, a table the outer query does not read "
                             "(the general nested class reads one table)")
        alias = table.alias_or_name
        filters, equal, inequality = [], [], None
        where = inner.args.get("where")
        for conjunct in (list(where.this.flatten()) if where is not None and isinstance(where.this, exp.And)
                         else [where.this] if where is not None else []):
            if conjunct.find(exp.Subquery):
                raise NotInClass(f"a nested aggregate inside a nested aggregate ({_short(node)}; the paper's NQ1/NQ2 shapes)")
            outer = [c for c in conjunct.find_all(exp.Column) if c.table != alias]
            if not outer:
                filters.append(self._row_sql(conjunct, alias, f"the filter {conjunct.sql()}"))
                continue
            if any(c.table != self.alias for c in outer):
                raise NotInClass(f"the correlation {conjunct.sql()} reads a relation that is not the outer one")
            ops = {exp.EQ: "=", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">="}
            op = ops.get(type(conjunct))
            if op is None:
                raise NotInClass(f"the correlation {conjunct.sql()} is neither an equality nor one inequality")
            left, right = conjunct.this, conjunct.expression
            if not (isinstance(left, exp.Column) and isinstance(right, exp.Column)):
                raise NotInClass(f"the correlation {conjunct.sql()} compares expressions, not columns (the paper's SQ2 shape)")
            if left.table == self.alias and right.table == alias:
                left, right, op = right, left, {"=": "=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}[op]
            if not (left.table == alias and right.table == self.alias):
                raise NotInClass(f"the correlation {conjunct.sql()} does not compare the subquery's row with the outer row")
            pair = (self._key(left.name), self._key(right.name))
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
        expr = self._convert(value.this if isinstance(value, exp.Alias) else value, "sub", alias, filt, aggs)
        if not aggs:
            raise NotInClass(f"the subquery {_short(node)} is not an aggregate")
        self.subqueries.append(Subquery(expr, tuple(aggs), tuple(equal), inequality))
        return len(self.subqueries) - 1


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
