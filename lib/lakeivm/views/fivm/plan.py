"""What a view's SQL (and spec) becomes under F-IVM: variable order, view tree, payload, leaf lifts.

``build_plan`` turns an acyclic equi-join + GROUP BY + SUM/COUNT/AVG query into a ``FivmPlan``:

- the variable order (derived, or ``variable_order`` from the spec) and its view tree with the
  stored views μ(τ, U) for the spec's ``updatable`` tables U, all of them by default (F-IVM §3,
  Fig. 3 and Fig. 5);
- the payload ring (``payload.PayloadRing``): ``p_0`` = COUNT(*), and per aggregated expression a
  sum of its non-null values and a count of them (the state ``lakeivm.sql`` finalizes into SQL's
  SUM/COUNT/AVG), plus the cofactor triple of a regression view's features;
- the *lifts*: each aggregated expression must be a product of factors that each read the
  columns of one relation (e.g. ``l_extendedprice * (1 - l_discount)``); a relation's factors are
  multiplied into its base tuples' payloads at its leaf. The product over a join tuple is the same
  wherever a factor enters (the rings are commutative), so lifting at the leaves rather than at
  each variable's node (§2, g_X) also covers expressions and join or GROUP BY columns. Features
  are lifted at their relation's leaf the same way, each exactly once.

Single-table WHERE conditions are applied at the leaves; anything else is rejected with the reason
(the classifier then keeps the view ``first_order``). A regression view names ``features`` and a
``label`` in its spec, each a column or ``<expression over one table> AS name``; tuples with a NULL
feature or label are left out of the fit. ``fit_query`` adds the feature columns to the query's
relations so the engine reads them from the change feed.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import sqlglot
from sqlglot import exp

from lakeivm.errors import UnsupportedQuery
from lakeivm.sql import COUNT, DIALECT, Query
from lakeivm.sql.functions import check_functions
from lakeivm.views.fivm.payload import PayloadRing
from lakeivm.views.fivm.tree import View, ViewTree, build_view_tree
from lakeivm.views.fivm.vorder import VariableOrder, derive_order, parse_order


@dataclass(frozen=True)
class Feature:
    """A regression feature: ``sql`` over the columns of relation ``alias`` (qualified)."""

    name: str
    alias: str
    sql: str


@dataclass(frozen=True)
class Component:
    """One sum-vector component: the SQL weight each relation's base tuples are lifted by (a
    relation not in ``weights`` lifts by 1), stored under ``state`` in the result table."""

    state: str
    weights: Mapping[str, str]
    integral: bool


@dataclass(frozen=True)
class FivmPlan:
    """Everything the maintainer needs; pure data derived from the query and the spec."""

    query: Query
    order: VariableOrder
    tree: ViewTree
    ring: PayloadRing
    components: tuple[Component, ...]
    features: tuple[Feature, ...]
    label: str | None

    def lifted(self, view: View) -> tuple[str, ...]:
        """Features lifted in ``view``'s subtree (its cofactor block), in ring order."""
        return tuple(f.name for f in self.features if f.alias in view.relations)

    def payload_columns(self, view: View) -> tuple[str, ...]:
        return self.ring.columns(self.lifted(view))

    def column_of(self, alias: str, variable: str) -> str:
        """The column of relation ``alias`` that holds ``variable``."""
        return next(c for c, v in self.order.columns[alias] if v == variable)

    def is_join_variable(self, variable: str) -> bool:
        return len(self.order.variables[variable].members) > 1

    def group_key_variables(self) -> tuple[tuple[str, str], ...]:
        """(output name, variable) of each GROUP BY key."""
        of_member = {m: v.name for v in self.order.variables.values() for m in v.members}
        return tuple((k.name, of_member[tuple(k.sql.split(".", 1))]) for k in self.query.group_keys)


def build_plan(query: Query, options: Mapping[str, Any]) -> FivmPlan:
    """The F-IVM plan of ``query``; raises UnsupportedQuery saying what F-IVM cannot maintain."""
    if query.has_subquery:
        raise UnsupportedQuery("F-IVM maintains join + GROUP BY aggregates; a nested subquery needs the nested kind.")
    features, label = _features(query, options, _owner_by_columns(query))
    if not query.aggregates and not features:
        raise UnsupportedQuery("F-IVM needs aggregates (SUM/COUNT/AVG) or regression features; a plain join is a join sample.")
    if query.residual:
        raise UnsupportedQuery(
            f"the condition {query.residual[0]} spans several tables and is not an equi-join; "
            "F-IVM pushes only single-table filters to the leaves."
        )
    order = parse_order(query, options["variable_order"]) if options.get("variable_order") else derive_order(query)
    tree = build_view_tree(order, updatable_aliases(query, options.get("updatable")))
    components = _components(query)
    ring = PayloadRing(len(components), tuple(f.name for f in features))
    return FivmPlan(query, order, tree, ring, components, features, label)


def updatable_aliases(query: Query, updatable: Any) -> tuple[str, ...]:
    """The aliases of the spec's ``updatable`` tables (all relations when it is absent): U of Fig. 5.

    Changes to a table outside U are applied by re-evaluating the view tree (a rebuild), so a view
    whose dimension tables rarely change stores only the views an update to its fact table needs.
    """
    aliases = tuple(r.alias for r in query.relations)
    if updatable is None:
        return aliases
    names = [updatable] if isinstance(updatable, str) else list(updatable)
    known = {*aliases, *query.tables}
    out: list[str] = []
    for name in names:
        if not isinstance(name, str) or name not in known:
            raise UnsupportedQuery(
                f"updatable: {name!r} is not a table of the query; name some of {sorted(query.tables)} "
                "(or remove `updatable:` to make every table updatable)."
            )
        out += [r.alias for r in query.relations if name in (r.alias, r.table)]
    if not out:
        raise UnsupportedQuery("updatable: is empty; name the tables whose changes are applied incrementally.")
    return tuple(dict.fromkeys(out))


def fit_query(query: Query, options: Mapping[str, Any], schemas: Mapping[str, Mapping[str, str]]) -> Query:
    """``query`` with each feature's columns added to its relation (the change feed must carry them)."""
    if not options.get("features") and not options.get("label"):
        return query
    owners = {r.alias: set(schemas.get(r.table, ())) for r in query.relations}
    features, _ = _features(query, options, lambda column: [a for a, cols in owners.items() if column in cols])
    added: dict[str, list[str]] = {}
    for feature in features:
        for column in sqlglot.parse_one(feature.sql, dialect=DIALECT).find_all(exp.Column):
            added.setdefault(column.table, []).append(column.name)
    relations = tuple(replace(r, columns=tuple(dict.fromkeys((*r.columns, *added.get(r.alias, ()))))) for r in query.relations)
    return replace(query, relations=relations)


def _components(query: Query) -> tuple[Component, ...]:
    """p_0 = COUNT(*); per aggregated expression its non-null sum and count (``lakeivm.sql`` state)."""
    out = [Component(COUNT, {}, True)]
    first = query.relations[0].alias
    for agg in query.aggregates:
        if agg.func != "SUM":
            raise UnsupportedQuery(f"{agg.func}({agg.sql}) has no additive inverse under deletes; F-IVM keeps SUM/COUNT/AVG.")
        if agg.sql is None:
            continue
        by_alias: dict[str, list[str]] = {}
        node = sqlglot.parse_one(agg.sql, dialect=DIALECT)
        for factor in node.flatten() if isinstance(node, exp.Mul) else [node]:
            aliases = {c.table for c in factor.find_all(exp.Column)}
            if len(aliases) > 1:
                raise UnsupportedQuery(
                    f"SUM({agg.sql}): the factor {factor.sql(DIALECT)} mixes columns of {sorted(aliases)}; F-IVM sums "
                    "products of single-table expressions (first_order maintains this view)."
                )
            by_alias.setdefault(aliases.pop() if aliases else first, []).append(factor.sql(DIALECT))
        product = {a: " * ".join(f"CAST(({f}) AS DOUBLE)" for f in fs) for a, fs in by_alias.items()}
        out.append(Component(f"_lakeivm_s{agg.index}", {a: f"COALESCE({p}, 0D)" for a, p in product.items()}, False))
        out.append(Component(f"_lakeivm_n{agg.index}", {a: f"CASE WHEN ({p}) IS NULL THEN 0 ELSE 1 END"
                                                        for a, p in product.items()}, True))
    return tuple(out)


def _features(query: Query, options: Mapping[str, Any],
              owners: Callable[[str], list[str]]) -> tuple[tuple[Feature, ...], str | None]:
    items, label = list(options.get("features") or ()), options.get("label")
    if not items and label is None:
        return (), None
    if not items or label is None:
        raise UnsupportedQuery("a regression view needs both `features:` (a list) and `label:`; give both.")
    features: dict[str, Feature] = {}
    for item in [*items, label]:
        feature = _feature(str(item), query, owners)
        if feature.name in features and features[feature.name] != feature:
            raise UnsupportedQuery(f"feature name {feature.name!r} is used twice; name one `<expression> AS <other name>`.")
        features[feature.name] = feature
    label_name = _feature(str(label), query, owners).name
    return tuple(features.values()), label_name


def _feature(item: str, query: Query, owners: Callable[[str], list[str]]) -> Feature:
    try:
        node = sqlglot.parse_one(f"SELECT {item}", dialect=DIALECT).expressions[0]
    except (sqlglot.errors.ParseError, IndexError) as err:
        raise UnsupportedQuery(f"feature {item!r} does not parse as an SQL expression: {err}") from err
    check_functions(node, f"SELECT {item}", f"feature {item!r}")  # a feature runs in Spark like the view's SQL
    if "${" in item:
        raise UnsupportedQuery(f"feature {item!r}: ${{...}} is not allowed: Spark replaces it with an environment variable or setting.")
    body = node.this if isinstance(node, exp.Alias) else node
    if isinstance(node, exp.Alias):
        name = node.alias
    elif isinstance(body, exp.Column):
        name = body.name
    else:
        raise UnsupportedQuery(f"feature {item!r} is an expression; name it: `{item} AS <name>`.")
    if not name.isidentifier():
        raise UnsupportedQuery(f"feature name {name!r} must be an identifier (letters, digits, underscores).")
    aliases = {r.alias for r in query.relations}
    body = body.copy()
    for column in body.find_all(exp.Column):
        if column.table:
            if column.table not in aliases:
                raise UnsupportedQuery(f"feature {item!r}: no relation {column.table!r} in the query (relations: {sorted(aliases)}).")
            continue
        found = owners(column.name)
        if len(found) != 1:
            problem = "is in no table of the query" if not found else f"is ambiguous ({sorted(found)}); qualify it"
            raise UnsupportedQuery(f"feature {item!r}: column {column.name!r} {problem}.")
        column.set("table", exp.to_identifier(found[0]))
    tables = {c.table for c in body.find_all(exp.Column)}
    if len(tables) != 1:
        raise UnsupportedQuery(f"feature {item!r} must read the columns of exactly one table, reads {sorted(tables)}.")
    return Feature(name, tables.pop(), body.sql(DIALECT))


def _owner_by_columns(query: Query) -> Callable[[str], list[str]]:
    return lambda column: [r.alias for r in query.relations if column in r.columns]


def describe(plan: FivmPlan) -> str:
    """The view tree, one view per line, with keys and stored/not stored (for ``explain``)."""
    lines = [plan.tree.render()]
    if plan.features:
        lines.append(f"regression of {plan.label} on {', '.join(f.name for f in plan.features if f.name != plan.label)}")
    return "\n".join(lines)


def leaf_weights(plan: FivmPlan, alias: str) -> Sequence[tuple[str, str]]:
    """(payload column, SQL weight) of relation ``alias``'s base tuples, before × multiplicity."""
    out = [(f"p_{k}", comp.weights.get(alias, "1")) for k, comp in enumerate(plan.components)]
    mine = [f for f in plan.features if f.alias == alias]
    if plan.features:
        value = {f.name: f"CAST(({f.sql}) AS DOUBLE)" for f in mine}
        ok = " AND ".join(f"{v} IS NOT NULL" for v in value.values()) or "TRUE"
        out.append(("c", f"CASE WHEN {ok} THEN 1D ELSE 0D END"))
        names = [f.name for f in mine]
        out += [(f"s__{v}", f"CASE WHEN {ok} THEN {value[v]} ELSE 0D END") for v in names]
        out += [(f"q__{u}__{v}", f"CASE WHEN {ok} THEN {value[u]} * {value[v]} ELSE 0D END")
                for i, u in enumerate(names) for v in names[i:]]
    return out
