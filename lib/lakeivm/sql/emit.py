"""The SQL every maintainer runs on Spark, emitted from the IR: a query's per-group state over
given sources (or a delta first), its multisets, its recompute, a typed empty result."""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import sqlglot
from sqlglot import exp

from lakeivm.columns import MULTIPLICITY
from lakeivm.sql.functions import group
from lakeivm.sql.ir import COUNT, DIALECT, MULTISET_FUNCS, Aggregate, Query
from lakeivm.sql.tree import conjuncts


def state_sql(query: Query, sources: Mapping[str, str], delta_alias: str | None = None, sizes: Sizes | None = None) -> str:
    """The SQL computing per-group state over the given sources (alias -> Spark table/view name).

    With ``delta_alias`` that relation is a signed delta carrying ``_lakeivm_m``; the state is then
    the view's delta (classical first-order delta rule, the other relations fixed), grouped also by
    each MIN/MAX/COUNT(DISTINCT) argument (``_lakeivm_v<i>``): one join gives both the state's delta
    (``rolled_up_sql``) and each multiset's (``multiset_of_sql``). The joins start from the delta
    (``_delta_first``; ``sizes`` by ``join_order``), except in a query with a LEFT JOIN: its ON stays
    where it is.
    """
    if query.branches:
        parts = [state_sql(b, sources, delta_alias, sizes) for b in _branches_reading(query, delta_alias)]
        sums = [f"SUM(`{c}`) AS `{c}`" for c in query.additive_columns]
        values = [f"{a.func}(`_lakeivm_s{a.index}`) AS `_lakeivm_s{a.index}`" for a in query.extrema if delta_alias is None]
        keys = [k.name for k in query.group_keys] + ([f"_lakeivm_v{a.index}" for a in query.extrema] if delta_alias else [])
        return _summed(parts, keys, sums + values)
    m = f"{delta_alias}.{MULTIPLICITY}" if delta_alias else "CAST(1 AS BIGINT)"
    tree = _with_sources(_delta_first(query, delta_alias, sizes) if delta_alias and not query.outer else query.tree, sources)
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


Sizes = Mapping[str, tuple[int, Mapping[str, int]]]  # alias -> (rows, {column: at most this many distinct values})


def join_order(query: Query, delta_alias: str | Sequence[str], sizes: Sizes | None = None) -> list[str]:
    """The relations' aliases from ``delta_alias`` (or several) along the join graph: each next one joined by an
    equality to one before it where any is, else the next in FROM order. Among the linked ones, the
    one whose rows per joined key are fewest by ``sizes`` (rows over the distinct values of its
    linking columns: 1 for a key, ~6000 for TPC-H's customers by nation), then FROM order: a
    supplier's change reaches its lineitems by their supplier key, not every customer of its nation."""
    order = [delta_alias] if isinstance(delta_alias, str) else list(delta_alias)
    aliases = [r.alias for r in query.relations]

    def fanout(alias: str) -> float:
        rows, distinct = (sizes or {}).get(alias, (1, {}))
        if not math.isfinite(rows):
            return 1.0  # (not known)
        columns = {mine for pairs in join_links(query, alias, order).values() for mine, _ in pairs}
        keys = math.prod(distinct.get(c, rows) for c in columns)
        return rows / max(1, min(rows, keys))

    while len(order) < len(aliases):
        linked = [a for a in aliases if a not in order and any(
            {j.left_alias, j.right_alias} == {a, b} for j in query.joins for b in order)]
        order.append(min(linked, key=fanout) if linked else next(a for a in aliases if a not in order))
    return order


def reduced_sql(query: Query, alias: str, source: str, reducers: Mapping[str, str]) -> str | None:
    """The rows of relation ``alias`` (read from ``source``) that pass its own filters and join, by
    the query's equalities, some row of each relation in ``reducers`` ({alias: the table or view of
    its rows, themselves reduced}), with the columns the query reads; None if no equality links it to
    one. Yannakakis' semi-join reduction, top-down from a delta term's change along ``join_order``:
    every row that takes part in one of the term's joined rows joins a row of each relation it is
    linked to before it, itself taking part, so the term over the reduced relations is the term.
    Each reducer is a BROADCAST semi join: the big relation is scanned once, never shuffled."""
    links = join_links(query, alias, reducers)
    if not links:
        return None
    relation = next(r for r in query.relations if r.alias == alias)
    columns = "*" if query.has_subquery else ", ".join(f"`{alias}`.`{c}`" for c in relation.columns)
    names = {other: f"_lakeivm_k{i}" for i, other in enumerate(links)}
    joins = []
    for other, pairs in links.items():
        keys = ", ".join(dict.fromkeys(f"`{c}`" for _, c in pairs))
        on = " AND ".join(f"`{alias}`.`{mine}` = {names[other]}.`{theirs}`" for mine, theirs in pairs)
        joins.append(f"LEFT SEMI JOIN (SELECT DISTINCT {keys} FROM {reducers[other]}) AS {names[other]} ON {on}")
    where = " AND ".join(f"({f})" for f in query.filters.get(alias, ()))
    return (f"SELECT /*+ BROADCAST({', '.join(names.values())}) */ {columns} FROM {source} AS `{alias}` "
            + " ".join(joins) + (f" WHERE {where}" if where else ""))


def thresholds(query: Query, alias: str) -> tuple[str, list[tuple[str, str]]] | None:
    """(R, [(expression over R, column of ``alias``), ...]) if every column of relation ``alias`` the
    query names is one side of an ordering comparison (<, <=, >, >=) AND-ed into its WHERE whose
    other side reads one relation R, the same for each, R not the padded side of an outer join.

    Then a change of ``alias`` moves only R's rows between its old and new thresholds: a row r of R
    adds Σ_d m_d · [e(r) < d.t] · h(r) over the change's rows d; where e(r) lies outside [min t, max t]
    (or is NULL) each comparison is the same for every d, and the sum is h(r) · const · Σ m_d = 0 if
    the change's multiplicities add up to 0 (a one-row aggregate that moved: TPC-H Q11's share of the
    total, Q22's average balance). An ordered range of R, where the delta rule joins all of it."""
    if query.branches:
        return None
    where = query.tree.args.get("where")
    found: dict[int, tuple[str, str, str]] = {}  # id of alias' column -> (R, expression over R, its column)
    for term in conjuncts(where.this if where else None):
        if not isinstance(term, (exp.GT, exp.GTE, exp.LT, exp.LTE)):
            continue
        for mine, other in ((term.this, term.expression), (term.expression, term.this)):
            readers = {c.table for c in other.find_all(exp.Column)}
            if isinstance(mine, exp.Column) and mine.table == alias and len(readers) == 1 and alias not in readers \
                    and other.find(exp.Select) is None:
                found[id(mine)] = (readers.pop(), other.sql(dialect=DIALECT), mine.name)
    named = [c for c in query.tree.find_all(exp.Column) if c.table == alias]
    relations = {r for r, _, _ in found.values()}
    if not found or any(id(c) not in found for c in named) or len(relations) != 1:
        return None
    relation = relations.pop()
    if any(j.padded == relation for j in query.outer):
        return None
    return relation, [(e, t) for _, e, t in found.values()]


def join_links(query: Query, alias: str, others) -> dict[str, list[tuple[str, str]]]:
    """{other alias: [(column of ``alias``, column of other), ...]} for each of ``others`` that an
    equality of the query's joins links relation ``alias`` to, such that a row of ``alias`` without
    a match in ``other`` takes no part in the query's rows: not the preserved side of an outer, semi
    or anti join to its other side (a NOT EXISTS keeps exactly the rows without a match)."""
    links: dict[str, list[tuple[str, str]]] = {}
    unlinked = {(j.preserved, j.padded) for j in query.outer} | {(j.padded, j.preserved) for j in query.outer if j.how == "full"}
    for j in query.joins:
        for mine, column, other, other_column in ((j.left_alias, j.left_column, j.right_alias, j.right_column),
                                                  (j.right_alias, j.right_column, j.left_alias, j.left_column)):
            if mine == alias and other in others and other != alias and (mine, other) not in unlinked:
                links.setdefault(other, []).append((column, other_column))
    return links


def _delta_first(query: Query, delta_alias: str, sizes: Sizes | None = None) -> exp.Select:
    """The query joined starting from the (small) delta, along the join graph, delta broadcast.

    Spark joins in FROM order; starting at the delta keeps every join a lookup from the delta's
    rows instead of a join of two base tables.
    """
    order = join_order(query, delta_alias, sizes)
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
