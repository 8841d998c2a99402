"""The query IR: relations, joins, group keys, aggregates and outputs of one view's query."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from sqlglot import exp


DIALECT = "spark"
COUNT = "_lakeivm_count"
HAVING = "_lakeivm_having"  # a hidden result column: the group satisfies the view's HAVING (its reader keeps those)
AGGREGATES = {exp.Sum: "SUM", exp.Count: "COUNT", exp.Avg: "AVG", exp.Min: "MIN", exp.Max: "MAX",
               exp.Stddev: "STDDEV_SAMP", exp.StddevSamp: "STDDEV_SAMP", exp.StddevPop: "STDDEV_POP",
               exp.Variance: "VAR_SAMP", exp.VariancePop: "VAR_POP"}
ALIASES = {"std": exp.Stddev, "mean": exp.Avg}  # Spark's other names of those (sqlglot keeps them as anonymous calls)
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
