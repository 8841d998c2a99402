"""View SQL -> a small query IR (sqlglot), and the SQL rewrites every maintainer runs on Spark.

The IR names what maintenance needs: the relations (table + alias) and the columns used of each,
the equi-join graph, single-table filters, the GROUP BY keys and the aggregates. Each maintainer
keeps a *state* per group -- a row count and, per aggregated expression, the sum of its non-null
values and their count -- from which SQL's SUM/COUNT/AVG (with SQL's NULL rules) are finalized.

Example::

    >>> q = parse_query("SELECT a, SUM(b) AS s FROM t GROUP BY a", {"t": {"a": "int", "b": "int"}})
    >>> [r.table for r in q.relations], [k.name for k in q.group_keys], q.outputs[1].name
    (['t'], ['a'], 's')
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

import sqlglot
from sqlglot import exp
from sqlglot.errors import OptimizeError, ParseError
from sqlglot.optimizer.merge_subqueries import merge_subqueries
from sqlglot.optimizer.qualify import qualify

from lakeivm.errors import UnsupportedQuery
from lakeivm.columns import MULTIPLICITY
from lakeivm.sql_functions import GENERATORS, check_functions, group, spark_name

DIALECT = "spark"
COUNT = "_lakeivm_count"
HAVING = "_lakeivm_having"  # a hidden result column: the group satisfies the view's HAVING (its reader keeps those)
_AGGREGATES = {exp.Sum: "SUM", exp.Count: "COUNT", exp.Avg: "AVG", exp.Min: "MIN", exp.Max: "MAX",
               exp.Stddev: "STDDEV_SAMP", exp.StddevSamp: "STDDEV_SAMP", exp.StddevPop: "STDDEV_POP",
               exp.Variance: "VAR_SAMP", exp.VariancePop: "VAR_POP"}
_ALIASES = {"std": exp.Stddev, "mean": exp.Avg}  # Spark's other names of those (sqlglot keeps them as anonymous calls)
MULTISET_FUNCS = ("MIN", "MAX", "DISTINCT")  # state kept as a multiset per group; DISTINCT: COUNT(DISTINCT e)


@dataclass(frozen=True)
class Relation:
    """One occurrence of a base table in FROM (a table joined with itself occurs twice)."""

    table: str
    alias: str
    columns: tuple[str, ...]


@dataclass(frozen=True)
class EquiJoin:
    """``left_alias.left_column = right_alias.right_column`` in ON or WHERE."""

    left_alias: str
    left_column: str
    right_alias: str
    right_column: str


@dataclass(frozen=True)
class OuterJoin:
    """``... LEFT JOIN padded ON padded.column = preserved.preserved_column AND ...``: a row of the
    preserved side that matches no row of ``padded`` is kept, NULL-padded. The equality is the one
    a change of ``padded`` is traced back through (first_order's ``apply``).

    ``how`` is ``left``; ``full`` (FULL JOIN, the query's first join: both sides are padded); or a join
    that keeps the preserved rows without ``padded``'s columns: ``semi`` (EXISTS, IN: those with a
    match), ``anti`` (NOT EXISTS: those without) or ``not_in`` (NOT IN: those without, where a NULL on
    either side of the equality counts as a match)."""

    padded: str
    column: str
    preserved: str
    preserved_column: str
    how: str = "left"

    @property
    def construct(self) -> str:
        """How the view's SQL wrote it, for messages."""
        what = {"left": "LEFT JOIN", "full": "FULL JOIN", "semi": "EXISTS/IN", "anti": "NOT EXISTS", "not_in": "NOT IN"}[self.how]
        return f"{what} {self.padded}"

    def padding(self, alias: str) -> "OuterJoin | None":
        """This join as seen from a change of relation ``alias``: itself if ``alias`` is its padded side,
        the join with its sides swapped if it is the preserved side of a FULL JOIN, else None."""
        if alias == self.padded:
            return self
        if alias == self.preserved and self.how == "full":
            return OuterJoin(self.preserved, self.preserved_column, self.padded, self.column, "full")
        return None


@dataclass(frozen=True)
class GroupKey:
    """A GROUP BY expression, stored under ``name`` (its SELECT alias, or a hidden name)."""

    name: str
    sql: str


@dataclass(frozen=True)
class Aggregate:
    """State kept for one aggregated expression: ``func`` is SUM (shared by SUM, COUNT and AVG of
    the same expression), MIN, MAX or DISTINCT (COUNT(DISTINCT)); ``sql`` is None for COUNT(*).
    State columns: s<index>, n<index>."""

    func: str
    sql: str | None
    index: int


@dataclass(frozen=True)
class Output:
    """A SELECT item: a group key, an expression over aggregates finalized from the state, or
    (in a query without aggregates) a plain projection."""

    name: str
    finalize_sql: str
    is_key: bool


@dataclass(frozen=True)
class Query:
    """The IR of one view's SQL. ``tree`` is the qualified sqlglot AST (every column has its alias)."""

    sql: str
    tree: exp.Select = field(compare=False, repr=False)
    relations: tuple[Relation, ...]
    joins: tuple[EquiJoin, ...]
    filters: Mapping[str, tuple[str, ...]]
    residual: tuple[str, ...]
    group_keys: tuple[GroupKey, ...]
    aggregates: tuple[Aggregate, ...]
    outputs: tuple[Output, ...]
    has_subquery: bool
    notes: tuple[str, ...] = ()  # what parsing changed that does not change the result (explain prints them)
    implicit_keys: str | None = None  # "distinct" or "projection": GROUP BY keys lakeivm added (``grouped``)
    top: tuple[tuple[str, bool, bool], ...] = ()  # ORDER BY of a top-k: (result column, descending, nulls first)
    limit: int | None = None  # the k of ``ORDER BY ... LIMIT k``: every group is kept, the reader takes the first k
    outer: tuple[OuterJoin, ...] = ()  # the LEFT JOINs (a RIGHT JOIN is turned into one): first_order maintains them
    branches: tuple["Query", ...] = ()  # a query over UNION ALL: one query per branch, their states add (``_union_branches``)

    @property
    def tables(self) -> tuple[str, ...]:
        """Distinct base tables, in FROM order."""
        return tuple(dict.fromkeys(r.table for r in self.relations))

    def columns_of(self, table: str) -> tuple[str, ...]:
        """Columns of ``table`` used by any of its occurrences, in schema order of first use."""
        cols = [c for r in self.relations if r.table == table for c in r.columns]
        return tuple(dict.fromkeys(cols))

    def aliases_of(self, table: str) -> tuple[str, ...]:
        """The aliases under which ``table`` occurs."""
        return tuple(r.alias for r in self.relations if r.table == table)

    @property
    def having(self) -> bool:
        """Whether the view has a HAVING, kept as the hidden column ``HAVING`` of every group."""
        return any(o.name == HAVING for o in self.outputs)

    @property
    def extrema(self) -> tuple[Aggregate, ...]:
        """The MIN/MAX and COUNT(DISTINCT) aggregates: their value column is recomputed from a multiset
        of each group's values, not added."""
        return tuple(a for a in self.aggregates if a.func in MULTISET_FUNCS)

    @property
    def additive_columns(self) -> tuple[str, ...]:
        """The state columns whose deltas add (all but the MIN/MAX values)."""
        values = {f"_lakeivm_s{a.index}" for a in self.extrema}
        return tuple(c for c in self.state_columns if c not in values)

    @property
    def state_columns(self) -> tuple[str, ...]:
        """The state columns kept per group, besides the group keys."""
        cols = [COUNT]
        for agg in self.aggregates:
            if agg.sql is not None:
                cols += [f"_lakeivm_s{agg.index}", f"_lakeivm_n{agg.index}"]
        return tuple(cols)


def parse_query(sql: str, schemas: Mapping[str, Mapping[str, str]], source: str = "<sql>") -> Query:
    """Parse and qualify ``sql`` against table schemas ({table: {column: type}}) into a Query.

    Raises UnsupportedQuery naming the source, line and construct for anything outside
    select-project-join + GROUP BY + SUM/COUNT/AVG/MIN/MAX, or calling a function outside the vetted
    deterministic built-ins (``lakeivm.sql_functions``). Subqueries are recorded, not rejected: the
    classifier decides whether the nested kind takes them.
    """
    tree = _canonical_aggregates(_parse(sql, source))
    if isinstance(tree, exp.Union) and _union_all_parts(tree) is not None:  # rows of a UNION ALL (UNION: DISTINCT of them)
        distinct = bool(tree.args.get("distinct"))
        tree = exp.select("*").from_(_as_union_all(tree).subquery("_lakeivm_union"))
        tree.set("distinct", exp.Distinct() if distinct else None)
    if not isinstance(tree, exp.Select):
        raise UnsupportedQuery(f"{source}: line {_line(tree, sql)}: {_what(tree)} is not maintained incrementally; "
                               "an incremental view is one SELECT or a UNION [ALL] of SELECTs (refresh_policy: auto "
                               "recomputes it in full)")
    _reject_unsafe(tree, sql, source)
    _check_tables(_base_tables(tree), schemas, sql, source)
    notes = ()
    if tree.args.get("order") and not tree.args.get("limit"):  # a stored view has no order: the ORDER BY changes nothing
        tree.set("order", None)
        notes = ("ORDER BY ignored: a view's rows have no order; sort when reading it",)
    top, limit = _top_k(tree, sql, source)
    if limit is not None:
        notes = (f"ORDER BY ... LIMIT {limit}: every group is maintained; reading the view takes the first {limit}",)
    if _having_as_column(tree):
        notes = (*notes, "HAVING: every group is maintained, with whether it satisfies HAVING; reading the view keeps those that do")
    # A derived table or CTE that is a plain SELECT (TPC-H Q7-Q9) is merged into the query (sqlglot's optimizer).
    tree = merge_subqueries(_qualified(tree, schemas, source))
    if _right_as_left(tree):
        notes = (*notes, "RIGHT JOIN maintained as the LEFT JOIN with its two tables swapped")
    notes = (*notes, *_semi_joins(tree))
    implicit = None
    if tree.args.get("distinct") and not tree.args.get("group") and not _aggregates_here(tree):
        tree.set("distinct", None)  # SELECT DISTINCT e1, e2 = GROUP BY e1, e2: a group per distinct row
        implicit, notes = "distinct", (*notes, "SELECT DISTINCT maintained as GROUP BY of its columns")
        _group_by_outputs(tree, sql, source)
    branches = _union_branches(tree, sql, source)
    if branches is not None:
        notes = (*notes, f"UNION ALL: each of its {len(branches)} branches maintained by the delta rule, their states added")
        query = _combine(sql, tree, _built_branches(sql, branches, source), source)
    else:
        _reject_constructs(tree, sql, source)
        query = _build(sql, tree, source)
    return replace(query, notes=notes, implicit_keys=implicit, top=top, limit=limit)


def _canonical_aggregates(tree: exp.Expression) -> exp.Expression:
    """``tree`` with Spark's other names of the aggregates maintained (``std``, ``mean``: ``_ALIASES``) as
    sqlglot's nodes of the aggregates they are."""
    return tree.transform(lambda node: _ALIASES[node.name.lower()](this=node.expressions[0].copy())
                          if isinstance(node, exp.Anonymous) and node.name.lower() in _ALIASES and len(node.expressions) == 1
                          else node)


def _union_all_parts(union: exp.Union) -> list[exp.Select] | None:
    """The SELECTs of ``s1 UNION ALL s2 ...`` (or of ``s1 UNION s2 ...``: every operator the same),
    or None for a mix, INTERSECT/EXCEPT, or a part that is not a plain SELECT."""
    parts, pending = [], [union]
    while pending:
        node = pending.pop()
        if isinstance(node, exp.Union) and not node.args.get("order") and not node.args.get("limit"):
            if bool(node.args.get("distinct")) != bool(union.args.get("distinct")):
                return None
            pending += [node.expression, node.this]
        elif isinstance(node, exp.Select):
            parts.append(node)
        else:
            return None
    return parts


def _as_union_all(union: exp.Union) -> exp.Union:
    tree = union.copy()
    for node in tree.find_all(exp.Union):
        node.set("distinct", False)
    return tree


def _union_branches(tree: exp.Select, sql: str, source: str) -> list[exp.Select] | None:
    """``SELECT ... FROM (b1 UNION ALL b2 ...) AS u WHERE ... GROUP BY ...`` as one SELECT per branch:
    the outer query with ``u``'s columns replaced by the branch's expressions, over the branch's FROM
    and WHERE, its aliases suffixed ``__u<i>`` (each relation occurs once in the whole query). The
    view is the sum of the branches' states, since SUM, COUNT and the groups distribute over UNION ALL.
    None if the query does not read a UNION ALL."""
    derived = tree.args.get("from_") and tree.args["from_"].this
    if not isinstance(derived, exp.Subquery) or not isinstance(derived.this, exp.Union):
        return None
    where = f"{source}: line {_line(derived, sql)}: UNION"
    parts = _union_all_parts(derived.this)
    if parts is None or derived.this.args.get("distinct"):
        raise UnsupportedQuery(f"{where} is maintained incrementally as UNION ALL of plain SELECTs (a UNION of them at "
                               "the top); INTERSECT, EXCEPT, a mix, or a branch with ORDER BY/LIMIT is not")
    if tree.args.get("joins"):
        raise UnsupportedQuery(f"{where} ALL joined with other tables is not maintained incrementally; join inside each branch")
    union, names = derived.alias_or_name, derived.this.named_selects
    branches = []
    for i, part in enumerate(parts):
        for construct, node in (("GROUP BY", part.args.get("group")), ("an aggregate", part.find(exp.AggFunc)),
                                ("DISTINCT", part.args.get("distinct")), ("a subquery", part.find(exp.Subquery)),
                                ("a window function", part.find(exp.Window)), ("LIMIT", part.args.get("limit"))):
            if node:
                raise UnsupportedQuery(f"{where} ALL: branch {i + 1} has {construct}; each branch is maintained as a "
                                       "plain SELECT ... FROM ... WHERE (aggregate in the query over the UNION ALL)")
        branch = _suffixed(part, f"__u{i}")
        values = dict(zip(names, [(e.this if isinstance(e, exp.Alias) else e) for e in branch.expressions]))
        outer = tree.copy().transform(
            lambda node: values[node.name].copy() if isinstance(node, exp.Column) and node.table == union else node)
        outer.set("from_", branch.args["from_"].copy())
        outer.set("joins", [j.copy() for j in branch.args.get("joins") or []] or None)
        conditions = [w.this for w in (branch.args.get("where"), outer.args.get("where")) if w]
        outer.set("where", exp.Where(this=exp.and_(*conditions)) if conditions else None)
        _reject_constructs(outer, sql, source)
        branches.append(outer)
    return branches


def _suffixed(select: exp.Select, suffix: str) -> exp.Select:
    """``select`` with every relation alias (and every column's qualifier) suffixed."""
    tree = select.copy()
    for table in tree.find_all(exp.Table):
        table.set("alias", exp.TableAlias(this=exp.to_identifier(table.alias_or_name + suffix)))
    for column in tree.find_all(exp.Column):
        if column.table:
            column.set("table", exp.to_identifier(column.table + suffix))
    return tree


def _built_branches(sql: str, branches: list[exp.Select], source: str) -> list[Query]:
    """The Query of each branch of a view over UNION ALL. Aggregates of one expression share their
    state; where that keeps different state in two branches (``SUM(b), SUM(c)`` over a branch that
    selects ``v AS b, v AS c``, and one that does not), each aggregate call keeps its own."""
    built = [_build(sql, branch, source) for branch in branches]
    if any(_state_shape(query) != _state_shape(built[0]) for query in built):
        built = [_build(sql, branch, source, shared=False) for branch in branches]
    return built


def _combine(sql: str, tree: exp.Select, branches: list[Query], source: str) -> Query:
    """The Query of a view over UNION ALL from its branches' Queries, which must keep the same state."""
    first = branches[0]
    for i, branch in enumerate(branches[1:], start=2):
        if _state_shape(branch) != _state_shape(first):
            what = next(part for part, mine, theirs in zip(("GROUP BY keys", "aggregates", "result columns"),
                                                          _state_shape(branch), _state_shape(first)) if mine != theirs)
            raise UnsupportedQuery(f"{source}: UNION ALL: branch {i} keeps different {what} than branch 1 "
                                   f"({_state_shape(branch)} against {_state_shape(first)}); its branches are added "
                                   "per group, so they must keep the same state")
    if any(b.outer for b in branches) or any(a.func == "DISTINCT" for a in first.aggregates):
        what = "a LEFT JOIN in a branch" if any(b.outer for b in branches) else "COUNT(DISTINCT ...)"
        raise UnsupportedQuery(f"{source}: UNION ALL: {what} is not maintained incrementally over UNION ALL")
    return replace(first, sql=sql, tree=tree, branches=tuple(branches), has_subquery=False,
                   relations=tuple(r for b in branches for r in b.relations), joins=tuple(j for b in branches for j in b.joins),
                   filters={a: f for b in branches for a, f in b.filters.items()},
                   residual=tuple(c for b in branches for c in b.residual))


def _state_shape(query: Query) -> tuple:
    """What a query's stored state looks like: its group keys, state aggregates and result columns."""
    return [k.name for k in query.group_keys], [(a.func, a.index) for a in query.aggregates], [o.name for o in query.outputs]


def _having_as_column(tree: exp.Select) -> bool:
    """Move a HAVING over aggregates into the SELECT as the hidden boolean column ``HAVING``, its
    references to SELECT aliases expanded (Spark resolves them so): the groups are maintained as
    without it, each with whether it passes. False (the tree untouched) if there is none to move."""
    having = tree.args.get("having")
    if not having or not having.this.find(exp.AggFunc) or having.this.find(exp.Subquery, exp.Select):
        return False
    aliases = {item.alias: item.this for item in tree.expressions if isinstance(item, exp.Alias)}
    condition = having.this.copy().transform(
        lambda node: aliases[node.name].copy() if isinstance(node, exp.Column) and not node.table and node.name in aliases else node)
    tree.set("having", None)
    tree.append("expressions", exp.alias_(condition, HAVING))
    return True


def _top_k(tree: exp.Select, sql: str, source: str) -> tuple[tuple[tuple[str, bool, bool], ...], int | None]:
    """A top-level ``ORDER BY ... LIMIT k`` over result columns, taken off the tree: ((column,
    descending, nulls first), ...) and k. The view keeps every group; its reader sorts and takes k
    (what Spark does to the same rows). Anything else is left for ``_reject_constructs``."""
    order, limit = tree.args.get("order"), tree.args.get("limit")
    if not (order and limit) or tree.args.get("offset") or not isinstance(limit.expression, exp.Literal) or limit.expression.is_string:
        return (), None
    names = {item.alias_or_name for item in tree.expressions}
    written = {(item.this if isinstance(item, exp.Alias) else item).sql(DIALECT): item.alias_or_name for item in tree.expressions}
    top = []
    for ordered in order.expressions:
        term = ordered.this
        if isinstance(term, exp.Column) and not term.table and term.name in names:
            name = term.name
        elif term.sql(DIALECT) in written:
            name = written[term.sql(DIALECT)]
        else:
            raise UnsupportedQuery(f"{source}: line {_line(ordered, sql)}: ORDER BY {term.sql(DIALECT)} ... LIMIT orders by an "
                                   "expression that is not a result column; a top-k is maintained when it orders by "
                                   "columns of its SELECT (add it to the SELECT)")
        top.append((name, bool(ordered.args.get("desc")), bool(ordered.args.get("nulls_first"))))
    tree.set("order", None)
    tree.set("limit", None)
    return tuple(top), int(limit.expression.this)


def grouped(query: Query, source: str = "<sql>") -> Query:
    """A projection without aggregates (``SELECT e1, e2 FROM ... WHERE ...``) as ``GROUP BY e1, e2``:
    each distinct row kept once with its multiplicity in the count column, which the first-order
    kind's reader expands back into that many rows."""
    if query.branches:
        branches = [grouped(b, source) for b in query.branches]
        combined = _combine(query.sql, query.tree, branches, source)
    else:
        tree = query.tree.copy()
        _group_by_outputs(tree, query.sql, source)
        combined = _build(query.sql, tree, source)
    return replace(combined, notes=query.notes, implicit_keys="projection", top=query.top, limit=query.limit)


def _group_by_outputs(tree: exp.Select, sql: str, source: str) -> None:
    _check_distinct_names([item.alias_or_name for item in tree.expressions], source)
    tree.set("group", exp.Group(expressions=[(i.this if isinstance(i, exp.Alias) else i).copy() for i in tree.expressions]))


def _check_distinct_names(names: list[str], source: str) -> None:
    """A view's result columns are a Delta table's: no name twice."""
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise UnsupportedQuery(f"{source}: result column {twice[0]!r} is named twice; a view's columns need distinct names: "
                               "rename one with AS")


def _aggregates_here(tree: exp.Select) -> bool:
    """Whether the SELECT itself aggregates (an aggregate inside a subquery does not count, nor a
    window function such as ``MAX(v) OVER (...)``: it keeps every row)."""
    return any(agg.find_ancestor(exp.Subquery) is None and not _is_window_function(agg) for agg in tree.find_all(exp.AggFunc))


def _is_window_function(call: exp.Expression) -> bool:
    """Whether ``call`` is the function of a window, ``call OVER (...)`` (``IGNORE NULLS`` between them)."""
    node = call
    while isinstance(node.parent, (exp.IgnoreNulls, exp.RespectNulls)):
        node = node.parent
    return isinstance(node.parent, exp.Window) and node.parent.this is node


def backquoted(name: str) -> str:
    """A column name as a Spark SQL identifier."""
    return "`" + name.replace("`", "``") + "`"


def has_window(sql: str) -> bool:
    """Whether the top SELECT of ``sql`` computes a window function itself (not only in a subquery or
    CTE): the SQL the window kind maintains, or none does. False for SQL that does not parse
    (``parse_query`` says why)."""
    try:
        tree = sqlglot.parse_one(sql, dialect=DIALECT)
    except ParseError:
        return False
    return isinstance(tree, exp.Select) and any(w.find_ancestor(exp.Select) is tree for w in tree.find_all(exp.Window))


def parse_full(sql: str, schemas: Mapping[str, Mapping[str, str]], source: str = "<sql>") -> Query:
    """Parse any one Spark SQL query over lake tables for the full kind, which recomputes it on the
    pinned snapshots: outer joins, set operations, CTEs, window functions, DISTINCT, HAVING, ORDER BY
    ... LIMIT. Refused, naming the line: anything but one query, unknown tables or columns, functions
    a view may not call (``lakeivm.sql_functions``), ``${...}``, scripts, samples, parameters, and a
    result column named twice. An unnamed result column is named ``_col_<i>`` (``named_outputs``).

    The Query's relations are its base tables, one each (alias = table name: ``as_written`` swaps
    every reference to a table, at any depth, for that table's snapshot).
    """
    tree = _parse(sql, source)
    if not isinstance(tree, exp.Query):
        raise UnsupportedQuery(f"{source}: line {_line(tree, sql)}: a view is one query (SELECT, set operations, WITH), "
                               f"got {_what(tree)}")
    _reject_unsafe(tree, sql, source)
    check_functions(tree, sql, source)
    for query in tree.find_all(exp.Query):
        if query.args.get("limit") and not query.args.get("order"):
            raise UnsupportedQuery(f"{source}: line {_line(query.args['limit'], sql)}: LIMIT without ORDER BY keeps arbitrary rows, "
                                   "so the view would differ from its SQL between runs; add an ORDER BY that decides every tie")
    tables = _base_tables(tree)
    _check_tables(tables, schemas, sql, source)
    names = _qualified(named_outputs(tree.copy()), schemas, source).named_selects  # validates the columns; the SQL runs as written
    _check_distinct_names(names, source)
    used = tuple(dict.fromkeys(t.name for t in tables))
    return Query(sql=sql, tree=tree, relations=tuple(Relation(t, t, tuple(schemas[t])) for t in used), joins=(), filters={},
                 residual=(), group_keys=(), aggregates=(), outputs=tuple(Output(n, n, False) for n in names),
                 has_subquery=_has_nested_select(tree))


def as_written(sql: str, sources: Mapping[str, str]) -> str:
    """The view's SQL as its spec has it, every reference to a base table (``{table: Spark table or
    view}``) at any depth swapped for its source; a CTE of the same name is left alone. The audit's
    oracle: what Spark computes from the user's own SQL, not from lakeivm's reading of it. Its unnamed
    result columns are named as every kind names them (``named_outputs``)."""
    tree = named_outputs(sqlglot.parse_one(sql, dialect=DIALECT))
    for table in _base_tables(tree):
        if table.name in sources:
            _read_as(table, sources[table.name])
    return tree.sql(dialect=DIALECT)


def _read_as(source: exp.Expression, name: str) -> None:
    """Swap a FROM item (a table reference or a derived table) for table ``name`` under the same alias."""
    source.replace(exp.alias_(exp.to_table(name), source.alias_or_name, table=True))


def derived_views(sql: str, name_of: Callable[[str], str | None],
                  schemas: Mapping[str, Mapping[str, str]] | None = None) -> tuple[str, dict[str, str]]:
    """The aggregating or windowed CTEs and derived tables of ``sql`` (``WITH d AS (SELECT ... GROUP
    BY ...)``, ``FROM (SELECT ..., ROW_NUMBER() OVER (...) ...) AS d``) as views of their own, and
    ``sql`` reading those views.

    An aggregate over an aggregate (TPC-H Q13) or an aggregated CTE (Q15) is then a view over views
    (``lakeivm.upstream``): the inner aggregate is maintained by its own kind, and the outer query
    reads its changes, the signed difference of its results. Neither is ever correlated (a FROM item
    cannot see the query around it), so the split is exact. A split view carries the CTEs kept in
    place that it reads, as a WITH of its own (``_with_ctes``); those the query no longer reads are
    dropped. ``name_of(alias)`` names the view of derived table ``alias`` (None: keep it in place).
    Returns ``(sql, {view name: its SELECT})``; ``({sql}, {})`` when nothing splits off.

    With the tables' ``schemas`` ({table: {column: type}}), a scalar subquery left in a comparison is
    also decorrelated (``_split_subqueries``): the query is qualified first when one of its columns
    is not, so that SQL's scoping says which columns are the outer query's.
    """
    split = _derived_views(sql, name_of, decorrelate=False)
    if schemas is None or not compares_with_subquery(split[0]):
        return split
    return decorrelated_views(sql, name_of, schemas, split)


def decorrelated_views(sql: str, name_of: Callable[[str], str | None], schemas: Mapping[str, Mapping[str, str]],
                       split: tuple[str, dict[str, str]]) -> tuple[str, dict[str, str]]:
    """``derived_views`` with the tables' ``schemas``, given ``split``, its result without them: the
    query qualified (if a column is not), then split with correlated subqueries decorrelated;
    ``split`` if that splits off no more."""
    tree = sqlglot.parse_one(sql, dialect=DIALECT)
    if any(not c.table for c in tree.find_all(exp.Column)):
        try:
            tree = _qualified(tree, schemas, "")
        except (UnsupportedQuery, ValueError, KeyError):
            return split
    decorrelated = _derived_views(tree.sql(dialect=DIALECT), name_of, decorrelate=True)
    return decorrelated if len(decorrelated[1]) > len(split[1]) else split


def compares_with_subquery(sql: str) -> bool:
    """Whether a comparison of ``sql`` still has a subquery operand (``x θ (SELECT ...)``, ``x IN (SELECT ...)``)."""
    try:
        tree = sqlglot.parse_one(sql, dialect=DIALECT)
    except ParseError:
        return False
    return (any(isinstance(side, exp.Subquery) for node in tree.find_all(*_COMPARISONS) for side in (node.this, node.expression))
            or any(node.args.get("query") for node in tree.find_all(exp.In)))


def _derived_views(sql: str, name_of: Callable[[str], str | None], decorrelate: bool) -> tuple[str, dict[str, str]]:
    """``derived_views``, correlated scalar subqueries decorrelated or left in place."""
    try:
        tree = sqlglot.parse_one(sql, dialect=DIALECT)
    except ParseError:
        return sql, {}
    if not isinstance(tree, exp.Select):
        return sql, {}
    views: dict[str, exp.Select] = {}  # each split view's SELECT, detached from the query
    with_ = tree.args.get("with_") or tree.args.get("with")
    kept: dict[str, exp.CTE] = {}  # the CTEs left in place, in order: a split view carries those it reads
    for cte in list(with_.expressions if with_ is not None and not with_.args.get("recursive") else ()):
        name = name_of(cte.alias_or_name) if _splits_off(cte.this) else None
        if name is None:
            kept[cte.alias_or_name] = cte
            continue
        views[name] = _with_ctes(cte.this.copy(), kept)  # as written: the renames below must not reach a table the CTE shadows
        for table in list(tree.find_all(exp.Table)):
            if table.name == cte.alias_or_name and not table.db:
                _read_as(table, name)
        cte.pop()
    for derived in list(tree.find_all(exp.Subquery)):
        if derived.root() is not tree:  # inside a derived table split off already: that view splits it in turn
            continue
        if not isinstance(derived.parent, (exp.From, exp.Join)) or not derived.alias or not _splits_off(derived.this):
            continue
        name = name_of(derived.alias)
        if name is not None:
            views[name] = _with_ctes(derived.this, kept)
            _read_as(derived, name)
    _split_subqueries(tree, views, kept, name_of, decorrelate)
    tree = _split_having(tree, views, name_of) or tree
    _drop_unread_ctes(tree)
    return (tree.sql(dialect=DIALECT), {name: body.sql(dialect=DIALECT) for name, body in views.items()}) if views else (sql, {})


COMPARED = "_lakeivm_compared"  # the groups view's column: what the query's HAVING compares with a subquery


def _split_having(tree: exp.Select, views: dict[str, exp.Select], name_of: Callable[[str], str | None]) -> exp.Select | None:
    """A query whose own ``HAVING`` compares with an uncorrelated global aggregate in a top-level
    ``AND`` term, ``e θ (SELECT agg FROM ...)`` (TPC-H Q11), as the query it becomes; None if it has none.
    ``agg`` is NULL over no rows (``_null_over_no_rows``), so a maintained aggregate without a row
    fails every comparison exactly as the NULL would.

    The query without that term is ``<view>__groups`` (every group, with ``e`` as the column
    ``COMPARED`` unless it is a result column already), the subquery ``<view>__sq<i>`` (one row), and the query reads them:
    ``SELECT g.c, ... FROM groups g CROSS JOIN sq WHERE g.COMPARED θ sq.value``. A change of the
    groups is applied to the rows it touches; a change of the aggregate compares every group again:
    a scan of the groups, not their join. Its ORDER BY and LIMIT move to the query when they name
    its result columns; otherwise it is left whole.
    """
    having = tree.args.get("having")
    names = [e.alias_or_name for e in tree.expressions]
    if having is None or tree.args.get("distinct") or not names or not all(names) or len(set(names)) < len(names) or "*" in names:
        return None
    terms = conjuncts(having.this)
    for term in terms:
        sides = (term.this, term.expression) if isinstance(term, _COMPARISONS) else ()
        subs = [side for side in sides if isinstance(side, exp.Subquery)]
        if len(subs) != 1 or subs[0].args.get("alias"):
            continue
        sub, select = subs[0], subs[0].this
        if (not isinstance(select, exp.Select) or len(select.expressions) != 1 or not _aggregates_alone(select)
                or not _null_over_no_rows(select.expressions[0])
                or select.args.get("group") or select.args.get("with_") or select.find(exp.Subquery)
                or _refers_outside(select) or any(not c.table for c in select.find_all(exp.Column))):
            continue  # unqualified columns could be the outer query's (the query is qualified when the lake's tables are known)
        compared = sides[1] if sides[0] is sub else sides[0]
        if compared.find(exp.Subquery):
            continue
        order, limit = tree.args.get("order"), tree.args.get("limit")
        if order is not None and any(not (isinstance(o.this, exp.Column) and not o.this.table and o.this.name in names)
                                     for o in order.expressions):
            if limit is not None or tree.args.get("offset") is not None:
                return None
            order = None  # without a LIMIT, an order of a view's rows is not kept anyway
        count = 1 + sum(1 for name in views if name.rsplit("__", 1)[-1].startswith("sq"))
        groups_name, sq_name = name_of("groups"), name_of(f"sq{count}")
        if groups_name is None or sq_name is None or groups_name in views or sq_name in views or COMPARED in names:
            return None
        item = _named(select.expressions[0])
        views[sq_name] = select.copy().select(item, append=False)
        groups = tree.copy()
        rest = [t.copy() for t in terms if t is not term]
        groups.set("having", exp.Having(this=exp.and_(*rest)) if rest else None)
        for arg in ("order", "limit", "offset"):
            groups.set(arg, None)
        column = next((name for e, name in zip(tree.expressions, names) if e.unalias() == compared), None)  # Q11: its value
        views[groups_name] = groups if column else groups.select(exp.alias_(compared.copy(), COMPARED))
        comparison = term.copy()
        comparison.set("this" if sides[0] is sub else "expression", exp.column(item.alias_or_name, table=sq_name))
        comparison.set("expression" if sides[0] is sub else "this", exp.column(column or COMPARED, table=groups_name))
        query = (exp.select(*(exp.alias_(exp.column(name, table=groups_name), name) for name in names))
                 .from_(groups_name).join(sq_name, join_type="CROSS").where(comparison))
        if order is not None:
            query.set("order", order.copy())
        if limit is not None:
            query.set("limit", limit.copy())
        return query
    return None


_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)


def _split_subqueries(tree: exp.Select, views: dict[str, exp.Select], kept: Mapping[str, exp.CTE],
                      name_of: Callable[[str], str | None], decorrelate: bool = False) -> None:
    """Aggregating subqueries of ``tree`` as views of their own (``derived_views``):

    - ``x [NOT] IN (SELECT e FROM ... GROUP BY ... [HAVING ...])`` (TPC-H Q18), uncorrelated, reads
      ``SELECT e FROM <view>__in<i>``, a filter of one table that first_order keeps as a semi- or anti-join;
    - ``x θ (SELECT agg FROM ...)``, an uncorrelated global aggregate in a top-level ``AND`` term of
      a ``WHERE`` (one row, so a cross join with it keeps every row's multiplicity; a NULL or no row
      fails the comparison either way), reads ``<view>__sq<i>.value``, the view joined into the
      ``FROM`` of that ``WHERE``'s SELECT (TPC-H Q15, Q22);
    - with ``decorrelate``, the same comparison correlated by equalities ``inner.k = outer.k``
      (top-level ``AND`` terms of its ``WHERE``, outer columns of that SELECT's own tables) with an
      aggregate that is NULL over no rows (SUM, AVG, MIN, MAX and arithmetic on them: not COUNT)
      becomes ``SELECT k, agg ... GROUP BY k``, joined on ``k`` (TPC-H Q2, Q20): the classic
      decorrelation of a scalar subquery (Kim's type JA, without its COUNT bug).

    A subquery that refers to the outer query otherwise cannot be split. A qualified column
    (``o.x``) says so; an unqualified one is read as the subquery's own (SQL looks there first): for
    a scalar subquery only where its tables are views split off here, whose columns are known (an
    unqualified outer column in a scalar subquery over lake tables is the rule in TPC-H, Q17, and is
    left in place unless ``derived_views`` qualified the query); in an aggregating ``IN`` subquery a
    name its tables lack fails the split view's registration, naming the column (qualify an outer
    column to keep the subquery with its query).
    """
    known = {name: _output_names(body) for name, body in views.items()}  # the columns of the views split off so far
    owners = {id(term): select for select in tree.find_all(exp.Select) if select.args.get("where")
              for term in conjuncts(select.args["where"].this)}  # a top-level WHERE term -> its SELECT
    count = 0
    for node in list(tree.find_all(exp.In, *_COMPARISONS)):
        scalar = not isinstance(node, exp.In)
        sub = node.expression if scalar else node.args.get("query")
        select = sub.this if isinstance(sub, exp.Subquery) else None
        if node.root() is not tree or not isinstance(select, exp.Select) or len(select.expressions) != 1:
            continue  # inside a subquery split off already: that view splits it in turn
        tables = list(select.find_all(exp.Table))
        if select.args.get("with_"):
            continue
        if not _aggregates_alone(select):  # a semi-join, unless first_order cannot join it as one: its own view then
            if scalar or not decorrelate or not (select.args.get("joins") or select.find(exp.Subquery)) or _refers_outside(select):
                continue
        elif select.find(exp.Subquery):
            continue
        keys: list[tuple[exp.Column, exp.Column]] = []
        where = select.args.get("where")  # what is left of it once its correlation is taken out
        if scalar:
            owner = owners.get(id(node))
            if owner is None or select.args.get("group"):
                continue
            if _refers_outside(select):
                correlation = _correlation(select, owner) if decorrelate else None
                if correlation is None:
                    continue
                keys, rest = correlation
                where = exp.Where(this=exp.and_(*rest)) if rest else None
            elif not _own_columns(select, tables, known):
                continue
        elif _refers_outside(select):
            continue
        name = name_of(f"{'sq' if scalar else 'in'}{count + 1}")
        if name is None:
            continue
        count += 1
        item = _named(select.expressions[0])
        column = item.alias_or_name
        names = [inner.name if [k.name for k, _ in keys].count(inner.name) == 1 and inner.name != column else f"key_{i + 1}"
                 for i, (inner, _) in enumerate(keys)]
        select.set("expressions", [*(exp.alias_(inner.copy(), n) for (inner, _), n in zip(keys, names)), item])
        if keys:
            select.set("where", where)
            select.set("group", exp.Group(expressions=[inner.copy() for inner, _ in keys]))
        views[name] = _with_ctes(select, kept)
        if scalar:
            sub.replace(exp.column(column, table=name))
            if keys:
                node.replace(exp.and_(node.copy(), *(exp.EQ(this=outer.copy(), expression=exp.column(n, table=name))
                                                     for (_, outer), n in zip(keys, names))))
            owner.set("joins", [*(owner.args.get("joins") or []), exp.Join(this=exp.to_table(name), kind="CROSS")])
        else:
            sub.replace(exp.Subquery(this=exp.select(exp.column(column)).from_(name)))


def _named(item: exp.Expression) -> exp.Expression:
    """A split view's one result column with a name of its own (a Delta column needs one): ``value``
    unless it is a column or aliased."""
    if not isinstance(item, (exp.Alias, exp.Column)) or item.alias_or_name.startswith("_col_"):
        return exp.alias_(item.unalias().copy(), "value")
    return item


def _correlation(select: exp.Select, owner: exp.Select) -> tuple[list[tuple[exp.Column, exp.Column]], list[exp.Expression]] | None:
    """The ``(inner, outer)`` columns of a scalar subquery correlated by equalities only, and the other
    terms of its ``WHERE`` (``_split_subqueries``); None, leaving it alone, if it refers outside in
    any other way, to a table not of ``owner``'s own FROM, or its aggregate is not NULL over no rows."""
    inner = {t.alias_or_name for t in select.find_all(exp.Table)}
    own = {item.alias_or_name for item in (owner.args["from_"].this, *(j.this for j in owner.args.get("joins") or []))}
    outside = lambda column: bool(column.table) and column.table not in inner  # noqa: E731
    if not _null_over_no_rows(select.expressions[0]) or any(outside(c) for c in select.expressions[0].find_all(exp.Column)):
        return None
    pairs, rest = [], []
    for term in conjuncts(select.args.get("where")):
        if not any(outside(c) for c in term.find_all(exp.Column)):
            rest.append(term)
            continue
        sides = (term.this, term.expression) if isinstance(term, exp.EQ) else ()
        if not (len(sides) == 2 and all(isinstance(side, exp.Column) for side in sides) and outside(sides[0]) != outside(sides[1])):
            return None
        inner_column, outer_column = sorted(sides, key=outside)
        if outer_column.table not in own:
            return None
        pairs.append((inner_column, outer_column))
    return pairs, rest


def _null_over_no_rows(item: exp.Expression) -> bool:
    """Whether ``item`` is arithmetic on literals and SUM, AVG, MIN or MAX aggregates: NULL over no
    rows, so that a decorrelated inner join drops exactly the rows its comparison would fail."""
    node = item.unalias()
    if isinstance(node, (exp.Sum, exp.Avg, exp.Min, exp.Max)):
        return not node.find(exp.Window)
    if isinstance(node, exp.Literal):
        return True
    if isinstance(node, (exp.Paren, exp.Neg)):
        return _null_over_no_rows(node.this)
    if isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.Div)):
        return _null_over_no_rows(node.this) and _null_over_no_rows(node.expression) and bool(node.find(exp.AggFunc))
    return False


def _output_names(select: exp.Select) -> set[str] | None:
    """The result columns of a split view's SELECT (None if one has no name of its own)."""
    names = [e.alias_or_name for e in select.expressions]
    return set(names) if names and all(names) and "*" not in names else None


def _refers_outside(select: exp.Select) -> bool:
    """Whether a column of ``select`` is qualified by a table that is not its own (a correlation)."""
    inner = {t.alias_or_name for t in select.find_all(exp.Table)}
    return any(c.table and c.table not in inner for c in select.find_all(exp.Column))


def _own_columns(select: exp.Select, tables: list[exp.Table], known: Mapping[str, set[str] | None]) -> bool:
    """Whether every unqualified column of ``select`` is provably its own: its tables are split views
    whose columns are known, and one of them has it."""
    unqualified = {c.name for c in select.find_all(exp.Column) if not c.table}
    columns = [known.get(t.name) for t in tables]
    return not unqualified or (bool(columns) and all(columns) and unqualified <= set().union(*columns))


def _splits_off(select: exp.Expression) -> bool:
    """A CTE's or derived table's SELECT that is a view of its own (``derived_views``): it aggregates
    (``_aggregates_alone``) or has a window function of its own."""
    return _aggregates_alone(select) or (isinstance(select, exp.Select) and any(
        window.find_ancestor(exp.Subquery) is None for window in select.copy().find_all(exp.Window)))


def _with_ctes(select: exp.Select, ctes: Mapping[str, exp.CTE]) -> exp.Select:
    """``select`` (a split view's body) with a WITH of the CTEs of ``ctes`` that it reads, directly or
    through one another, in their order: the view is its SQL's own CTE with the CTEs it needs."""
    needed: set[str] = set()
    pending: list[exp.Expression] = [select]
    while pending:
        for table in pending.pop().find_all(exp.Table):
            if not table.db and table.name in ctes and table.name not in needed:
                needed.add(table.name)
                pending.append(ctes[table.name].this)
    if not needed:
        return select
    carried = [ctes[name].copy() for name in ctes if name in needed]
    own = select.args.get("with_")
    select.set("with_", exp.With(expressions=[*carried, *(own.expressions if own else [])]))
    return select


def _drop_unread_ctes(tree: exp.Select) -> None:
    """Remove the CTEs of ``tree`` that its query no longer reads (each it read was split off as a view,
    which carries what it reads: ``_with_ctes``), and the WITH once empty."""
    with_ = tree.args.get("with_")
    if with_ is None:
        return
    ctes = {cte.alias_or_name: cte for cte in with_.expressions}
    body = tree.copy()
    body.set("with_", None)
    read = _with_ctes(body, ctes).args.get("with_")
    names = {cte.alias_or_name for cte in read.expressions} if read is not None else set()
    for name, cte in ctes.items():
        if name not in names:
            cte.pop()
    if not with_.expressions:
        with_.pop()


def _aggregates_alone(select: exp.Expression) -> bool:
    """A SELECT that aggregates: a GROUP BY, or an aggregate of its own (judged on a detached copy, so
    the derived table around it does not count as the subquery an aggregate sits in)."""
    return isinstance(select, exp.Select) and (bool(select.args.get("group")) or _aggregates_here(select.copy()))


def referenced_tables(sql: str) -> tuple[str, ...]:
    """The lake tables (or views, for a view over views) the SQL reads, in order of appearance; ()
    if it does not parse (the registry reports that where it checks the SQL)."""
    try:
        tree = sqlglot.parse_one(sql, dialect=DIALECT)
    except ParseError:
        return ()
    return tuple(dict.fromkeys(t.name for t in _base_tables(tree) if not t.db))


def _parse(sql: str, source: str) -> exp.Expression:
    if "${" in sql:  # Spark substitutes ${env:...}, ${system:...}, ${spark:...} before parsing, in literals too
        line = sql.count("\n", 0, sql.index("${")) + 1
        raise UnsupportedQuery(f"{source}: line {line}: ${{...}} is not allowed: Spark replaces it with an "
                               "environment variable, system property or setting; write the value itself.")
    try:
        return sqlglot.parse_one(sql, dialect=DIALECT)
    except ParseError as err:
        raise UnsupportedQuery(f"{source}: SQL does not parse: {err}") from err


def _what(tree: exp.Expression) -> str:
    return "several statements" if isinstance(tree, exp.Block) else tree.key.upper()


def _base_tables(tree: exp.Expression) -> list[exp.Table]:
    """The references to lake tables: every table node but those naming a CTE in scope (approximated
    as: any CTE of the query, since a CTE shadows the table of its name)."""
    ctes = {cte.alias_or_name for cte in tree.find_all(exp.CTE)}
    return [t for t in tree.find_all(exp.Table) if not (t.name in ctes and not t.db)]


def _check_tables(tables, schemas: Mapping[str, Mapping[str, str]], sql: str, source: str) -> None:
    for table in tables:
        if table.name not in schemas:
            raise UnsupportedQuery(
                f"{source}: line {_line(table, sql)}: unknown table {table.name!r}; "
                f"known tables: {sorted(schemas)}. Create it under the lake's tables/ first."
            )


def _qualified(tree: exp.Expression, schemas: Mapping[str, Mapping[str, str]], source: str) -> exp.Expression:
    try:
        return qualify(tree, schema={t: dict(c) for t, c in schemas.items()}, dialect=DIALECT, quote_identifiers=False)
    except OptimizeError as err:
        raise UnsupportedQuery(f"{source}: {err}; check the column names against the tables' schemas") from err


def named_outputs(tree: exp.Expression) -> exp.Expression:
    """``tree`` with each unnamed result column (no ``AS``: ``COUNT(*)``, ``k + 1``) named ``_col_<i>``
    by its position, as sqlglot's qualification names it and so every incremental kind stores it: a
    full recompute then has the incremental kind's columns, which Delta can store (Spark would name the
    first ``count(1)``). Changes ``tree`` in place and returns it.

    >>> named_outputs(sqlglot.parse_one("SELECT k, COUNT(*) FROM t GROUP BY k")).sql()
    'SELECT k, COUNT(*) AS _col_1 FROM t GROUP BY k'
    """
    first = tree
    while isinstance(first, (exp.SetOperation, exp.Subquery)):
        first = first.this
    for i, item in enumerate(list(first.expressions) if isinstance(first, exp.Select) else ()):
        if not isinstance(item, (exp.Alias, exp.Column, exp.Star, exp.Dot)):
            item.replace(exp.alias_(item.copy(), f"_col_{i}"))
    return tree


def state_sql(query: Query, sources: Mapping[str, str], delta_alias: str | None = None) -> str:
    """The SQL computing per-group state over the given sources (alias -> Spark table/view name).

    With ``delta_alias`` that relation is a signed delta carrying ``_lakeivm_m``; the state is then
    the view's delta (classical first-order delta rule, the other relations fixed), grouped also by
    each MIN/MAX/COUNT(DISTINCT) argument (``_lakeivm_v<i>``): one join gives both the state's delta
    (``rolled_up_sql``) and each multiset's (``multiset_of_sql``). The joins start from the delta
    (``_delta_first``), except in a query with a LEFT JOIN: its ON stays where it is.
    """
    if query.branches:
        parts = [state_sql(b, sources, delta_alias) for b in _branches_reading(query, delta_alias)]
        sums = [f"SUM(`{c}`) AS `{c}`" for c in query.additive_columns]
        values = [f"{a.func}(`_lakeivm_s{a.index}`) AS `_lakeivm_s{a.index}`" for a in query.extrema if delta_alias is None]
        keys = [k.name for k in query.group_keys] + ([f"_lakeivm_v{a.index}" for a in query.extrema] if delta_alias else [])
        return _summed(parts, keys, sums + values)
    m = f"{delta_alias}.{MULTIPLICITY}" if delta_alias else "CAST(1 AS BIGINT)"
    tree = _with_sources(_delta_first(query, delta_alias) if delta_alias and not query.outer else query.tree, sources)
    items: list[exp.Expression] = [exp.alias_(sqlglot.parse_one(k.sql, dialect=DIALECT), k.name) for k in query.group_keys]
    items.append(exp.alias_(sqlglot.parse_one(f"COALESCE(SUM({m}), 0)", dialect=DIALECT), COUNT))
    for agg in query.aggregates:
        if agg.sql is None:
            continue
        s = f"COALESCE(SUM(({agg.sql}) * {m}), 0)"
        if agg.func in MULTISET_FUNCS:  # exact on a snapshot; a delta's is recomputed from the multiset
            value = f"COUNT(DISTINCT {agg.sql})" if agg.func == "DISTINCT" else f"{agg.func}({agg.sql})"
            s = value if delta_alias is None else None
        n = f"COALESCE(SUM(CASE WHEN ({agg.sql}) IS NULL THEN 0 ELSE {m} END), 0)"
        if s is not None:
            items.append(exp.alias_(sqlglot.parse_one(s, dialect=DIALECT), f"_lakeivm_s{agg.index}"))
        items.append(exp.alias_(sqlglot.parse_one(n, dialect=DIALECT), f"_lakeivm_n{agg.index}"))
    if delta_alias:
        values = [sqlglot.parse_one(a.sql, dialect=DIALECT) for a in query.extrema]
        items += [exp.alias_(v.copy(), f"_lakeivm_v{a.index}") for v, a in zip(values, query.extrema)]
        if values:
            group = tree.args.get("group")
            tree.set("group", exp.Group(expressions=[*(group.expressions if group else []), *values]))
    tree.set("expressions", items)
    return tree.sql(dialect=DIALECT)


def typed_empty_sql(query: Query, schemas: Mapping[str, tuple[tuple[str, str], ...]]) -> str:
    """``state_sql`` over empty relations of the given column types (``{alias: ((column, Spark SQL
    type), ...)}``, one CTE each): its analysis gives the state's result types without reading a table."""
    names = {alias: f"lakeivm_typed_{i}" for i, alias in enumerate(schemas)}
    tree = sqlglot.parse_one(state_sql(query, names), dialect=DIALECT)
    for alias, columns in schemas.items():
        items = ", ".join(f"CAST(NULL AS {kind}) AS `{column}`" for column, kind in columns)
        tree = tree.with_(names[alias], as_=f"SELECT {items} LIMIT 0", dialect=DIALECT)
    return tree.sql(dialect=DIALECT)


def rolled_up_sql(query: Query, rows: str, quote: Callable[[str], str] = lambda c: f"`{c}`") -> str:
    """A delta ``state_sql``'s rows (``rows``: a table name) summed per group over the MIN/MAX
    arguments they are also grouped by: the view state's delta. ``quote`` writes an identifier
    (Spark's by default; DuckDB's for rows in this process)."""
    keys = [quote(k.name) for k in query.group_keys]
    sums = [f"COALESCE(SUM({quote(c)}), 0) AS {quote(c)}" for c in query.additive_columns]
    group = f" GROUP BY {', '.join(keys)}" if keys else ""
    return f"SELECT {', '.join([*keys, *sums])} FROM {rows}{group}"


def multiset_of_sql(query: Query, rows: str, agg: Aggregate, quote: Callable[[str], str] = lambda c: f"`{c}`") -> str:
    """``multiset_sql``'s delta from a delta ``state_sql``'s rows (``rows``): per group and non-null
    value of ``agg``, the change of its count."""
    keys = [quote(k.name) for k in query.group_keys]
    value, count = quote(f"_lakeivm_v{agg.index}"), quote(COUNT)
    columns = [*keys, f"{value} AS {quote('_lakeivm_v')}", f"SUM({count}) AS {quote('_lakeivm_cnt')}"]
    return f"SELECT {', '.join(columns)} FROM {rows} WHERE {value} IS NOT NULL GROUP BY {', '.join([*keys, value])}"


def multiset_sql(query: Query, sources: Mapping[str, str], agg: Aggregate) -> str:
    """Per group, the multiset of ``agg``'s non-null values: (keys, ``_lakeivm_v``, ``_lakeivm_cnt``).

    The state that keeps MIN/MAX exact under deletes: a group's extremum is the least/greatest value
    whose count is positive. A delta's is ``multiset_of_sql`` of a delta ``state_sql``.
    """
    if query.branches:
        parts = [multiset_sql(b, sources, b.aggregates[agg.index]) for b in query.branches]
        return _summed(parts, [k.name for k in query.group_keys] + ["_lakeivm_v"], ["SUM(`_lakeivm_cnt`) AS `_lakeivm_cnt`"])
    m, tree = "CAST(1 AS BIGINT)", _with_sources(query.tree, sources)
    value = sqlglot.parse_one(agg.sql, dialect=DIALECT)
    items: list[exp.Expression] = [exp.alias_(sqlglot.parse_one(k.sql, dialect=DIALECT), k.name) for k in query.group_keys]
    items += [exp.alias_(value.copy(), "_lakeivm_v"), exp.alias_(sqlglot.parse_one(f"SUM({m})", dialect=DIALECT), "_lakeivm_cnt")]
    tree.set("expressions", items)
    tree.set("group", exp.Group(expressions=[sqlglot.parse_one(k.sql, dialect=DIALECT) for k in query.group_keys] + [value.copy()]))
    not_null = exp.Not(this=exp.Is(this=exp.Paren(this=value.copy()), expression=exp.Null()))
    where = tree.args.get("where")
    tree.set("where", exp.Where(this=exp.and_(where.this, not_null) if where else not_null))
    return tree.sql(dialect=DIALECT)


def _branches_reading(query: Query, alias: str | None) -> list[Query]:
    """The branches of a UNION ALL query that read relation ``alias`` (all of them for None)."""
    return [b for b in query.branches if alias is None or alias in {r.alias for r in b.relations}]


def _summed(parts: list[str], keys: list[str], aggregates: list[str]) -> str:
    """The branches' state rows (``parts``, each a query) added per group."""
    union = " UNION ALL ".join(f"({part})" for part in parts)
    group = f" GROUP BY {', '.join(f'`{k}`' for k in keys)}" if keys else ""
    return f"SELECT {', '.join([*[f'`{k}`' for k in keys], *aggregates])} FROM ({union}) AS _lakeivm_branches{group}"


def recompute_sql(query: Query, sources: Mapping[str, str]) -> str:
    """The view's own SQL over the given sources: the oracle every maintainer is checked against.

    A table read inside a subquery is read from the source of the outer relation of the same table.
    """
    by_table = {r.table: sources[r.alias] for r in query.relations if r.alias in sources}
    return _with_sources(query.tree, sources, by_table).sql(dialect=DIALECT)


def _build(sql: str, tree: exp.Select, source: str, shared: bool = True) -> Query:
    """The Query of one SELECT; ``shared``: aggregates of one expression share their state (a UNION ALL's
    branches may need one state per aggregate call to keep the same state: ``_built_branches``)."""
    relations = _relations(tree)
    joins, filters, residual = _split_conditions(tree)
    group_keys = _group_keys(tree)
    aggregates: dict[tuple, Aggregate] = {}
    if group_keys or _aggregates_here(tree):
        outputs = tuple(_output(item, group_keys, aggregates, sql, source, shared) for item in tree.expressions)
    else:  # a plain select-project-join (a join sample's query)
        outputs = tuple(Output(i.alias_or_name, (i.this if isinstance(i, exp.Alias) else i).sql(DIALECT), False) for i in tree.expressions)
    return Query(
        sql=sql,
        tree=tree,
        relations=relations,
        joins=joins,
        filters=filters,
        residual=residual,
        group_keys=group_keys,
        aggregates=tuple(aggregates.values()),
        outputs=outputs,
        has_subquery=tree.find(exp.Subquery) is not None or _has_nested_select(tree),
        outer=_outer_joins(tree, relations, sql, source),
    )


def conjuncts(condition: exp.Expression | None) -> list[exp.Expression]:
    """The AND terms of a condition (a WHERE, an ON or an expression); [] for None."""
    if condition is None:
        return []
    if isinstance(condition, exp.Where):
        condition = condition.this
    return list(condition.flatten()) if isinstance(condition, exp.And) else [condition]


def _column_equalities(condition: exp.Expression | None) -> list[tuple[exp.EQ, bool]]:
    """The ``a.x = b.y`` AND terms of a condition, each with whether it is NOT IN's NULL-aware form
    ``a.x = b.y OR (a.x = b.y) IS NULL`` (``_as_semi_join``)."""
    found = []
    for term in conjuncts(condition):
        null_aware = isinstance(term, exp.Or) and isinstance(term.this, exp.EQ) and isinstance(term.expression, exp.Is)
        equal = term.this if null_aware else term
        if isinstance(equal, exp.EQ) and all(isinstance(side, exp.Column) for side in (equal.this, equal.expression)):
            found.append((equal, null_aware))
    return found


def _reject_unsafe(tree: exp.Expression, sql: str, source: str) -> None:
    """What no view may hold, recomputed or not: a script, a sample (differs between runs), a parameter."""
    checks = [
        (tree.find(exp.QueryTransform), "TRANSFORM ... USING (a script)", "it runs a program; compute the column upstream"),
        (tree.find(exp.TableSample), "TABLESAMPLE", "a sample differs between runs; keep one with sample_size: k"),
        (tree.find(exp.Parameter, exp.Placeholder), "a query parameter", "write the value in the SQL"),
    ]
    for node, construct, fix in checks:
        if node:
            raise UnsupportedQuery(f"{source}: line {_line(node, sql)}: {construct} is not supported; {fix}.")


def _reject_constructs(tree: exp.Select, sql: str, source: str) -> None:
    """What incremental maintenance does not take (refresh_policy: auto recomputes such a view in full);
    parse_query has already refused what no view may hold (``_reject_unsafe``)."""
    checks = [
        (tree.find(exp.Window), f"a window function ({_window_sql(tree)})",
         "kind window maintains window functions with a PARTITION BY in a SELECT over one table or view"),
        (tree.find(exp.With), "a CTE that is not a plain SELECT (it aggregates, or is read twice)", "inline it as a join"),
        (next((q for q in tree.find_all(exp.Subquery) if isinstance(q.parent, (exp.From, exp.Join))), None),
         "a derived table that is not a plain SELECT (FROM (SELECT ... GROUP BY ...))", "join the tables themselves"),
        (tree.args.get("distinct"), "SELECT DISTINCT", "GROUP BY the columns instead"),
        (tree.args.get("having"), "HAVING", "filter when reading the view"),
        (tree.args.get("limit"), "ORDER BY ... LIMIT (a top-k)", "it is recomputed in full under refresh_policy auto"),
        (tree.find(exp.Union, exp.Intersect, exp.Except), "a set operation", "register one view per branch"),
    ]
    for node, construct, fix in checks:
        if node:
            raise UnsupportedQuery(f"{source}: line {_line(node, sql)}: {construct} is not supported; {fix}.")
    joins = tree.args.get("joins") or []
    for join in joins:
        if _is_left_outer(join) or _semi_or_anti(join) or (_is_full_outer(join) and _full_join_first(joins)):
            continue  # checked by _outer_joins
        if join.side or (join.kind and join.kind.upper() not in ("INNER", "CROSS")):
            what = " ".join(part.upper() for part in (join.side, join.kind) if part)
            raise UnsupportedQuery(
                f"{source}: line {_line(join, sql)}: {what} JOIN is not supported; inner equi-joins, LEFT JOIN, "
                "a RIGHT JOIN that is the query's only join, and a FULL JOIN that is its first, followed by inner "
                "joins only, are maintained incrementally."
            )
    for call in tree.find_all(exp.Func):
        name = spark_name(call, sql)
        if type(call) not in _AGGREGATES and (isinstance(call, exp.AggFunc) or group(name or "") == "agg_funcs"):
            raise UnsupportedQuery(
                f"{source}: line {_line(call, sql)}: aggregate {call.sql(DIALECT)} is not maintained incrementally; "
                "SUM, COUNT, AVG, MIN, MAX, COUNT(DISTINCT e) and STDDEV/VARIANCE (their _SAMP and _POP forms) are "
                "(refresh_policy auto recomputes the view in full)."
            )
        if type(call) in _AGGREGATES and call.find(exp.Distinct) and not _count_distinct(call):
            raise UnsupportedQuery(f"{source}: line {_line(call, sql)}: DISTINCT inside {call.key.upper()} is not supported "
                                   "(COUNT(DISTINCT e) of one expression is).")
        if name in GENERATORS:
            raise UnsupportedQuery(f"{source}: line {_line(call, sql)}: generator {name}() (rows per input row) is not "
                                   "maintained incrementally (refresh_policy auto recomputes the view in full).")
    check_functions(tree, sql, source)


def _window_sql(tree: exp.Select) -> str:
    """The first window function of ``tree`` as written, for a message: ``MAX(v) OVER (...)``."""
    window = tree.find(exp.Window)
    return f"{window.this.sql(DIALECT)} OVER (...)" if window is not None else ""


def _is_left_outer(join: exp.Join) -> bool:
    return (join.side or "").upper() == "LEFT" and (join.kind or "OUTER").upper() == "OUTER"


def _is_full_outer(join: exp.Join) -> bool:
    return (join.side or "").upper() == "FULL" and (join.kind or "OUTER").upper() == "OUTER"


def _full_join_first(joins: list[exp.Join]) -> bool:
    """A FULL JOIN of the FROM table is the first join and every later one is inner: the rest of the
    query is then linear in the FULL JOIN's result, so only a change of its two tables needs the
    recompute on the keys it touches (first_order), and another table's change the delta rule. A
    table joined before it would change which rows it pads."""
    return bool(joins) and _is_full_outer(joins[0]) and all(
        not j.side and (j.kind or "INNER").upper() in ("INNER", "CROSS") for j in joins[1:])


def _semi_or_anti(join: exp.Join) -> str | None:
    """``semi`` for ``[LEFT] SEMI JOIN``, ``anti`` for ``[LEFT] ANTI JOIN``, else None."""
    kind = (join.kind or "").upper()
    return kind.lower() if kind in ("SEMI", "ANTI") and (join.side or "LEFT").upper() == "LEFT" else None


def _semi_joins(tree: exp.Select) -> tuple[str, ...]:
    """Top-level WHERE terms ``[NOT] EXISTS (SELECT ... FROM s WHERE c)`` as ``LEFT SEMI|ANTI JOIN s ON c``,
    and ``x [NOT] IN (SELECT y FROM s WHERE c)`` as ``LEFT SEMI JOIN s ON x = y AND c`` (NOT IN: ``LEFT
    ANTI JOIN s ON (x = y OR (x = y) IS NULL) AND c``, SQL's NULL rule, as Spark plans it): the same rows,
    now joins first_order maintains (``OuterJoin``). Only a subquery over one table with no aggregate,
    DISTINCT, LIMIT or subquery of its own, tied to the query by an equality; others stay (the nested
    kind or a full recompute take them). Returns the notes for explain."""
    where = tree.args.get("where")
    if not where:
        return ()
    taken = {source.alias_or_name for source in [tree.args["from_"].this, *[j.this for j in tree.args.get("joins") or []]]}
    kept, joins, notes = [], [], []
    for term in conjuncts(where):
        join = _as_semi_join(term, taken)
        if join is None:
            kept.append(term)
            continue
        joins.append(join)
        taken.add(join.this.alias_or_name)
        notes.append(f"{'NOT ' if isinstance(term, exp.Not) else ''}{'EXISTS' if term.find(exp.Exists) else 'IN'} (SELECT ... "
                     f"FROM {join.this.name}) maintained as a LEFT {join.kind} JOIN")
    if joins:
        tree.set("joins", [*(tree.args.get("joins") or []), *joins])
        tree.set("where", exp.Where(this=exp.and_(*kept)) if kept else None)
    return tuple(notes)


def _as_semi_join(term: exp.Expression, taken: set[str]) -> exp.Join | None:
    """One WHERE term as a LEFT SEMI/ANTI JOIN (``_semi_joins``), or None if it is not one."""
    negated = isinstance(term, exp.Not)
    node = term.this if negated else term
    on: list[exp.Expression] = []  # the join's ON: NOT/IN's equality, then the subquery's WHERE
    if isinstance(node, exp.Exists):
        select = node.this
    elif isinstance(node, exp.In) and node.args.get("query") is not None and isinstance(node.this, exp.Column):
        select = node.args["query"].unnest() if isinstance(node.args["query"], exp.Subquery) else node.args["query"]
        if not isinstance(select, exp.Select) or len(select.expressions) != 1:
            return None
    else:
        return None
    if not _plain_over_one_table(select):
        return None
    select, table = select.copy(), select.args["from_"].this
    if table.alias_or_name in taken:  # the subquery's own alias shadows the query's: give it one of its own
        alias = next(f"{table.alias_or_name}__s{i}" for i in range(len(taken) + 1) if f"{table.alias_or_name}__s{i}" not in taken)
        for column in select.find_all(exp.Column):
            if column.table == table.alias_or_name:
                column.set("table", exp.to_identifier(alias))
        select.args["from_"].this.set("alias", exp.TableAlias(this=exp.to_identifier(alias)))
    if isinstance(node, exp.In):
        item = select.expressions[0]
        value = item.this if isinstance(item, exp.Alias) else item
        if not isinstance(value, exp.Column):
            return None
        equal = exp.EQ(this=node.this.copy(), expression=value.copy())
        on.append(exp.Or(this=equal, expression=exp.Is(this=exp.Paren(this=equal.copy()), expression=exp.Null()))
                  if negated else equal)
    if select.args.get("where"):
        on.append(select.args["where"].this)
    if not on or not _tied(select.args["from_"].this.alias_or_name, exp.and_(*on)):
        return None  # no equality to the query: not a join first_order can trace a change through
    return exp.Join(this=select.args["from_"].this.copy(), side="LEFT", kind="ANTI" if negated else "SEMI", on=exp.and_(*on))


def _tied(alias: str, condition: exp.Expression) -> bool:
    """Whether a column equality of ``condition`` (``_column_equalities``) ties ``alias`` to another relation."""
    return any(alias in (e.this.table, e.expression.table) and e.this.table != e.expression.table
               for e, _ in _column_equalities(condition))


def _plain_over_one_table(select: exp.Select) -> bool:
    """A SELECT ... FROM one table [WHERE ...] with nothing that makes it more than a filter of that table."""
    return (isinstance(select.args.get("from_") and select.args["from_"].this, exp.Table) and not select.args.get("joins")
            and not any(select.args.get(k) for k in ("group", "having", "distinct", "limit", "order", "qualify"))
            and select.find(exp.AggFunc, exp.Window) is None and not _has_nested_select(select))


def _right_as_left(tree: exp.Select) -> bool:
    """``FROM a RIGHT JOIN b ON c`` as ``FROM b LEFT JOIN a ON c`` (the same rows); only when it is the
    query's one join. False if there is none to turn."""
    joins = tree.args.get("joins") or []
    if len(joins) != 1 or (joins[0].side or "").upper() != "RIGHT" or (joins[0].kind or "OUTER").upper() != "OUTER":
        return False
    first = tree.args["from_"].this
    tree.set("from_", exp.From(this=joins[0].this.copy()))
    joins[0].set("this", first.copy())
    joins[0].set("side", "LEFT")
    return True


def _outer_joins(tree: exp.Select, relations: tuple[Relation, ...], sql: str, source: str) -> tuple[OuterJoin, ...]:
    """The query's LEFT, FULL, SEMI and ANTI JOINs, each of a base table tied by an equality in its ON
    (``_column_equalities``) to a column of a relation that is not itself joined so. A LEFT or FULL
    JOIN's table must occur once in the query."""
    outer: list[OuterJoin] = []
    for join in tree.args.get("joins") or []:
        how = "left" if _is_left_outer(join) else "full" if _is_full_outer(join) else _semi_or_anti(join)
        if how is None:
            continue
        what = f"{how.upper()} JOIN" if how in ("left", "full") else f"LEFT {how.upper()} JOIN (from [NOT] EXISTS or [NOT] IN)"
        where = f"{source}: line {_line(join, sql)}: {what}"
        if not isinstance(join.this, exp.Table) or (how == "full" and not isinstance(tree.args["from_"].this, exp.Table)):
            raise UnsupportedQuery(f"{where} of a derived table is not maintained incrementally; join the table itself")
        padded = join.this.alias_or_name
        tables = [join.this.name, *([tree.args["from_"].this.name] if how == "full" else [])]  # a FULL JOIN pads both
        for table in tables if how in ("left", "full") else ():
            if sum(r.table == table for r in relations) > 1:
                which = "the table" if table == join.this.name else f"its other side, {table},"
                raise UnsupportedQuery(f"{where} {join.this.name}: {which} occurs twice in the query; an outer join's "
                                       "tables are maintained incrementally when each occurs once")
        others = {o.padded for o in outer} | {padded}
        for equal, null_aware in _column_equalities(join.args.get("on")):
            if null_aware and how != "anti":
                continue
            mine, other = (equal.this, equal.expression) if equal.this.table == padded else (equal.expression, equal.this)
            if mine.table == padded and other.table not in others:
                outer.append(OuterJoin(padded, mine.name, other.table, other.name, "not_in" if null_aware else how))
                break
        else:
            raise UnsupportedQuery(f"{where} {padded}: its ON has no equality `{padded}.column = other.column` (as an AND "
                                   "term) with a table that is not itself joined so; add one")
    return tuple(outer)


def _relations(tree: exp.Select) -> tuple[Relation, ...]:
    used: dict[str, list[str]] = {}
    for column in tree.find_all(exp.Column):
        if column.find_ancestor(exp.Subquery) is None:
            used.setdefault(column.table, []).append(column.name)
    relations = []
    for table in tree.find_all(exp.Table):
        if table.find_ancestor(exp.Subquery) is None:
            relations.append(Relation(table.name, table.alias_or_name, tuple(dict.fromkeys(used.get(table.alias_or_name, [])))))
    return tuple(relations)


def _split_conditions(tree: exp.Select) -> tuple[tuple[EquiJoin, ...], dict[str, tuple[str, ...]], tuple[str, ...]]:
    terms = [t for join in tree.args.get("joins") or [] for t in conjuncts(join.args.get("on"))] + conjuncts(tree.args.get("where"))
    joins, filters, residual = [], {}, []
    for c in terms:
        aliases = {col.table for col in c.find_all(exp.Column)}
        if isinstance(c, exp.EQ) and all(isinstance(s, exp.Column) for s in (c.this, c.expression)) and len(aliases) == 2:
            joins.append(EquiJoin(c.this.table, c.this.name, c.expression.table, c.expression.name))
        elif len(aliases) == 1 and c.find(exp.Subquery) is None:
            filters.setdefault(aliases.pop(), []).append(c.sql(DIALECT))
        else:
            residual.append(c.sql(DIALECT))
    return tuple(joins), {a: tuple(f) for a, f in filters.items()}, tuple(residual)


def _group_keys(tree: exp.Select) -> tuple[GroupKey, ...]:
    group = tree.args.get("group")
    if not group:
        return ()
    aliases: dict[str, list[str]] = {}  # an expression selected twice (`v AS b, v AS c`) is two keys, one per name
    for item in tree.expressions:
        if isinstance(item, exp.Alias):
            aliases.setdefault(item.this.sql(DIALECT), []).append(item.alias)
    keys = []
    for i, key in enumerate(group.expressions):
        text = key.sql(DIALECT)
        names = aliases.get(text)
        keys.append(GroupKey(names.pop(0) if names and len(names) > 1 else names[0] if names else f"_lakeivm_g{i}", text))
    return tuple(keys)


def _output(item: exp.Expression, keys: tuple[GroupKey, ...], aggs: dict, sql: str, source: str, shared: bool = True) -> Output:
    name = item.alias_or_name
    body = item.this if isinstance(item, exp.Alias) else item
    by_sql = {k.sql: k.name for k in keys}
    if body.sql(DIALECT) in by_sql:  # its own key where the expression is selected twice (``_group_keys``)
        own = any(k.name == name and k.sql == body.sql(DIALECT) for k in keys)
        return Output(name, name if own else by_sql[body.sql(DIALECT)], True)
    if not body.find(exp.AggFunc):
        raise UnsupportedQuery(
            f"{source}: line {_line(item, sql)}: SELECT item {body.sql(DIALECT)} is neither a GROUP BY key "
            "nor an aggregate; add it to GROUP BY or aggregate it."
        )
    finalized = body.copy().transform(lambda node: _finalize(node, by_sql, aggs, sql, source, shared))
    return Output(name, finalized.sql(DIALECT), False)


def _count_distinct(agg: exp.Expression) -> exp.Expression | None:
    """The expression of ``COUNT(DISTINCT e)``, or None for any other aggregate."""
    if isinstance(agg, exp.Count) and isinstance(agg.this, exp.Distinct) and len(agg.this.expressions) == 1:
        return agg.this.expressions[0]
    return None


def _finalize(node: exp.Expression, by_sql: dict[str, str], aggs: dict, sql: str, source: str, shared: bool = True) -> exp.Expression:
    """``node`` of a SELECT item with its aggregates read from the state (``aggs``: the state kept so
    far, by what it aggregates; ``shared``: one state per aggregated expression, else one per call)."""
    def state(func: str, arg: str | None) -> Aggregate:
        return aggs.setdefault((func, arg) if shared else (func, arg, len(aggs)), Aggregate(func, arg, len(aggs)))

    if (distinct := _count_distinct(node)) is not None:  # the number of values with a positive count in the multiset
        return sqlglot.parse_one(f"COALESCE(_lakeivm_s{state('DISTINCT', distinct.sql(DIALECT)).index}, 0)", dialect=DIALECT)
    if isinstance(node, exp.AggFunc) and _AGGREGATES[type(node)].startswith(("STDDEV", "VAR")):
        value = f"CAST({node.this.sql(DIALECT)} AS DOUBLE)"
        return sqlglot.parse_one(_variance_sql(_AGGREGATES[type(node)], state("SUM", value), state("SUM", f"{value} * {value}")),
                                 dialect=DIALECT)
    if isinstance(node, exp.AggFunc):
        func = _AGGREGATES[type(node)]
        arg = None if isinstance(node.this, exp.Star) else node.this.sql(DIALECT)
        return sqlglot.parse_one(_finalize_sql(func, state(func if func in ("MIN", "MAX") else "SUM", arg)), dialect=DIALECT)
    if not isinstance(node, exp.Column):
        return node
    if node.sql(DIALECT) in by_sql:
        return exp.column(by_sql[node.sql(DIALECT)])
    if node.find_ancestor(exp.AggFunc) is None:
        raise UnsupportedQuery(
            f"{source}: line {_line(node, sql)}: column {node.sql(DIALECT)} is used outside an aggregate "
            "but is not a GROUP BY key."
        )
    return node


def _variance_sql(func: str, values: Aggregate, squares: Aggregate) -> str:
    """SQL's ``VAR_SAMP``/``VAR_POP``/``STDDEV_SAMP``/``STDDEV_POP`` from the state: the sum of the values,
    of their squares and their count, ``(n * Σx² - (Σx)²) / (n (n - 1))`` (``n²`` for the population),
    in doubles as Spark computes them; NULL over no value, and a sample's over one. Clamped at 0: the
    rounding of the difference must not make a constant group's variance negative."""
    s, n, s2 = f"_lakeivm_s{values.index}", f"_lakeivm_n{values.index}", f"_lakeivm_s{squares.index}"
    if func.endswith("SAMP"):
        variance = f"CASE WHEN {n} < 2 THEN NULL ELSE GREATEST({n} * {s2} - {s} * {s}, 0) / ({n} * ({n} - 1)) END"
    else:
        variance = f"CASE WHEN {n} = 0 THEN NULL ELSE GREATEST({n} * {s2} - {s} * {s}, 0) / ({n} * {n}) END"
    return f"SQRT({variance})" if func.startswith("STDDEV") else variance


def _finalize_sql(func: str, agg: Aggregate) -> str:
    """SQL's value of ``func`` from the state: NULL for SUM/AVG/MIN/MAX over no non-null value."""
    s, n = f"_lakeivm_s{agg.index}", f"_lakeivm_n{agg.index}"
    if func == "COUNT":
        return COUNT if agg.sql is None else n
    if func == "AVG":
        return f"CASE WHEN {n} = 0 THEN NULL ELSE {s} / {n} END"
    return f"CASE WHEN {n} = 0 THEN NULL ELSE {s} END"


def _with_sources(tree: exp.Select, sources: Mapping[str, str], inner: Mapping[str, str] | None = None) -> exp.Select:
    def swap(node: exp.Expression) -> exp.Expression:
        if not isinstance(node, exp.Table):
            return node
        if node.find_ancestor(exp.Subquery) is None:
            if node.alias_or_name in sources:
                return exp.alias_(exp.to_table(sources[node.alias_or_name]), node.alias_or_name, table=True)
        elif inner and node.name in inner:
            return exp.alias_(exp.to_table(inner[node.name]), node.alias_or_name, table=True)
        return node

    return tree.copy().transform(swap)


def _delta_first(query: Query, delta_alias: str) -> exp.Select:
    """The query joined starting from the (small) delta, along the join graph, delta broadcast.

    Spark joins in FROM order; starting at the delta keeps every join a lookup from the delta's
    rows instead of a join of two base tables.
    """
    order = [delta_alias]
    aliases = [r.alias for r in query.relations]
    while len(order) < len(aliases):
        linked = [a for a in aliases if a not in order and any(
            {j.left_alias, j.right_alias} == {a, b} for j in query.joins for b in order)]
        order.append(linked[0] if linked else next(a for a in aliases if a not in order))
    tree = query.tree.copy()
    tables = {t.alias_or_name: t for t in tree.find_all(exp.Table) if t.find_ancestor(exp.Subquery) is None}
    conditions = [j.args["on"] for j in tree.args.get("joins") or [] if j.args.get("on")]
    if tree.args.get("where"):
        conditions.append(tree.args["where"].this)
    tree.set("from_", exp.From(this=tables[order[0]].copy()))
    tree.set("joins", [exp.Join(this=tables[a].copy()) for a in order[1:]])
    tree.set("where", exp.Where(this=exp.and_(*conditions)) if conditions else None)
    tree.set("hint", exp.Hint(expressions=[exp.Anonymous(this="BROADCAST", expressions=[exp.to_identifier(delta_alias)])]))
    return tree


def _has_nested_select(tree: exp.Select) -> bool:
    return any(s is not tree for s in tree.find_all(exp.Select))


def _line(node: exp.Expression, sql: str) -> int:
    for ident in node.find_all(exp.Identifier):
        if "line" in ident.meta:
            return int(ident.meta["line"])
    text = node.sql(DIALECT).split("(")[0].strip()
    position = sql.upper().find(text.upper()) if text else -1
    return sql.count("\n", 0, position) + 1 if position >= 0 else 1
