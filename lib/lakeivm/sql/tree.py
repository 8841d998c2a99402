"""Small helpers over sqlglot trees that every step shares: parsing, qualifying, finding tables,
conjuncts and windows, the line a node is on."""
from __future__ import annotations

from collections.abc import Mapping

import sqlglot
from sqlglot import exp
from sqlglot.errors import OptimizeError, ParseError
from sqlglot.optimizer.qualify import qualify

from lakeivm.errors import UnsupportedQuery
from lakeivm.sql.ir import DIALECT


def aggregates_here(tree: exp.Select) -> bool:
    """Whether the SELECT itself aggregates (an aggregate inside a subquery does not count, nor a
    window function such as ``MAX(v) OVER (...)``: it keeps every row)."""
    return any(agg.find_ancestor(exp.Subquery) is None and not is_window_function(agg) for agg in tree.find_all(exp.AggFunc))


def is_window_function(call: exp.Expression) -> bool:
    """Whether ``call`` is the function of a window, ``call OVER (...)`` (``IGNORE NULLS`` between them)."""
    node = call
    while isinstance(node.parent, (exp.IgnoreNulls, exp.RespectNulls)):
        node = node.parent
    return isinstance(node.parent, exp.Window) and node.parent.this is node


def backquoted(name: str) -> str:
    """A column name as a Spark SQL identifier."""
    return "`" + name.replace("`", "``") + "`"


def has_window(sql: str) -> bool:
    """Whether ``sql`` is what the window kind maintains, or none does (``windowed_select``): its top
    SELECT computes a window function itself (not only in a subquery or CTE), or only filters one that
    does. False for SQL that does not parse (``parse_query`` says why)."""
    try:
        tree = sqlglot.parse_one(sql, dialect=DIALECT)
    except ParseError:
        return False
    return windowed_select(tree) is not None


def windowed_select(tree: exp.Expression) -> exp.Select | None:
    """The SELECT whose window functions the window kind maintains: ``tree`` where it computes windows
    itself, or the one relation a "top rows per partition" query filters -- ``SELECT k, ts FROM
    (SELECT k, ts, ROW_NUMBER() OVER (PARTITION BY k ORDER BY ts DESC) AS rn FROM t) AS d WHERE rn =
    1``, or that SELECT as the query's only CTE -- over one table, every window partitioned, a partition
    column in the result. A row filter and projection of a partition's rows keep it a partition's
    rows, so the query is kept whole (``split.derived_views`` does not split it off). None: no such
    SELECT."""
    if not isinstance(tree, exp.Select):
        return None
    if _computes_windows(tree):
        return tree
    inner = _filtered_relation(tree)
    if (inner is None or not _computes_windows(inner) or inner.args.get("joins") or inner.args.get("with_")
            or not isinstance(inner.args["from_"].this, exp.Table) or aggregates_alone(inner)
            or not all(w.args.get("partition_by") for w in inner.find_all(exp.Window))):
        return None
    passed = result_columns(inner, {name: name for name in _partition_names(inner)}).values()
    return inner if result_columns(tree, {name.lower(): name for name in passed}) else None


def _partition_names(select: exp.Select) -> set[str]:
    """The plain columns every window of ``select`` is partitioned by (lower case)."""
    names = [{e.name.lower() for e in w.args["partition_by"] if isinstance(e, exp.Column)} for w in select.find_all(exp.Window)]
    return set.intersection(*names) if names else set()


def plain_column(expression: exp.Expression, columns: dict[str, str]) -> str | None:
    """The relation's column ``expression`` is, as its schema spells it, or None for any other expression."""
    if isinstance(expression, exp.Column) and expression.name.lower() in columns:
        return columns[expression.name.lower()]
    return None


def result_columns(tree: exp.Select, columns: dict[str, str]) -> dict[str, str]:
    """{relation column: the result column that is that column unchanged}, the first one where several are."""
    found: dict[str, str] = {}
    for item in tree.expressions:
        if isinstance(item, exp.Star) or (isinstance(item, exp.Column) and isinstance(item.this, exp.Star)):
            for column in columns.values():
                found.setdefault(column, column)
            continue
        column = plain_column(item.this if isinstance(item, exp.Alias) else item, columns)
        if column is not None:
            found.setdefault(column, item.alias_or_name)
    return found


def _computes_windows(select: exp.Select) -> bool:
    return any(w.find_ancestor(exp.Select) is select for w in select.find_all(exp.Window))


def _filtered_relation(tree: exp.Select) -> exp.Select | None:
    """The SELECT ``tree`` only filters and projects: its one FROM item, a derived table or the WITH's
    only CTE; None where ``tree`` joins, aggregates, orders, limits or has another subquery."""
    from_, with_ = tree.args.get("from_"), tree.args.get("with_")
    if from_ is None or any(tree.args.get(a) for a in ("joins", "group", "having", "qualify", "order", "limit", "offset")):
        return None
    if isinstance(from_.this, exp.Subquery) and with_ is None:
        inner = from_.this.this
    elif (isinstance(from_.this, exp.Table) and not from_.this.db and with_ is not None and not with_.args.get("recursive")
          and len(with_.expressions) == 1 and with_.expressions[0].alias_or_name == from_.this.name):
        inner = with_.expressions[0].this
    else:
        return None
    if not isinstance(inner, exp.Select) or aggregates_here(tree):
        return None
    others = [s for s in tree.find_all(exp.Select) if s is not tree and s is not inner and s.find_ancestor(exp.Select) is not inner]
    return None if others else inner


def aggregates_alone(select: exp.Expression) -> bool:
    """A SELECT that aggregates: a GROUP BY, or an aggregate of its own (judged on a detached copy, so
    the derived table around it does not count as the subquery an aggregate sits in)."""
    return isinstance(select, exp.Select) and (bool(select.args.get("group")) or aggregates_here(select.copy()))


def referenced_tables(sql: str) -> tuple[str, ...]:
    """The lake tables (or views, for a view over views) the SQL reads, in order of appearance; ()
    if it does not parse (the registry reports that where it checks the SQL)."""
    try:
        tree = sqlglot.parse_one(sql, dialect=DIALECT)
    except ParseError:
        return ()
    return tuple(dict.fromkeys(t.name for t in base_tables(tree) if not t.db))


def parse_sql(sql: str, source: str) -> exp.Expression:
    if "${" in sql:  # Spark substitutes ${env:...}, ${system:...}, ${spark:...} before parsing, in literals too
        line = sql.count("\n", 0, sql.index("${")) + 1
        raise UnsupportedQuery(f"{source}: line {line}: ${{...}} is not allowed: Spark replaces it with an "
                               "environment variable, system property or setting; write the value itself.")
    try:
        return inline_named_windows(sqlglot.parse_one(sql, dialect=DIALECT))
    except ParseError as err:
        raise UnsupportedQuery(f"{source}: SQL does not parse: {err}") from err


def inline_named_windows(tree: exp.Expression) -> exp.Expression:
    """``tree`` with every ``OVER w`` written out from its ``WINDOW w AS (...)`` clause (its own frame
    or ORDER BY kept, as Spark resolves them), and the WINDOW clauses dropped: what the checks and
    the window kind read is then each window's own PARTITION BY, ORDER BY and frame."""
    for select in list(tree.find_all(exp.Select)):
        named = {window.this.name: window for window in select.args.get("windows") or []}
        if not named:
            continue
        for window in select.find_all(exp.Window):
            reference = window.args.get("alias")
            if window.parent is select or window.find_ancestor(exp.Select) is not select or reference is None \
                    or reference.name not in named:
                continue
            base = named[reference.name]
            window.set("alias", None)
            for part in ("partition_by", "order", "spec"):
                if not window.args.get(part) and base.args.get(part):
                    window.set(part, base.args[part].copy() if isinstance(base.args[part], exp.Expression)
                               else [node.copy() for node in base.args[part]])
        select.set("windows", None)
    return tree


def statement_kind(tree: exp.Expression) -> str:
    return "several statements" if isinstance(tree, exp.Block) else tree.key.upper()


def base_tables(tree: exp.Expression) -> list[exp.Table]:
    """The references to lake tables: every table node but those naming a CTE in scope (approximated
    as: any CTE of the query, since a CTE shadows the table of its name)."""
    ctes = {cte.alias_or_name for cte in tree.find_all(exp.CTE)}
    return [t for t in tree.find_all(exp.Table) if not (t.name in ctes and not t.db)]


def qualified(tree: exp.Expression, schemas: Mapping[str, Mapping[str, str]], source: str) -> exp.Expression:
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


def conjuncts(condition: exp.Expression | None) -> list[exp.Expression]:
    """The AND terms of a condition (a WHERE, an ON or an expression); [] for None."""
    if condition is None:
        return []
    if isinstance(condition, exp.Where):
        condition = condition.this
    return list(condition.flatten()) if isinstance(condition, exp.And) else [condition]


def column_equalities(condition: exp.Expression | None) -> list[tuple[exp.EQ, bool]]:
    """The ``a.x = b.y`` AND terms of a condition, each with whether it is NOT IN's NULL-aware form
    ``a.x = b.y OR (a.x = b.y) IS NULL`` (``_as_semi_join``)."""
    found = []
    for term in conjuncts(condition):
        null_aware = isinstance(term, exp.Or) and isinstance(term.this, exp.EQ) and isinstance(term.expression, exp.Is)
        equal = term.this if null_aware else term
        if isinstance(equal, exp.EQ) and all(isinstance(side, exp.Column) for side in (equal.this, equal.expression)):
            found.append((equal, null_aware))
    return found


def has_nested_select(tree: exp.Select) -> bool:
    return any(s is not tree for s in tree.find_all(exp.Select))


def line_of(node: exp.Expression, sql: str) -> int:
    for ident in node.find_all(exp.Identifier):
        if "line" in ident.meta:
            return int(ident.meta["line"])
    text = node.sql(DIALECT).split("(")[0].strip()
    position = sql.upper().find(text.upper()) if text else -1
    return sql.count("\n", 0, position) + 1 if position >= 0 else 1
