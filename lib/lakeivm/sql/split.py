"""Views split off a view's SQL: aggregating CTEs and derived tables, decorrelated subqueries and
HAVING comparisons become views of their own (``<view>__<name>``) that the view reads."""
from __future__ import annotations

from collections.abc import Callable, Mapping

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from lakeivm.errors import UnsupportedQuery
from lakeivm.sql.ir import DIALECT
from lakeivm.sql.tree import aggregates_alone, base_tables, conjuncts, named_outputs, qualified, windowed_select


def as_written(sql: str, sources: Mapping[str, str]) -> str:
    """The view's SQL as its spec has it, every reference to a base table (``{table: Spark table or
    view}``) at any depth swapped for its source; a CTE of the same name is left alone. The audit's
    oracle: what Spark computes from the user's own SQL, not from lakeivm's reading of it. Its unnamed
    result columns are named as every kind names them (``named_outputs``)."""
    tree = named_outputs(sqlglot.parse_one(sql, dialect=DIALECT))
    for table in base_tables(tree):
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
    (``lakeivm.sources.upstream``): the inner aggregate is maintained by its own kind, and the outer query
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
            tree = qualified(tree, schemas, "")
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
    if not isinstance(tree, exp.Select) or windowed_select(tree) not in (None, tree):  # top rows per partition: kept whole
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
        if (not isinstance(select, exp.Select) or len(select.expressions) != 1 or not aggregates_alone(select)
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
        if not aggregates_alone(select):  # a semi-join, unless first_order cannot join it as one: its own view then
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
                rest += _looked_up(owner, keys, node)
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


def _looked_up(owner: exp.Select, keys: list[tuple[exp.Column, exp.Column]], compared: exp.Expression) -> list[exp.Expression]:
    """For each correlation key whose outer table ``owner``'s WHERE filters by terms of that table's
    own columns alone (no subquery), ``inner IN (SELECT outer FROM table WHERE those terms)``: the
    split view keeps only the keys the query can look up, a semi-join reduction ("magic sets"; TPC-H
    Q2's minimum cost per part, of the parts of size 15 and type %BRASS only: ~0.4 % of them); and
    for a term ``outer IN (uncorrelated subquery)``, ``inner IN`` the same (Q20's forest% parts). Exact:
    every row of the query that meets the split view passes those terms (``compared``: the comparison
    being split, left out)."""
    items = {item.alias_or_name: item for item in (owner.args["from_"].this, *(j.this for j in owner.args.get("joins") or []))}
    terms = [t for t in conjuncts(owner.args["where"].this) if t is not compared]
    looked_up = []
    for inner, outer in keys:
        table = items.get(outer.table)
        filters = [t for t in terms if _of_table_alone(t, outer.table)]
        if isinstance(table, exp.Table) and filters:
            source = exp.select(outer.copy()).from_(table.copy()).where(exp.and_(*(f.copy() for f in filters)))
            looked_up.append(exp.In(this=inner.copy(), query=exp.Subquery(this=source)))
        for term in terms:  # the outer key IN an uncorrelated subquery (TPC-H Q20's parts named forest%): the inner key too
            query = term.args.get("query") if isinstance(term, exp.In) else None
            if (query is not None and isinstance(query.this, exp.Select) and isinstance(term.this, exp.Column)
                    and (term.this.table, term.this.name) == (outer.table, outer.name) and not _refers_outside(query.this)
                    and not any(not c.table for c in query.this.find_all(exp.Column))):
                looked_up.append(exp.In(this=inner.copy(), query=query.copy()))
    return looked_up


def _of_table_alone(term: exp.Expression, alias: str) -> bool:
    """Whether ``term`` reads columns of table ``alias`` only, and no subquery or non-deterministic function."""
    columns = list(term.find_all(exp.Column))
    return (bool(columns) and all(c.table == alias for c in columns)
            and term.find(exp.Subquery, exp.Select, exp.Rand, exp.Randn, exp.Uuid) is None)


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
    (``aggregates_alone``) or has a window function of its own."""
    return aggregates_alone(select) or (isinstance(select, exp.Select) and any(
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
