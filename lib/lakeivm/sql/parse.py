"""SQL -> the query IR: parse a view's query, check what no kind maintains, build the IR."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import sqlglot
from sqlglot import exp
from sqlglot.errors import OptimizeError
from sqlglot.optimizer.annotate_types import annotate_types
from sqlglot.optimizer.merge_subqueries import merge_subqueries

from lakeivm.errors import UnsupportedQuery
from lakeivm.sql.functions import GENERATORS, check_functions, group, spark_name
from lakeivm.sql.ir import AGGREGATES, ALIASES, COUNT, DIALECT, HAVING, Aggregate, EquiJoin, GroupKey, OuterJoin, Output, Query, Relation
from lakeivm.sql.tree import aggregates_here, base_tables, column_equalities, conjuncts, has_nested_select, line_of, named_outputs, parse_sql, qualified, statement_kind


def parse_query(sql: str, schemas: Mapping[str, Mapping[str, str]], source: str = "<sql>") -> Query:
    """Parse and qualify ``sql`` against table schemas ({table: {column: type}}) into a Query.

    Raises UnsupportedQuery naming the source, line and construct for anything outside
    select-project-join + GROUP BY + SUM/COUNT/AVG/MIN/MAX, or calling a function outside the vetted
    deterministic built-ins (``lakeivm.sql.functions``). Subqueries are recorded, not rejected: the
    classifier decides whether the nested kind takes them.
    """
    tree = _canonical_aggregates(parse_sql(sql, source))
    if isinstance(tree, exp.Union) and _union_all_parts(tree) is not None:  # rows of a UNION ALL (UNION: DISTINCT of them)
        distinct = bool(tree.args.get("distinct"))
        tree = exp.select("*").from_(_as_union_all(tree).subquery("_lakeivm_union"))
        tree.set("distinct", exp.Distinct() if distinct else None)
    if not isinstance(tree, exp.Select):
        raise UnsupportedQuery(f"{source}: line {line_of(tree, sql)}: {statement_kind(tree)} is not maintained incrementally; "
                               "an incremental view is one SELECT or a UNION [ALL] of SELECTs (refresh_policy: auto "
                               "recomputes it in full)")
    _reject_unsafe(tree, sql, source)
    _check_tables(base_tables(tree), schemas, sql, source)
    notes = ()
    if tree.args.get("order") and not tree.args.get("limit"):  # a stored view has no order: the ORDER BY changes nothing
        tree.set("order", None)
        notes = ("ORDER BY ignored: a view's rows have no order; sort when reading it",)
    top, limit = top_k(tree, sql, source)
    if limit is not None:
        notes = (f"ORDER BY ... LIMIT {limit}: every group is maintained; reading the view takes the first {limit}",)
    if _having_as_column(tree):
        notes = (*notes, "HAVING: every group is maintained, with whether it satisfies HAVING; reading the view keeps those that do")
    # A derived table or CTE that is a plain SELECT (TPC-H Q7-Q9) is merged into the query (sqlglot's optimizer).
    tree = _typed(merge_subqueries(qualified(tree, schemas, source)), schemas)
    if _right_as_left(tree):
        notes = (*notes, "RIGHT JOIN maintained as the LEFT JOIN with its two tables swapped")
    notes = (*notes, *_semi_joins(tree))
    implicit = None
    if tree.args.get("distinct") and not tree.args.get("group") and not aggregates_here(tree):
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
    """``tree`` with Spark's other names of the aggregates maintained (``std``, ``mean``: ``ALIASES``) as
    sqlglot's nodes of the aggregates they are."""
    return tree.transform(lambda node: ALIASES[node.name.lower()](this=node.expressions[0].copy())
                          if isinstance(node, exp.Anonymous) and node.name.lower() in ALIASES and len(node.expressions) == 1
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
    where = f"{source}: line {line_of(derived, sql)}: UNION"
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


def top_k(tree: exp.Select, sql: str, source: str) -> tuple[tuple[tuple[str, bool, bool], ...], int | None]:
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
            raise UnsupportedQuery(f"{source}: line {line_of(ordered, sql)}: ORDER BY {term.sql(DIALECT)} ... LIMIT orders by an "
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


def parse_full(sql: str, schemas: Mapping[str, Mapping[str, str]], source: str = "<sql>") -> Query:
    """Parse any one Spark SQL query over lake tables for the full kind, which recomputes it on the
    pinned snapshots: outer joins, set operations, CTEs, window functions, DISTINCT, HAVING, ORDER BY
    ... LIMIT. Refused, naming the line: anything but one query, unknown tables or columns, functions
    a view may not call (``lakeivm.sql.functions``), ``${...}``, scripts, samples, parameters, and a
    result column named twice. An unnamed result column is named ``_col_<i>`` (``named_outputs``).

    The Query's relations are its base tables, one each (alias = table name: ``as_written`` swaps
    every reference to a table, at any depth, for that table's snapshot).
    """
    tree = parse_sql(sql, source)
    if not isinstance(tree, exp.Query):
        raise UnsupportedQuery(f"{source}: line {line_of(tree, sql)}: a view is one query (SELECT, set operations, WITH), "
                               f"got {statement_kind(tree)}")
    _reject_unsafe(tree, sql, source)
    check_functions(tree, sql, source)
    for query in tree.find_all(exp.Query):
        if query.args.get("limit") and not query.args.get("order"):
            raise UnsupportedQuery(f"{source}: line {line_of(query.args['limit'], sql)}: LIMIT without ORDER BY keeps arbitrary rows, "
                                   "so the view would differ from its SQL between runs; add an ORDER BY that decides every tie")
    tables = base_tables(tree)
    _check_tables(tables, schemas, sql, source)
    names = qualified(named_outputs(tree.copy()), schemas, source).named_selects  # validates the columns; the SQL runs as written
    _check_distinct_names(names, source)
    used = tuple(dict.fromkeys(t.name for t in tables))
    return Query(sql=sql, tree=tree, relations=tuple(Relation(t, t, tuple(schemas[t])) for t in used), joins=(), filters={},
                 residual=(), group_keys=(), aggregates=(), outputs=tuple(Output(n, n, False) for n in names),
                 has_subquery=has_nested_select(tree))


def _check_tables(tables, schemas: Mapping[str, Mapping[str, str]], sql: str, source: str) -> None:
    for table in tables:
        if table.name not in schemas:
            raise UnsupportedQuery(
                f"{source}: line {line_of(table, sql)}: unknown table {table.name!r}; "
                f"known tables: {sorted(schemas)}. Create it under the lake's tables/ first."
            )


def _build(sql: str, tree: exp.Select, source: str, shared: bool = True) -> Query:
    """The Query of one SELECT; ``shared``: aggregates of one expression share their state (a UNION ALL's
    branches may need one state per aggregate call to keep the same state: ``_built_branches``)."""
    relations = _relations(tree)
    joins, filters, residual = _split_conditions(tree)
    group_keys = _group_keys(tree)
    aggregates: dict[tuple, Aggregate] = {}
    if group_keys or aggregates_here(tree):
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
        has_subquery=tree.find(exp.Subquery) is not None or has_nested_select(tree),
        outer=_outer_joins(tree, relations, sql, source),
    )


def _reject_unsafe(tree: exp.Expression, sql: str, source: str) -> None:
    """What no view may hold, recomputed or not: a script, a sample (differs between runs), a parameter."""
    checks = [
        (tree.find(exp.QueryTransform), "TRANSFORM ... USING (a script)", "it runs a program; compute the column upstream"),
        (tree.find(exp.TableSample), "TABLESAMPLE", "a sample differs between runs; keep one with sample_size: k"),
        (tree.find(exp.Parameter, exp.Placeholder), "a query parameter", "write the value in the SQL"),
    ]
    for node, construct, fix in checks:
        if node:
            raise UnsupportedQuery(f"{source}: line {line_of(node, sql)}: {construct} is not supported; {fix}.")


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
            raise UnsupportedQuery(f"{source}: line {line_of(node, sql)}: {construct} is not supported; {fix}.")
    joins = tree.args.get("joins") or []
    for join in joins:
        if _is_left_outer(join) or _semi_or_anti(join) or (_is_full_outer(join) and _full_join_first(joins)):
            continue  # checked by _outer_joins
        if join.side or (join.kind and join.kind.upper() not in ("INNER", "CROSS")):
            what = " ".join(part.upper() for part in (join.side, join.kind) if part)
            raise UnsupportedQuery(
                f"{source}: line {line_of(join, sql)}: {what} JOIN is not supported; inner equi-joins, LEFT JOIN, "
                "a RIGHT JOIN that is the query's only join, and a FULL JOIN that is its first, followed by inner "
                "joins only, are maintained incrementally."
            )
    for call in tree.find_all(exp.Func):
        name = spark_name(call, sql)
        if type(call) not in AGGREGATES and (isinstance(call, exp.AggFunc) or group(name or "") == "agg_funcs"):
            raise UnsupportedQuery(
                f"{source}: line {line_of(call, sql)}: aggregate {call.sql(DIALECT)} is not maintained incrementally; "
                "SUM, COUNT, AVG, MIN, MAX, COUNT(DISTINCT e) and STDDEV/VARIANCE (their _SAMP and _POP forms) are "
                "(refresh_policy auto recomputes the view in full)."
            )
        if type(call) in AGGREGATES and call.find(exp.Distinct) and not _count_distinct(call):
            raise UnsupportedQuery(f"{source}: line {line_of(call, sql)}: DISTINCT inside {call.key.upper()} is not supported "
                                   "(COUNT(DISTINCT e) of one expression is).")
        if name in GENERATORS:
            raise UnsupportedQuery(f"{source}: line {line_of(call, sql)}: generator {name}() (rows per input row) is not "
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
    """Whether a column equality of ``condition`` (``column_equalities``) ties ``alias`` to another relation."""
    return any(alias in (e.this.table, e.expression.table) and e.this.table != e.expression.table
               for e, _ in column_equalities(condition))


def _plain_over_one_table(select: exp.Select) -> bool:
    """A SELECT ... FROM one table [WHERE ...] with nothing that makes it more than a filter of that table."""
    return (isinstance(select.args.get("from_") and select.args["from_"].this, exp.Table) and not select.args.get("joins")
            and not any(select.args.get(k) for k in ("group", "having", "distinct", "limit", "order", "qualify"))
            and select.find(exp.AggFunc, exp.Window) is None and not has_nested_select(select))


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
    (``column_equalities``) to a column of a relation that is not itself joined so. A LEFT or FULL
    JOIN's table must occur once in the query."""
    outer: list[OuterJoin] = []
    for join in tree.args.get("joins") or []:
        how = "left" if _is_left_outer(join) else "full" if _is_full_outer(join) else _semi_or_anti(join)
        if how is None:
            continue
        what = f"{how.upper()} JOIN" if how in ("left", "full") else f"LEFT {how.upper()} JOIN (from [NOT] EXISTS or [NOT] IN)"
        where = f"{source}: line {line_of(join, sql)}: {what}"
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
        for equal, null_aware in column_equalities(join.args.get("on")):
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
            f"{source}: line {line_of(item, sql)}: SELECT item {body.sql(DIALECT)} is neither a GROUP BY key "
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
    if isinstance(node, exp.AggFunc) and AGGREGATES[type(node)].startswith(("STDDEV", "VAR")):
        value, scale = _variance_value(node.this)
        return sqlglot.parse_one(_variance_sql(AGGREGATES[type(node)], state("SUM", value), state("SUM", f"{value} * {value}"), scale),
                                 dialect=DIALECT)
    if isinstance(node, exp.AggFunc):
        func = AGGREGATES[type(node)]
        arg = None if isinstance(node.this, exp.Star) else node.this.sql(DIALECT)
        return sqlglot.parse_one(_finalize_sql(func, state(func if func in ("MIN", "MAX") else "SUM", arg)), dialect=DIALECT)
    if not isinstance(node, exp.Column):
        return node
    if node.sql(DIALECT) in by_sql:
        return exp.column(by_sql[node.sql(DIALECT)])
    if node.find_ancestor(exp.AggFunc) is None:
        raise UnsupportedQuery(
            f"{source}: line {line_of(node, sql)}: column {node.sql(DIALECT)} is used outside an aggregate "
            "but is not a GROUP BY key."
        )
    return node


def _typed(tree: exp.Expression, schemas: Mapping[str, Mapping[str, str]]) -> exp.Expression:
    """``tree`` with each expression's type where sqlglot infers it from the tables' columns (what a
    variance's state reads, ``_variance_value``); an expression it cannot type keeps none."""
    try:
        annotate_types(tree, schema={table: dict(columns) for table, columns in schemas.items()}, dialect=DIALECT)
    except (OptimizeError, KeyError, ValueError, TypeError):  # left untyped: the variance state in doubles
        pass
    return tree


_EXACT_INTEGERS = (exp.DataType.Type.TINYINT, exp.DataType.Type.SMALLINT, exp.DataType.Type.INT)


def _variance_value(value: exp.Expression) -> tuple[str, int]:
    """What a variance's state sums for ``value``, and the power of ten it scales the value by: the
    value itself as ``DECIMAL(38, s)`` where it is an INT or a DECIMAL of at most 15 digits and scale
    3 (its square, their sums and ``n·Σx² − (Σx)²`` then hold every digit: a group whose values are
    close together loses none of its variance to cancellation); a wider DECIMAL of scale s <= 6 (a
    SUM of money, DECIMAL(20, 2)) as the DOUBLE of ``value * 10^s``, a whole number, so that its
    square and their sums stay exact up to 2^53 and beyond round rather than overflow; else a DOUBLE,
    as Spark computes the aggregate. ``value.type`` is sqlglot's inference from the tables' columns
    (``_typed``)."""
    kind, text = value.type, value.sql(DIALECT)
    if kind is not None and kind.is_type(*_EXACT_INTEGERS):
        return f"CAST({text} AS DECIMAL(38, 0))", 0
    if kind is not None and kind.is_type(exp.DataType.Type.DECIMAL):
        precision, scale = ([int(param.this.name) for param in kind.expressions] + [10, 0])[:2] if kind.expressions else (10, 0)
        if precision <= 15 and scale <= 3:
            return f"CAST({text} AS DECIMAL(38, {scale}))", 0
        if 0 < scale <= 6:
            return f"CAST({text} * {10 ** scale} AS DOUBLE)", scale
    return f"CAST({text} AS DOUBLE)", 0


def _variance_sql(func: str, values: Aggregate, squares: Aggregate, scale: int = 0) -> str:
    """SQL's ``VAR_SAMP``/``VAR_POP``/``STDDEV_SAMP``/``STDDEV_POP`` from the state: the sum of the values,
    of their squares and their count, ``(n * Σx² - (Σx)²) / (n (n - 1))`` (``n²`` for the population),
    the difference exact where the state is (``_variance_value``), then in doubles, divided by
    ``10^(2 scale)`` where the state summed the values times ``10^scale``; NULL over no value, and a
    sample's over one. Clamped at 0: the rounding of a difference of doubles must not make a
    constant group's variance negative."""
    s, n, s2 = f"_lakeivm_s{values.index}", f"_lakeivm_n{values.index}", f"_lakeivm_s{squares.index}"
    difference = f"CAST(GREATEST({n} * {s2} - {s} * {s}, 0) AS DOUBLE)" + (f" / 1E{2 * scale}" if scale else "")
    if func.endswith("SAMP"):
        variance = f"CASE WHEN {n} < 2 THEN NULL ELSE {difference} / ({n} * ({n} - 1)) END"
    else:
        variance = f"CASE WHEN {n} = 0 THEN NULL ELSE {difference} / ({n} * {n}) END"
    return f"SQRT({variance})" if func.startswith("STDDEV") else variance


def _finalize_sql(func: str, agg: Aggregate) -> str:
    """SQL's value of ``func`` from the state: NULL for SUM/AVG/MIN/MAX over no non-null value."""
    s, n = f"_lakeivm_s{agg.index}", f"_lakeivm_n{agg.index}"
    if func == "COUNT":
        return COUNT if agg.sql is None else n
    if func == "AVG":
        return f"CASE WHEN {n} = 0 THEN NULL ELSE {s} / {n} END"
    return f"CASE WHEN {n} = 0 THEN NULL ELSE {s} END"
