"""First-order IVM of join + GROUP BY + SUM/COUNT/AVG views: the classical delta rule.

For a table R occurring as aliases R1..Rn, ΔV = Σ_i V(R1', .., R(i-1)', ΔRi, R(i+1), .., Rn) with
every other table as of its watermark, R' = R at the pin: a telescoping sum, exact for self-joins
and asymmetric plans. Per group the state is a row count and, per aggregated expression, the sum
of its non-null values and their count (lakeivm.sql); states add, and a group whose count reaches
zero is deleted. MIN/MAX and COUNT(DISTINCT) keep, per aggregate, the multiset of each group's
values as an additive table ``aux/extremum_<i>`` (keys, value, count); after a run the touched
groups' extrema (or number of live values) are re-read from it, so deletes are exact.

Cost per batch: one join of the delta with the other relations, grouped by the group keys and the
MIN/MAX arguments (one query gives the state's delta and each multiset's); one MERGE per stored
table. A small delta is joined over each large table's rows that can join it, found first by a
key-filtered read (``_reduced``: a semi-join reduction, Yannakakis' first pass), not over the
tables whole. A small delta of a small view is summed and merged in this process instead: one Spark job
collects the grouped join, DuckDB adds the few rows (no SQL of the view's), one more job renders
the touched groups, and delta-rs rewrites the tables whole.

A LEFT JOIN is linear in every relation but its NULL-padded one, S: a change of S can turn a
preserved row from padded to matched and back. Such a row's key is one ΔS touches, so
ΔV = V(R|K, S') − V(R|K, S), the query on the preserved relation R restricted to those keys K.
A FULL JOIN (the query's first join, inner joins only after it) is that from either side, the
changed side restricted to the keys its change touches too (its unmatched rows are output as well);
the joins after it are linear in its result, so their tables' changes take the delta rule. EXISTS / NOT EXISTS / IN /
NOT IN over one table are semi- and anti-joins (``lakeivm.sql``), linear in R and not in S in just
this way; NOT IN's NULL rule also ties R's rows with a NULL key to every change of S, and all of R
to a change of S with a NULL key.
A query over UNION ALL is one query per branch (``lakeivm.sql``), each under the rules above; their
states add, so a table's change reaches only the branches that read it. A relation that is only
thresholds of another (``lakeivm.sql.thresholds``: TPC-H Q11's share of the total, Q22's average)
moves only the rows between its old and new value: its term reads those (``_crossed``).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from lakeivm.store import storage
from lakeivm.store.lake import CDF
from lakeivm.columns import HIDDEN, MULTIPLICITY
from lakeivm.sql import (COUNT, Aggregate, OuterJoin, Query, Relation, join_links, join_order, multiset_of_sql, multiset_sql, reduced_sql, rolled_up_sql,
                         recompute_sql, state_sql, thresholds)
from lakeivm.views.base import Context
from lakeivm.views.by_key import located, rows_with_keys, stored_matching
from lakeivm.views.state import (AdditiveTable, as_frames, Readable, as_read, readable_groups, duckdb_query, in_stored_types, keys_in, output_types,
                                 overwrite, quoted, read_if_small, read_result, union_all)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


class FirstOrderMaintainer:
    """Keeps ``views/<view>/result``: the view's columns plus hidden per-group state columns.

    The state deltas of the tables applied in one run are summed and MERGEd once, in ``flush``.
    """

    def __init__(self) -> None:
        self._changes: list = []  # state deltas: Spark frames, or Arrow tables summed in this process
        self._multisets: dict[int, AdditiveTable] | None = None
        self._stored: tuple | None = None  # (read_if_small of the stored view,), read once per run
        self._local_view: bool | None = None  # ``_view_merges_locally``, asked once per run
        self._counted: dict[str, tuple] = {}  # base tables' rows and distinct-value bounds (``_sizes``), once per run

    def state_tables(self, ctx: Context) -> Mapping[str, str]:
        multisets = {f"extremum_{i}": t.path for i, t in self._extrema(ctx).items()}
        return {"result": ctx.lake.view_path(ctx.view), **multisets}

    def bootstrap(self, ctx: Context) -> None:
        sources = {r.alias: ctx.snapshot(r.table, ctx.pins[r.table]) for r in ctx.query.relations}
        for agg in ctx.query.extrema:
            self._extrema(ctx)[agg.index].create(ctx.spark.sql(multiset_sql(ctx.query, sources, agg)))
            ctx.checkpoint(f"bootstrap:extremum_{agg.index}")
        state = ctx.spark.sql(state_sql(ctx.query, sources))
        if ctx.query.group_keys:
            state = state.where(f"{COUNT} > 0")
        rows = finalize(ctx.query, state, output_types(ctx.spark, recompute_sql(ctx.query, sources)))
        overwrite(ctx.lake, rows, ctx.lake.view_path(ctx.view), configuration={CDF: "true"})
        ctx.checkpoint("bootstrap:result")

    def apply(self, ctx: Context, table: str, delta: DataFrame) -> None:
        name = f"lakeivm_{ctx.view}_{table}_delta"
        delta.createOrReplaceTempView(name)
        for alias in ctx.query.aliases_of(table):
            padded = next((p for p in (join.padding(alias) for join in ctx.query.outer) if p is not None), None)
            if padded is not None:
                self._apply_padded(ctx, table, padded, name)
                continue
            sizes = self._relation_sizes(ctx)
            grouped = ctx.spark.sql(state_sql(ctx.query, self._term_sources(ctx, table, alias, name, sizes), alias, sizes))
            if ctx.delta_rows.get(table, math.inf) <= ctx.lake.limits.small_delta_rows and self._small_state(ctx):
                self._split_locally(ctx, grouped.toArrow())
            else:
                self._split(ctx, grouped.localCheckpoint(eager=True))
        ctx.checkpoint(f"apply:{table}")

    def _split(self, ctx: Context, grouped: DataFrame) -> None:
        """A delta state grouped also by the MIN/MAX arguments (``state_sql``): the view state's delta
        and each multiset's, by Spark."""
        if not ctx.query.extrema:
            self._changes.append(grouped)
            return
        rows = f"lakeivm_{ctx.view}_grouped_delta"
        grouped.createOrReplaceTempView(rows)
        self._changes.append(ctx.spark.sql(rolled_up_sql(ctx.query, rows)).localCheckpoint(eager=True))
        for agg in ctx.query.extrema:
            self._extrema(ctx)[agg.index].add(ctx.spark.sql(multiset_of_sql(ctx.query, rows, agg)))

    def _split_locally(self, ctx: Context, grouped) -> None:
        """``_split`` of few rows (an Arrow table, collected by one Spark job) in this process, by DuckDB:
        sums of the state columns Spark computed, no SQL of the view's."""
        from lakeivm.sources.changes import plain_rows

        grouped = plain_rows(grouped)
        if not ctx.query.extrema:
            self._changes.append(grouped)
            return
        types = {f.name: f.type for f in grouped.schema}

        def typed(rows: pa.Table, **like: str) -> pa.Table:
            """DuckDB's sums in Spark's types (it sums integers as HUGEINT): each column as ``grouped``'s
            column of its name, or of the name ``like`` gives it."""
            return rows.cast(pa.schema([(n, types[like.get(n, n)]) for n in rows.column_names]))

        self._changes.append(typed(duckdb_query(rolled_up_sql(ctx.query, "grouped", quoted), grouped=grouped)))
        for agg in ctx.query.extrema:
            rows = duckdb_query(multiset_of_sql(ctx.query, "grouped", agg, quoted), grouped=grouped)
            self._extrema(ctx)[agg.index].add(typed(rows, _lakeivm_v=f"_lakeivm_v{agg.index}", _lakeivm_cnt=COUNT))

    def _relation_sizes(self, ctx: Context) -> dict[str, tuple[int, dict[str, int]]]:
        """{alias: ``_sizes`` of its table or view} for each relation."""
        return {r.alias: self._sizes(ctx, r.table) for r in ctx.query.relations}

    def _sizes(self, ctx: Context, table: str) -> tuple[int, dict[str, int]]:
        """Base table ``table``'s rows and distinct-value bounds (``storage.distinct_bounds``), or a
        view's stored result's (an estimate of its rows: a HAVING's or a projection's stored rows are
        not its readers'), read once per run; unknown (a table delta-rs cannot read) as too many rows to reduce."""
        if table not in self._counted:
            try:
                path = ctx.lake.view_path(table) if table in ctx.lake.upstreams else ctx.lake.table_path(table)
                self._counted[table] = storage.distinct_bounds(path)
            except Exception:  # noqa: BLE001 -- a table feature delta-rs lacks: no estimate, Spark reads it whole
                self._counted[table] = (math.inf, {})
        return self._counted[table]

    def _small_state(self, ctx: Context) -> bool:
        """Whether the stored view and its multisets are merged in this process: each small (read
        whole) or MERGEd by delta-rs (``local_merge_rows``); then a small delta's state is summed
        and merged here (``_split_locally``, ``merge_locally``)."""
        return self._view_merges_locally(ctx) and all(m.merges_locally() for m in self._extrema(ctx).values())

    def _view_merges_locally(self, ctx: Context) -> bool:
        """The stored view small (``_stored_view``), or by key at most ``limits.local_merge_rows``
        rows that delta-rs scans and writes (no float key: NaN keys match as Spark's ``<=>`` has it
        only there); asked once per run."""
        if self._local_view is None:
            self._local_view = self._stored_view(ctx) is not None or _view_table(ctx) is not None
        return self._local_view

    def _stored_view(self, ctx: Context) -> tuple[DataFrame, object] | None:
        """``read_if_small`` of the stored view, read once per run (the run is its only writer)."""
        if self._stored is None:
            self._stored = (read_if_small(ctx.lake, ctx.lake.view_path(ctx.view)),)
        return self._stored[0]

    def _apply_padded(self, ctx: Context, table: str, join: OuterJoin, delta_view: str) -> None:
        """The change of a LEFT, FULL, SEMI or ANTI JOIN's right relation S: the query before and after it,
        on the preserved rows whose join key it touches (see the module docstring). Those rows are read
        once; so are S's rows of those keys (only they can match), as of the pin: S's before is that less
        the change, not a second scan. NOT IN reads both versions of S whole (a NULL matches any key)."""
        query = ctx.query
        changed_keys = f"(SELECT `{join.column}` FROM {delta_view})"
        null_changed = f"EXISTS (SELECT 1 FROM {delta_view} WHERE `{join.column}` IS NULL)"
        touched = f"`{join.preserved_column}` IN {changed_keys}"
        if join.how == "not_in":
            touched = f"{touched} OR `{join.preserved_column}` IS NULL OR {null_changed}"
        restricted = f"lakeivm_{ctx.view}_{join.padded}_touched_{join.preserved}"
        versions = self._versions(ctx, table, join.padded)
        local_preserved, local_padded = _touched_locally(ctx, table, join, delta_view, versions[join.preserved]) or (None, None)
        # the preserved relation whole only where Spark reads its touched rows (a Delta snapshot: a job)
        sources = self._term_sources(ctx, table, join.padded, delta_view, skip=(join.preserved,) if local_preserved is not None else ())
        if local_preserved is not None:
            local_preserved.createOrReplaceTempView(restricted)
        else:
            preserved = ctx.spark.sql(f"SELECT * FROM {sources[join.preserved]} WHERE {touched}")
            (preserved if join.how == "not_in" else preserved.localCheckpoint(eager=True)).createOrReplaceTempView(restricted)
        after = {**sources, join.preserved: restricted}
        if local_padded is None:
            after[join.padded] = ctx.snapshot(table, ctx.pins[table])
        after.update(_reduced(ctx, {join.preserved: restricted}, sources.__getitem__, versions, self._relation_sizes(ctx),
                              keep=(join.padded,)))
        if join.how == "not_in":
            before = {**after, join.padded: ctx.snapshot(table, ctx.watermarks[table])}
        else:
            delta = ctx.spark.table(delta_view)  # every changed row has a touched key (one with a NULL key matches nothing)
            columns = [c for c in delta.columns if c != MULTIPLICITY]
            if local_padded is not None:
                rows = local_padded.select(*[f"`{c}`" for c in columns])
            else:
                own = f"`{join.column}` IN {changed_keys}"
                if join.how == "full":  # S's unmatched rows are output too: those with a NULL key as well
                    own = f"{own} OR (`{join.column}` IS NULL AND {null_changed})"
                rows = ctx.spark.table(after[join.padded]).where(own).select(*[f"`{c}`" for c in columns]).localCheckpoint(eager=True)
            before = dict(after)
            for side, when, version in ((after, "after", rows), (before, "before", _undone(rows, delta))):
                side[join.padded] = f"lakeivm_{ctx.view}_{join.padded}_touched_{when}"
                version.createOrReplaceTempView(side[join.padded])
        keys = [k.name for k in query.group_keys]
        states = [ctx.spark.sql(state_sql(query, side)) for side in (after, before)]
        most = ctx.lake.limits.small_delta_rows if self._small_state(ctx) else -1
        change = _minus(*states, keys, query.additive_columns)
        here = _collected(change, most) if ctx.delta_rows.get(table, math.inf) <= most else None
        self._changes.append(change.localCheckpoint(eager=True) if here is None else here)
        for agg in query.extrema:
            values = _minus(*[ctx.spark.sql(multiset_sql(query, side, agg)) for side in (after, before)],
                            [*keys, "_lakeivm_v"], ["_lakeivm_cnt"])
            collected = None if here is None else _collected(values, most)
            self._extrema(ctx)[agg.index].add(values if collected is None else collected)

    def flush(self, ctx: Context) -> None:
        if not self._changes:
            return
        for index, multiset in self._extrema(ctx).items():
            multiset.flush()
            ctx.checkpoint(f"flush:extremum_{index}")
        multisets = {a: self._extrema(ctx)[a.index] for a in ctx.query.extrema}
        stored = self._stored_view(ctx)
        if stored is not None or not merge_counts(ctx, self._changes):
            if self._view_merges_locally(ctx) and all(isinstance(c, pa.Table) for c in self._changes):
                merge_locally(ctx, self._changes, stored, multisets)
            else:
                merge_state(ctx, union_all(as_frames(ctx.spark, self._changes)), stored, multisets)
        self._changes, self._stored, self._local_view = [], None, None
        ctx.checkpoint("flush")

    def result(self, ctx: Context, version: int | None = None) -> DataFrame:
        df = read_result(ctx, version)
        visible = [c for c in df.columns if not c.startswith(HIDDEN)]
        if ctx.query.implicit_keys == "projection":  # each distinct row stored once with its multiplicity
            from pyspark.sql import functions as F

            df = df.withColumn(f"{HIDDEN}copy", F.explode(F.sequence(F.lit(1), F.col(COUNT).cast("int"))))
        return as_read(df, ctx.query).select(*visible)

    def readable(self, ctx: Context) -> Readable | None:
        """Its stored groups as its readers see them (``readable_groups``): a projection's row once, with its count."""
        return readable_groups(ctx.query, COUNT if ctx.query.implicit_keys == "projection" else None)

    def _extrema(self, ctx: Context) -> dict[int, AdditiveTable]:
        """One multiset table per MIN/MAX aggregate: (group keys, value) -> count."""
        if self._multisets is None:
            keys = [k.name for k in ctx.query.group_keys]
            self._multisets = {
                agg.index: AdditiveTable(ctx.lake, ctx.lake.view_path(ctx.view, f"aux/extremum_{agg.index}"),
                                         (*keys, "_lakeivm_v"), ("_lakeivm_cnt",))
                for agg in ctx.query.extrema
            }
        return self._multisets

    def _term_sources(self, ctx: Context, table: str, delta_alias: str, delta_view: str,
                      sizes: Mapping[str, tuple] | None = None, skip: Sequence[str] = ()) -> dict[str, str]:
        """The relations of ``delta_alias``' delta term (alias -> view): its change, every other one as
        of its version (but those in ``skip``); with ``sizes``, each large table reduced to the rows
        that can join a small change (``_reduced``)."""
        tables, versions = {r.alias: r.table for r in ctx.query.relations}, self._versions(ctx, table, delta_alias)

        def source(alias: str) -> str:
            return delta_view if alias == delta_alias else ctx.snapshot(tables[alias], versions[alias])
        small = sizes is not None and ctx.delta_rows.get(table, math.inf) <= ctx.lake.limits.reduced_rows
        crossed = _crossed(ctx, delta_alias, delta_view, source, versions, sizes) if small else {}
        seeds = {delta_alias: delta_view, **{alias: view for alias, (view, here) in crossed.items() if here}}
        reduced = _reduced(ctx, seeds, source, versions, sizes) if small else {}
        chosen = {**reduced, **{alias: view for alias, (view, _) in crossed.items()}}
        return {alias: chosen.get(alias) or source(alias) for alias in tables if alias not in skip}

    @staticmethod
    def _versions(ctx: Context, table: str, delta_alias: str) -> dict[str, int]:
        """The version each other relation of ``delta_alias``'s delta term reads (module docstring):
        an earlier alias of the changed table at its pin, every other one at its watermark."""
        aliases = ctx.query.aliases_of(table)
        position = aliases.index(delta_alias)
        return {r.alias: ctx.pins[table] if r.table == table and aliases.index(r.alias) < position else ctx.watermarks[r.table]
                for r in ctx.query.relations if r.alias != delta_alias}



def _reduced(ctx: Context, seeds: Mapping[str, str], source: Callable[[str], str], versions: Mapping[str, int],
             sizes: Mapping[str, tuple], keep: Sequence[str] = ()) -> dict[str, str]:
    """{alias: a view of its rows} for each large base table (more rows than the lake's
    ``limits.snapshot_rows``, below which it is read whole in this process) of a term whose
    ``seeds`` ({alias: view}: a change, or a semi/anti join's preserved rows of the touched keys)
    are small, its rows reduced to those that can join them (a semi-join reduction along
    ``join_order``, by ``join_links``), as local rows: at most ``limits.reduced_rows``, else it is
    read whole. The term is then joined over small relations. ``source`` names an alias' whole
    relation, ``versions`` its version; ``keep`` are left as they are. Each is read by delta-rs with
    the linking keys as a filter (``rows_with_keys``: a superset, every key of each link), else by
    one Spark scan with the keys broadcast. Without this, Spark plans the join of a base table with
    the change's partial join (its size unknown, estimated as a product) as a sort-merge join:
    TPC-H Q5's orders term at SF 1 shuffled all of lineitem, 9 of its 13 s. Not in a query with a
    UNION (its branches) or a FULL or NOT IN join (a NULL-matched row depends on more than its
    keys; EXISTS, NOT EXISTS and IN are reduced). With a LEFT JOIN, a relation is reduced only by
    the keys of the relations it must match, as delta-rs reads them: the preserved side's relations
    not by the padded side's keys (their rows stay, matched or padded), and no relation by its own
    filters (Spark's reduction), which would pad a row that the query's WHERE drops (``WHERE s.v IS
    NULL`` keeps the rows no row of s matches, not those whose match has v set) or drop a preserved
    row an ON condition only pads."""
    query, most = ctx.query, ctx.lake.limits.reduced_rows
    if any(j.how not in ("semi", "anti", "left") for j in query.outer) or query.branches:
        return {}
    padded = {j.padded for j in query.outer if j.how == "left"}
    out, reducers = {}, dict(seeds)
    held: dict[str, pa.Table] = {}  # each reducer's rows, once brought here
    for alias in join_order(query, list(seeds), sizes)[len(seeds):]:
        if alias in keep or alias not in sizes or sizes[alias][0] <= ctx.lake.limits.snapshot_rows:
            continue
        links = {other: pairs for other, pairs in join_links(query, alias, reducers).items() if alias in padded or other not in padded}
        if not links:
            continue
        relation = _relation(query, alias)
        columns = _columns_of_table(query, relation.table)
        keys: dict[str, list] = {}
        for other, pairs in links.items():
            if other not in held:
                held[other] = ctx.spark.table(reducers[other]).toArrow()  # a seed: small
            for mine, theirs in pairs:
                keys.setdefault(mine, []).append(pc.drop_null(held[other].column(theirs)))
        read = rows_with_keys(ctx, relation.table, versions[alias], keys, columns)
        if read is None and padded:
            continue
        if read is None:
            frame = ctx.spark.sql(reduced_sql(query, alias, source(alias), reducers))
            read = frame.limit(most + 1).toArrow(), frame.schema
        rows, schema = read
        if rows.num_rows > most:
            continue
        out[alias] = reducers[alias] = f"lakeivm_{ctx.view}_{alias}_reduced"
        held[alias] = rows
        storage.local_rows(ctx.spark, rows, schema).createOrReplaceTempView(out[alias])
    return out


def _crossed(ctx: Context, delta_alias: str, delta_view: str, source: Callable[[str], str], versions: Mapping[str, int],
             sizes: Mapping[str, tuple]) -> dict[str, tuple[str, bool]]:
    """{R: (a view of R's rows a change of its thresholds can move, whether they are local rows)} where
    the changed relation is only thresholds of R and its change moves them without adding rows
    (``thresholds``): R's rows with a compared value between the change's least and greatest
    threshold. A Spark filter of R where the term joins no other large table; else the rows are
    brought here to seed ``_reduced`` (TPC-H Q22's customers, then their orders): by delta-rs where
    each compared value is a column of a base table (a superset: the bounds widened to whole
    numbers), else by Spark (R's own terms too, the threshold's type), when at most
    ``limits.reduced_rows``. Numeric thresholds only, none NULL or NaN (Spark orders NaN last)."""
    from pyspark.sql import functions as F

    found = thresholds(ctx.query, delta_alias)
    if found is None:
        return {}
    relation, compared = found
    change = ctx.spark.table(delta_view)
    types = {f.name: f.dataType for f in change.schema.fields}
    if not all(types[t].typeName() in _NUMERIC for _, t in compared):
        return {}
    summary = [f(F.col(f"`{t}`")) for _, t in compared for f in (F.count, F.min, F.max)]
    added, rows, *values = change.agg(F.sum(MULTIPLICITY), F.count(F.lit(1)), *summary).collect()[0]
    spans = [values[i:i + 3] for i in range(0, len(values), 3)]  # per threshold: (non-NULL values, least, greatest)
    if not rows or added != 0 or any(n != rows or math.isnan(hi) for n, _, hi in spans):  # Spark's MAX is NaN if any is
        return {}
    bounds = [(e, types[t], lo, hi) for (e, t), (_, lo, hi) in zip(compared, spans)]
    view = f"lakeivm_{ctx.view}_{relation}_crossed"
    joined = any(a not in (delta_alias, relation) and sizes[a][0] > ctx.lake.limits.snapshot_rows for a in sizes)
    read = _widened_locally(ctx, relation, versions[relation], bounds) if joined and relation in sizes else None
    if read is not None and read[0].num_rows <= ctx.lake.limits.reduced_rows:
        storage.local_rows(ctx.spark, *read).createOrReplaceTempView(view)
        return {relation: (view, True)}
    frame = _between_on_spark(ctx, relation, source(relation), bounds)
    taken = frame.limit(ctx.lake.limits.reduced_rows + 1).toArrow() if joined else None
    here = taken is not None and taken.num_rows <= ctx.lake.limits.reduced_rows
    (storage.local_rows(ctx.spark, taken, frame.schema) if here else frame).createOrReplaceTempView(view)
    return {relation: (view, here)}


_NUMERIC = {"byte", "short", "integer", "long", "float", "double", "decimal"}


def _between_on_spark(ctx: Context, relation: str, source: str, bounds: Sequence[tuple]) -> DataFrame:
    """``relation``'s rows (from ``source``) that pass its own terms with some compared value between
    its bounds, each bound in its threshold's type: as the query compares them."""
    from functools import reduce

    from pyspark.sql import functions as F

    between = [F.expr(e).between(F.lit(lo).cast(kind), F.lit(hi).cast(kind)) for e, kind, lo, hi in bounds]
    own = " AND ".join(f"({f})" for f in ctx.query.filters.get(relation, ())) or "TRUE"
    frame = ctx.spark.sql(f"SELECT * FROM {source} AS `{relation}` WHERE {own}").alias(relation)
    read = _columns_read(ctx.query, relation)
    columns = ["*"] if read is None else [f"`{relation}`.`{c}`" for c in read]
    return frame.where(reduce(lambda a, b: a | b, between)).select(*columns)


def _widened_locally(ctx: Context, relation: str, version: int, bounds: Sequence[tuple]) -> tuple[pa.Table, str] | None:
    """The rows of base table ``relation`` at ``version`` with some compared column within its bounds
    widened to whole numbers, by delta-rs (``rows_with_keys``): a superset of the rows Spark would
    find, so the same term; None where a compared value is not a plain column or Arrow cannot compare."""
    import sqlglot

    from lakeivm.sql import DIALECT

    def within(schema: pa.Schema) -> pc.Expression | None:
        found = None
        for e, _, lo, hi in bounds:
            column = sqlglot.parse_one(e, dialect=DIALECT)
            kind = schema.field(column.name).type if isinstance(column, sqlglot.exp.Column) else None
            if not (kind is not None and (pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_decimal(kind))) \
                    or max(abs(lo), abs(hi)) >= 2 ** 52:  # a double within 1 of the value it rounds: widening by 1 suffices
                return None
            low, high = math.floor(lo) - 1, math.ceil(hi) + 1
            if pa.types.is_decimal(kind):
                low, high = Decimal(low), Decimal(high)
            one = (pc.field(column.name) >= pa.scalar(low, type=kind)) & (pc.field(column.name) <= pa.scalar(high, type=kind))
            found = one if found is None else found | one
        return found

    return rows_with_keys(ctx, _relation(ctx.query, relation).table, version, {}, _columns_read(ctx.query, relation), within)


def _relation(query: Query, alias: str) -> Relation:
    """The query's relation named ``alias``."""
    return next(r for r in query.relations if r.alias == alias)


def _columns_read(query: Query, alias: str) -> list[str] | None:
    """The columns the query reads of relation ``alias``; None (all) where it has a subquery."""
    return None if query.has_subquery else list(_relation(query, alias).columns)


def _columns_of_table(query: Query, table: str) -> list[str] | None:
    """The columns the query reads of ``table`` under any of its aliases (None: all): each alias's read
    by key asks for all of them, so that aliases reduced by the same keys share one read (TPC-H Q21's
    three lineitems; ``by_key.rows_with_keys``)."""
    if query.has_subquery:
        return None
    return list(dict.fromkeys(c for r in query.relations if r.table == table for c in r.columns))


def _touched_locally(ctx: Context, table: str, join: OuterJoin, delta_view: str,
                     preserved_version: int) -> tuple[DataFrame | None, DataFrame | None] | None:
    """For a LEFT / RIGHT / SEMI / ANTI join's change (not FULL, not NOT IN: their NULL rules read
    more than the touched keys): (the preserved relation's rows with a touched key, as of
    ``preserved_version``; the padded table's rows with a touched key, as of its pin), each read by delta-rs
    with a key filter in this process and handed to Spark as local rows -- where Spark would scan
    both tables whole for a change touching a few keys (TPC-H Q13's customers and orders, Q4's and
    Q21's lineitem). Each side None, and Spark reads it, where it is neither a base table nor a view
    whose readers see its stored rows (``located``) the gate admits (``fastpath``) of at most
    ``limits.scan_rows`` rows; None for both where a key is a float (NaN matches only under Spark's rules)."""
    if join.how in ("full", "not_in"):
        return None
    preserved = _relation(ctx.query, join.preserved)
    sides = ((preserved.table, preserved_version, join.preserved_column), (table, ctx.pins[table], join.column))
    if all(located(ctx, name, version) is None for name, version, _ in sides):
        return None
    delta = ctx.spark.table(delta_view)
    keys = delta.where(f"`{join.column}` IS NOT NULL").select(f"`{join.column}`").distinct().toArrow().column(0)
    if pa.types.is_floating(keys.type):
        return None
    needed = (_columns_read(ctx.query, join.preserved),  # the preserved relation: the columns the query reads
              [c for c in delta.columns if c != MULTIPLICITY])  # the padded table: only the columns its change has
    read: list[DataFrame | None] = []
    for (name, version, column), columns in zip(sides, needed):
        found = rows_with_keys(ctx, name, version, {column: [keys]}, columns)
        read.append(None if found is None else storage.local_rows(ctx.spark, *found))
    return None if read == [None, None] else (read[0], read[1])


def _collected(frame: DataFrame, most: int) -> pa.Table | None:
    """``frame``'s rows brought to this process by one Spark job (Arrow, as pyspark reads it), if
    at most ``most``: a small state's change is then merged here (``merge_locally``), not MERGEd."""
    from lakeivm.sources.changes import plain_rows

    rows = frame.limit(most + 1).toArrow()
    return plain_rows(rows) if rows.num_rows <= most else None


def _undone(rows: DataFrame, delta: DataFrame) -> DataFrame:
    """``rows`` (a table's rows, as of a version) less ``delta`` (its netted change up to that version,
    counted in ``MULTIPLICITY``): the rows as they were before, each as many times as it occurred."""
    from pyspark.sql import functions as F

    columns = [f"`{c}`" for c in rows.columns]
    counted = rows.groupBy(*columns).agg(F.count(F.lit(1)).alias(MULTIPLICITY))
    reverted = counted.unionByName(delta.select(*columns, (-F.col(MULTIPLICITY)).alias(MULTIPLICITY)))
    left = reverted.groupBy(*columns).agg(F.sum(MULTIPLICITY).alias(MULTIPLICITY)).where(f"{MULTIPLICITY} > 0")
    return left.withColumn(MULTIPLICITY, F.explode(F.sequence(F.lit(1), F.col(MULTIPLICITY).cast("int")))).drop(MULTIPLICITY)


def _minus(after: DataFrame, before: DataFrame, keys: list[str], additive: tuple[str, ...] | list[str]) -> DataFrame:
    """``after - before`` as rows to add: ``before``'s additive columns negated."""
    from pyspark.sql import functions as F

    negated = before.select(*[F.col(f"`{k}`") for k in keys], *[(-F.col(f"`{c}`")).alias(c) for c in additive])
    return after.select(*[F.col(f"`{k}`") for k in keys], *[F.col(f"`{c}`") for c in additive]).unionByName(negated)


def finalize(query: Query, state: DataFrame, types: Mapping[str, str] | None = None) -> DataFrame:
    """State rows -> stored rows: the view's columns, then hidden keys and state columns. ``types``:
    the SQL's own column types, for a build (the state keeps sums as ``DECIMAL(38, s)``; a run's
    MERGE or rewrite casts to the stored types)."""
    keys = [k.name for k in query.group_keys]
    visible = [f"CAST(({o.finalize_sql}) AS {types[o.name]}) AS `{o.name}`" if types else f"{o.finalize_sql} AS `{o.name}`"
               for o in query.outputs]
    shown = {o.name for o in query.outputs}
    hidden = [f"`{k}`" for k in keys if k not in shown] + list(query.state_columns)
    return state.selectExpr(*visible, *hidden)


def merge_state(ctx: Context, change: DataFrame, stored: tuple[DataFrame, object] | None,
                multisets: Mapping[Aggregate, AdditiveTable]) -> None:
    """Add a state delta into the stored view (MERGE, or a rewrite of a small view: ``stored`` is its
    ``read_if_small``); delete groups whose count reaches zero.

    MIN/MAX values of the touched groups are re-read from their (already flushed) multisets.
    """
    from pyspark.sql import functions as F

    query, path = ctx.query, ctx.lake.view_path(ctx.view)
    keys = [k.name for k in query.group_keys]
    sums = [F.sum(c).alias(c) for c in query.additive_columns]
    change = change.groupBy(*keys).agg(*sums) if keys else change.agg(*sums)
    small, rows = stored or (None, None)
    on = " AND ".join(f"c.`{k}` <=> d.`{k}`" for k in keys) or "true"
    added = [f"COALESCE(c.`{s}`, 0) + COALESCE(d.`{s}`, 0) AS `{s}`" for s in query.additive_columns]
    joined = change.alias("d").join((small if small is not None else stored_matching(ctx, path, change, keys)).alias("c"),
                                    on=F.expr(on), how="left")
    touched = joined.selectExpr(*[f"d.`{k}` AS `{k}`" for k in keys], *added)
    for agg, multiset in multisets.items():
        # computed once: the touched groups occur twice in the join that adds an extremum, so an
        # unmaterialized plan doubles with each MIN/MAX (two of them already cost most of a run)
        values = multiset.stored_small()  # a small multiset: no Spark snapshot of it
        touched = _with_extremum(touched.localCheckpoint(eager=True), values[0] if values else ctx.lake.read(multiset.path), agg, keys)
    # the touched groups, computed once: the rewrite and MERGE both read them twice
    updated = finalize(query, touched).localCheckpoint(eager=True)
    if small is not None:
        _rewrite(ctx, path, rows, in_stored_types(updated, small).toArrow(), keys)
        return
    if keys and ctx.lake.merge_small(path, updated, keys, f's."{COUNT}" = 0', f's."{COUNT}" > 0'):
        return
    on = " AND ".join(f"t.`{k}` <=> s.`{k}`" for k in keys) or "true"
    if keys:
        clauses = (f"WHEN MATCHED AND s.{COUNT} = 0 THEN DELETE", "WHEN MATCHED THEN UPDATE SET *",
                   f"WHEN NOT MATCHED AND s.{COUNT} > 0 THEN INSERT *")
    else:
        clauses = ("WHEN MATCHED THEN UPDATE SET *", "WHEN NOT MATCHED THEN INSERT *")
    ctx.lake.merge(path, updated, on, *clauses)


def merge_counts(ctx: Context, changes: Sequence) -> bool:
    """Add a state delta into a stored view that keeps only its rows and their counts (every output a
    group key: a projection, a DISTINCT, a GROUP BY without aggregates), in one delta-rs MERGE that
    adds each changed row's count to the stored one and deletes the rows whose count reaches zero:
    the stored rows are not read first (``stored_matching``, ``merge_locally``), whatever the view's
    size -- a projection kept for the views over it is often most of its table. False, nothing written: a
    view of another shape, a float key, a table the gate refuses, or a change of more than
    ``limits.merge_rows`` rows (Spark's MERGE takes it)."""
    from lakeivm.sources.changes import plain_rows
    from lakeivm.store import fastpath

    query, most, path = ctx.query, ctx.lake.limits.merge_rows, ctx.lake.view_path(ctx.view)
    keys = [k.name for k in query.group_keys]
    if not keys or query.state_columns != (COUNT,) or not all(o.is_key for o in query.outputs):
        return False
    table = fastpath.load(path, write=True)
    schema = None if table is None else pa.schema(table.schema().to_arrow())
    if schema is None or sorted(schema.names) != sorted([*keys, COUNT]):
        return False
    rows = []
    for change in changes:
        rows.append(change if isinstance(change, pa.Table) else plain_rows(change.limit(most + 1).toArrow()))
        if sum(r.num_rows for r in rows) > most:
            return False
    change = pa.concat_tables([r.select(schema.names).cast(schema) for r in rows])
    q, count = ", ".join(quoted(k) for k in keys), quoted(COUNT)
    summed = duckdb_query(f"SELECT {q}, SUM({count}) AS {count} FROM change GROUP BY ALL HAVING SUM({count}) <> 0",
                          change=change)  # one source row per stored row, as a MERGE needs
    added = f"t.{count} + s.{count}"
    return ctx.lake.merge_arrow(path, summed, keys, f"{added} = 0", f"s.{count} > 0", table, updates={count: added})


def merge_locally(ctx: Context, changes: Sequence, stored: tuple[DataFrame, object] | None,
                  multisets: Mapping[Aggregate, AdditiveTable]) -> None:
    """``merge_state`` of state deltas summed in this process (Arrow) into a stored view merged here
    (``_view_merges_locally``): ``stored`` is a small view's ``read_if_small`` (frame and rows),
    None for a larger one, whose changed groups' rows a delta-rs scan reads by their keys. The
    touched groups' new state, and their MIN/MAX from the multisets (the rows their flush just
    wrote, the changed groups' alone for a large one), are sums and a join done by DuckDB; their
    view columns by Spark (``finalize``: one job over local rows, the view's own SQL expressions);
    a small view rewritten by delta-rs, a larger one MERGEd by delta-rs."""
    from lakeivm.sources.changes import plain_field, plain_rows
    from lakeivm.views.state import key_filter

    query, path = ctx.query, ctx.lake.view_path(ctx.view)
    keys, additive = [k.name for k in query.group_keys], list(query.additive_columns)
    if stored is None:
        table = _view_table(ctx)
        dataset = table.to_pyarrow_dataset()
        schema = pa.schema([plain_field(f) for f in dataset.schema])
        wanted = pa.concat_tables([c.select(keys).cast(pa.schema([schema.field(k) for k in keys])) for c in changes])
        rows = plain_rows(dataset.to_table(filter=key_filter(wanted, keys, schema))).cast(schema)
        frame = storage.local_rows(ctx.spark, rows.schema.empty_table(), storage.spark_ddl(table))  # the stored Spark types
    else:
        frame, rows = stored
        wanted = pa.concat_tables([c.select(keys).cast(pa.schema([rows.schema.field(k) for k in keys])) for c in changes])

    def extremum_rows(multiset: AdditiveTable):
        """The multiset's rows: whole where small, else the changed groups' (None: Spark must read it)."""
        small = multiset.stored_arrow()
        if small is not None:
            return small
        return multiset.local_matching(wanted, keys) if keys and multiset.readable_locally() else None

    values = {agg: extremum_rows(multiset) for agg, multiset in multisets.items()}
    if any(v is None for v in values.values()):  # a multiset outgrew a local read: Spark joins it
        merge_state(ctx, union_all(as_frames(ctx.spark, changes)), stored, multisets)
        return
    change = pa.concat_tables([c.select([*keys, *additive]).cast(pa.schema([rows.schema.field(n) for n in [*keys, *additive]]))
                               for c in changes])
    q = [quoted(k) for k in keys]
    group = f" GROUP BY {', '.join(q)}" if keys else ""

    def on(other: str) -> str:
        return " AND ".join(f"{other}.{k} IS NOT DISTINCT FROM d.{k}" for k in q) or "true"

    sums = ", ".join(f"SUM({quoted(c)}) AS {quoted(c)}" for c in additive)
    text = [f"WITH d AS (SELECT {', '.join([*q, sums])} FROM change{group})",
            "SELECT " + ", ".join([*[f"d.{k}" for k in q], *[f"COALESCE(s.{quoted(c)}, 0) + COALESCE(d.{quoted(c)}, 0) AS {quoted(c)}"
                                                          for c in additive],
                                   *[f"e{a.index}.{quoted(f'_lakeivm_s{a.index}')}" for a in values]]),
            f"FROM d LEFT JOIN stored AS s ON {on('s')}"]
    tables = {"change": change, "stored": rows}
    for agg, multiset in values.items():
        pick = "COUNT" if agg.func == "DISTINCT" else agg.func  # COUNT(DISTINCT): one multiset row per live value
        tables[f"m{agg.index}"] = multiset
        value = quoted(f"_lakeivm_s{agg.index}")
        text.append(f"LEFT JOIN (SELECT {', '.join([*q, f'{pick}(_lakeivm_v) AS {value}'])} FROM m{agg.index}"
                    f" WHERE _lakeivm_cnt > 0{group}) AS e{agg.index} ON {on(f'e{agg.index}')}")
    touched = duckdb_query("\n".join(text), **tables)
    touched = touched.cast(pa.schema([rows.schema.field(n) for n in touched.column_names]))
    updated = finalize(query, storage.local_rows(ctx.spark, touched))
    updated = in_stored_types(updated, frame).toArrow()
    if stored is not None:
        _rewrite(ctx, path, rows, updated, keys)
    elif not ctx.lake.merge_arrow(path, updated, keys, f's."{COUNT}" = 0', f's."{COUNT}" > 0'):
        raise AssertionError(f"{path}: delta-rs refused a MERGE it was found to admit")  # _view_table checked the gate


def _view_table(ctx: Context):
    """The stored view loaded by delta-rs, where a run MERGEs it in this process: grouped by keys,
    none a float, admitted by the gate for writes, at most ``limits.local_merge_rows`` rows (and
    ``scan_rows``); else None."""
    from lakeivm.store import fastpath

    keys = [k.name for k in ctx.query.group_keys]
    table = fastpath.load(ctx.lake.view_path(ctx.view), write=True) if keys else None
    most = min(ctx.lake.limits.local_merge_rows, ctx.lake.limits.scan_rows)
    if table is None or storage.rows_in(table, unknown=most + 1) > most:
        return None
    schema = pa.schema(table.schema().to_arrow())
    return None if any(pa.types.is_floating(schema.field(k).type) for k in keys) else table


def _rewrite(ctx: Context, path: str, stored, updated, keys: list[str]) -> None:
    """The small stored view (``stored``: its rows, an Arrow table read in this process) with its
    touched groups replaced by ``updated`` (Arrow; a group whose count reached zero dropped),
    written back as one overwrite by delta-rs: Spark takes no snapshot of the table, writes no
    commit, and runs no job beyond computing ``updated``."""

    updated = updated.cast(stored.schema)  # in_stored_types already gave it the stored column order
    if keys:
        touched = set(keys_in(updated, keys))
        kept = stored.filter(pa.array([k not in touched for k in keys_in(stored, keys)], pa.bool_()))
        updated = pa.concat_tables([kept, updated.filter(pc.greater(updated[COUNT], 0))])
    ctx.lake.overwrite_small(path, updated, stored.schema)


def _with_extremum(groups: DataFrame, multiset: DataFrame, agg: Aggregate, keys: list[str]) -> DataFrame:
    """``groups`` plus ``_lakeivm_s<i>``: the least (MIN) or greatest (MAX) value of each group's
    multiset, or its number of values with a positive count (COUNT(DISTINCT))."""
    from functools import reduce

    from pyspark.sql import functions as F

    pick = {"MIN": F.min, "MAX": F.max, "DISTINCT": F.count}[agg.func]  # COUNT(DISTINCT): one multiset row per live value
    value = f"_lakeivm_s{agg.index}"
    live = multiset.where("_lakeivm_cnt > 0")
    if not keys:
        return groups.crossJoin(live.agg(pick("_lakeivm_v").alias(value)))
    # Only the touched groups' values: the (small) groups are broadcast into the multiset scan.
    touched = groups.select(*[F.col(k).alias(f"_x_{k}") for k in keys])
    on = reduce(lambda a, b: a & b, [live[k].eqNullSafe(touched[f"_x_{k}"]) for k in keys])
    extrema = (live.join(F.broadcast(touched), on, "left_semi").groupBy(*keys).agg(pick("_lakeivm_v").alias(value))
               .select(*[F.col(k).alias(f"_x_{k}") for k in keys], value))
    on = reduce(lambda a, b: a & b, [groups[k].eqNullSafe(extrema[f"_x_{k}"]) for k in keys])
    return groups.join(extrema, on, "left").drop(*[f"_x_{k}" for k in keys])
