"""F-IVM on Spark: the stored views of a view tree as additive Delta tables (F-IVM §3-4).

State: ``views/<view>/aux/<view id>`` for every view of μ(τ, U) (Fig. 5), U the spec's
``updatable`` tables (all by default): keys (the view's variables) + flat payload columns
(``payload.PayloadRing``), zero-count keys deleted. ``result`` stores the root view: its rows are rendered as the SQL's columns, with the root's
payload (the SQL's state and, for a regression, the cofactor triple) in hidden ``_lakeivm_``
columns, so the root needs no table of its own and a run MERGEs it once.

- ``bootstrap`` evaluates the tree bottom-up from the snapshots at the pins (Fig. 3): a leaf
  groups its relation by its keys, summing ``multiplicity × lifts``; an inner view joins its
  children on their shared keys, multiplies payloads (⊗) and sums by its keys (⊕).
- ``apply`` lifts a table's netted delta at its leaf and pushes it up ``path_to_root`` (Fig. 4): at
  each step δV = ⊕ (δV_child ⊗ siblings), the siblings read as stored plus this run's buffered
  deltas, i.e. as of their watermarks, since the engine applies table by table (§4;
  docs/kinds/fivm.md#choices-the-paper-leaves-open). A table joined with itself is applied one
  occurrence after the other. Cost per step: one broadcast join of the (small) delta with the
  sibling views and a group-by. A table outside U has no stored siblings on its path: its changes
  re-evaluate the tree from the snapshots at the watermarks (a rebuild of the state, logged as that
  table's cost, so the planner batches it). When the delta is small, the steps run in DuckDB on
  Arrow tables in this process (``fivm.local``): one Spark job per table instead of one per step. A
  small stored sibling is read whole by delta-rs; a larger one (up to ``limits.scan_rows``) is
  scanned by delta-rs for the keys the step joins (a Spark job costs more than such a scan), and a
  large view's delta is appended by delta-rs.
- ``flush`` MERGEs each view's summed delta once, then rewrites the result rows of the touched
  groups.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import pyarrow as pa

from lakeivm.store.lake import CDF
from lakeivm.columns import HIDDEN, MULTIPLICITY
from lakeivm.sql import COUNT, recompute_sql, state_sql, typed_empty_sql
from lakeivm.views.base import Context
from lakeivm.views.fivm.payload import ALIVE
from lakeivm.views.fivm.plan import FivmPlan, build_plan, leaf_weights
from lakeivm.views.fivm.tree import View
from lakeivm.views.state import (AdditiveTable, as_frames, Readable, as_read, readable_groups, consolidate, output_types, overwrite, read_if_small,
                                 read_result)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

COFACTOR = "_lakeivm_cof_"


class FivmMaintainer:
    """Keeps an F-IVM view (see module doc); plan from the SQL and the spec's options."""

    def __init__(self) -> None:
        self._plan: FivmPlan | None = None
        self._tables: dict[str, AdditiveTable] | None = None
        self._root_deltas: list[DataFrame] = []
        self._rebuilt = False  # this run re-evaluated the tree: flush rewrites the whole result
        self._exact: dict[str, str] | None = None

    # -- protocol ------------------------------------------------------------------------------
    def state_tables(self, ctx: Context) -> Mapping[str, str]:
        return {"result": ctx.lake.view_path(ctx.view), **{vid: t.path for vid, t in self._state(ctx).items()}}

    def bootstrap(self, ctx: Context) -> None:
        plan, tables = self.plan(ctx), self._state(ctx)
        sources = {r.alias: ctx.snapshot(r.table, ctx.pins[r.table]) for r in plan.query.relations}
        root = self._evaluate(ctx, plan.tree.root, sources, lambda view, rows: _create(ctx, tables, view, rows))
        rows = _render(plan, root, _output_types(ctx, plan), self._exact_sums(ctx))
        overwrite(ctx.lake, rows, ctx.lake.view_path(ctx.view), configuration={CDF: "true"})
        ctx.checkpoint("bootstrap:result")

    def apply(self, ctx: Context, table: str, delta: DataFrame) -> None:
        plan, tables = self.plan(ctx), self._state(ctx)
        aliases = plan.query.aliases_of(table)
        if not set(aliases) <= plan.tree.updatable:
            self._rebuild(ctx, table)
            return
        name = f"lakeivm_{ctx.view}_{table}_delta"
        delta.createOrReplaceTempView(name)
        for alias in aliases:  # a self-join: one occurrence after the other (§4)
            leaf = plan.tree.leaf(alias)
            change = _leaf(ctx, plan, leaf, name, f"{alias}.{MULTIPLICITY}")
            small = ctx.delta_rows.get(table, math.inf) <= ctx.lake.limits.small_delta_rows
            if small and self._propagate_locally(plan, tables, alias, change):
                continue
            if leaf.id in tables:
                change = tables[leaf.id].add(change)
            for step in plan.tree.path_to_root(alias):  # a view not stored stays a lazy plan
                inputs = [(step.child, change, True)] + [(s, tables[s.id].current(), False) for s in step.siblings]
                change = _join_sum(plan, step.view, inputs)
                if step.view.id in tables:
                    change = tables[step.view.id].add(change)
            self._root_deltas.append(change.localCheckpoint(eager=True))
        ctx.checkpoint(f"apply:{table}")

    def _propagate_locally(self, plan: FivmPlan, tables: Mapping[str, AdditiveTable], alias: str, leaf_delta: DataFrame) -> bool:
        """``apply``'s propagation in this process (``fivm.local``) when every stored sibling on the
        path is read locally -- whole when small, else only its rows that join the step's change
        (``AdditiveTable.local_matching``): one Spark job (the lifted leaf delta), each step in
        DuckDB. False (nothing done) otherwise."""
        from lakeivm.sources.changes import plain_rows
        from lakeivm.views.fivm import local

        steps = plan.tree.path_to_root(alias)
        shared = {(step.view.id, s.id): [k for k in s.keys if k in step.child.keys] for step in steps for s in step.siblings}
        if not all(tables[sibling].readable_locally(whole=not keys) for (_, sibling), keys in shared.items()):
            return False
        change = plain_rows(leaf_delta.toArrow())
        leaf = plan.tree.leaf(alias)
        if leaf.id in tables:
            tables[leaf.id].add(change)
        for step in steps:
            inputs = [(step.child, change)] + [(s, tables[s.id].local_matching(change, shared[step.view.id, s.id])) for s in step.siblings]
            change = local.join_sum(plan, step.view, inputs)
            if step.view.id in tables:
                tables[step.view.id].add(change)
        self._root_deltas.append(change)
        return True

    def _rebuild(self, ctx: Context, table: str) -> None:
        """Apply a change of ``table`` (outside U) by re-evaluating every stored view from the
        snapshots at the watermarks, ``table`` at its pin; later tables of the run apply on top."""
        plan, tables = self.plan(ctx), self._state(ctx)
        versions = {**ctx.watermarks, table: ctx.pins[table]}
        sources = {r.alias: ctx.snapshot(r.table, versions[r.table]) for r in plan.query.relations}

        def store(view: View, rows: DataFrame) -> DataFrame:
            if view.id not in tables:  # the root: flush renders it
                return rows.localCheckpoint(eager=True)
            tables[view.id].replace(rows)
            return tables[view.id].current()

        self._root_deltas = [self._evaluate(ctx, plan.tree.root, sources, store)]
        self._rebuilt = True
        ctx.checkpoint(f"apply:{table}")

    def flush(self, ctx: Context) -> None:
        if not self._root_deltas:
            return
        from pyspark.sql import functions as F

        plan, tables = self.plan(ctx), self._state(ctx)
        for vid, table in tables.items():
            table.flush()
            ctx.checkpoint(f"flush:{vid}")
        path = ctx.lake.view_path(ctx.view)
        keys, columns = plan.tree.root.keys, plan.payload_columns(plan.tree.root)
        small = read_if_small(ctx.lake, path)  # read in this process: rewritten whole by delta-rs below
        whole = not keys or self._rebuilt or small is not None
        # a large result: the changed groups' stored rows by a key-filtered scan, else Spark's read (its snapshot costs jobs)
        local = None if whole else _stored_at_changed_keys(ctx, plan, path, self._root_deltas)
        if small is not None:
            stored, schema = small[0], small[1].schema
        else:
            stored, schema = local if local is not None else ctx.lake.read(path), None
        types = {f.name: f.dataType.simpleString() for f in stored.schema.fields}
        deltas = as_frames(ctx.spark, self._root_deltas)
        change = deltas[0]
        for more in deltas[1:]:
            change = change.unionByName(more)
        if whole:  # the whole result: rebuilt, or small
            root = change if self._rebuilt else root_rows(plan, stored).unionByName(change)
            if keys:
                root = root.groupBy(*keys).agg(*[F.sum(c).alias(c) for c in columns]).where(F.col(ALIVE) != 0)
            rows = _render(plan, root, types, self._exact_sums(ctx))
            if small is not None and rows.columns == schema.names:
                ctx.lake.overwrite_small(path, rows.toArrow(), schema)
            else:  # one query reading the stored snapshot it replaces (Delta pins it at analysis)
                rows.write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(path)
        else:  # the touched groups: stored state + delta, MERGEd (a group whose count reaches 0 is deleted)
            touched = change.select(*keys).distinct()
            on = F.expr(" AND ".join(f"o.`{k}` <=> t.`{k}`" for k in keys))
            old = root_rows(plan, stored).alias("o").join(touched.alias("t"), on, "left_semi")
            fresh = old.unionByName(change).groupBy(*keys).agg(*[F.sum(c).alias(c) for c in columns])
            _merge_result(ctx, plan, _render(plan, fresh, types, self._exact_sums(ctx)).localCheckpoint(eager=True))
        self._root_deltas, self._rebuilt = [], False
        ctx.checkpoint("flush:result")
        ctx.checkpoint("flush")  # every write of the run done (the crash point all kinds share)

    def _exact_sums(self, ctx: Context) -> dict[str, str]:
        """{SUM state: SQL type} of the sums SQL keeps exact (DECIMAL, integers), from analysing the
        SQL's state query. The payload sums are doubles; ``_render`` casts them back to these types
        before finalizing, so e.g. AVG over DECIMAL divides exactly and rounds as SQL does."""
        if self._exact is None:
            from pyspark.sql.types import DecimalType, IntegralType

            def exact(schema) -> dict[str, str]:
                return {f.name: f.dataType.simpleString() for f in schema.fields
                        if f.name.startswith("_lakeivm_s") and isinstance(f.dataType, (DecimalType, IntegralType))}

            plan, lake = self.plan(ctx), ctx.lake
            relations = plan.query.relations
            # from the SQL and its sources' types alone (an upstream's from its result's log), once per process: no snapshot read
            types = {r.alias: tuple(_types_at(lake, r.table, ctx.pins[r.table]).items()) for r in relations}
            key = ("exact sums", state_sql(plan.query, {r.alias: r.table for r in relations}), tuple(types.values()))
            if key not in lake.cache:
                lake.cache[key] = exact(ctx.spark.sql(typed_empty_sql(plan.query, types)).schema)
            self._exact = lake.cache[key]
        return self._exact

    def stored_view(self, ctx: Context, vid: str, state_versions: Mapping[str, int]) -> DataFrame:
        """The rows of stored view ``vid`` at a run's state versions (the root from the result)."""
        plan = self.plan(ctx)
        if vid == plan.tree.root.id:
            return root_rows(plan, ctx.lake.read(ctx.lake.view_path(ctx.view), state_versions["result"]))
        table = self._state(ctx)[vid]  # append-only: the stored bag summed per key
        return consolidate(ctx.lake.read(table.path, state_versions[vid]), table.keys, table.payloads, table.alive)

    def result(self, ctx: Context, version: int | None = None) -> DataFrame:
        df = read_result(ctx, version)
        return as_read(df, ctx.query).select(*[c for c in df.columns if not c.startswith(HIDDEN)])

    def readable(self, ctx: Context) -> Readable | None:
        """Its stored groups as its readers see them (``readable_groups``)."""
        return readable_groups(ctx.query)

    # -- helpers ------------------------------------------------------------------------------
    def plan(self, ctx: Context) -> FivmPlan:
        if self._plan is None:
            self._plan = build_plan(ctx.query, ctx.spec.options)
        return self._plan

    def _state(self, ctx: Context) -> dict[str, AdditiveTable]:
        if self._tables is None:
            plan = self.plan(ctx)
            self._tables = {
                vid: AdditiveTable(ctx.lake, ctx.lake.view_path(ctx.view, f"aux/{vid}"), view.keys,
                                   plan.payload_columns(view), alive=ALIVE, append_only=True)  # read by joins + sums only
                for vid, view in plan.tree.views.items() if vid in plan.tree.stored and vid != plan.tree.root.id
            }
        return self._tables

    def definitions(self, ctx: Context, versions: Mapping[str, int]) -> dict[str, DataFrame]:
        """Every stored view recomputed from the snapshots at ``versions`` (nothing written): what
        the maintained tables must equal (the recompute oracle of the tests)."""
        plan, out = self.plan(ctx), {}
        sources = {r.alias: ctx.snapshot(r.table, versions[r.table]) for r in plan.query.relations}

        def store(view: View, rows: DataFrame) -> DataFrame:
            rows = rows.localCheckpoint(eager=True)
            out[view.id] = consolidate(rows, view.keys, plan.payload_columns(view), ALIVE)
            return rows

        self._evaluate(ctx, plan.tree.root, sources, store)
        return out

    def _evaluate(self, ctx: Context, view: View, sources: Mapping[str, str],
                  store: Callable[[View, DataFrame], DataFrame]) -> DataFrame:
        """V (Fig. 3) from the snapshots, bottom-up; each stored view goes through ``store``
        (which returns the rows its parent reads), the others are computed once and cached."""
        plan = self.plan(ctx)
        if view.relation is not None:
            rows = _leaf(ctx, plan, view, sources[view.relation], "CAST(1 AS BIGINT)")
        else:
            inputs = [(c, self._evaluate(ctx, c, sources, store), False) for c in view.children]
            rows = _join_sum(plan, view, inputs)
        if view.id in plan.tree.stored:
            return store(view, rows)
        return rows.localCheckpoint(eager=True)


def _create(ctx: Context, tables: Mapping[str, AdditiveTable], view: View, rows: DataFrame) -> DataFrame:
    """Bootstrap: write a stored view from scratch; its parent reads it back (the root is returned
    for the result)."""
    if view.id not in tables:
        return rows.localCheckpoint(eager=True)
    tables[view.id].create(rows)
    ctx.checkpoint(f"bootstrap:{view.id}")
    return tables[view.id].current()


def root_rows(plan: FivmPlan, result: DataFrame) -> DataFrame:
    """The root view as the result table stores it: keys as variables, payload columns (the
    inverse of ``_render`` on the hidden state)."""
    from pyspark.sql import functions as F

    first = {}
    for name, variable in plan.group_key_variables():
        first.setdefault(variable, name)
    payload = [F.col(comp.state).alias(f"p_{k}") for k, comp in enumerate(plan.components)]
    payload += [F.col(COFACTOR + c).alias(c) for c in plan.payload_columns(plan.tree.root) if not c.startswith("p_")]
    return result.select(*[F.col(first[v]).alias(v) for v in plan.tree.root.keys], *payload)


def _leaf(ctx: Context, plan: FivmPlan, leaf: View, source: str, multiplicity: str) -> DataFrame:
    """⊕ over a relation's private variables: group by the leaf's keys, sum multiplicity × lifts.
    Rows with a NULL join value are dropped (an SQL inner join drops them too)."""
    alias = leaf.relation
    keys = [f"{alias}.`{plan.column_of(alias, v)}` AS `{v}`" for v in leaf.keys]
    sums = [f"SUM({multiplicity} * {weight}) AS `{column}`" for column, weight in leaf_weights(plan, alias)]
    where = [*plan.query.filters.get(alias, ()),
             *[f"{alias}.`{plan.column_of(alias, v)}` IS NOT NULL" for v in leaf.keys if plan.is_join_variable(v)]]
    group = f" GROUP BY {', '.join(f'`{v}`' for v in leaf.keys)}" if leaf.keys else ""
    text = (f"SELECT {', '.join([*keys, *sums])} FROM {source} AS {alias}"
            + (f" WHERE {' AND '.join(f'({w})' for w in where)}" if where else "") + group)
    return ctx.spark.sql(text).where(f"`{ALIVE}` IS NOT NULL")


def _join_sum(plan: FivmPlan, view: View, inputs: list[tuple[View, DataFrame, bool]]) -> DataFrame:
    """⊕_X (V_1 ⊗ … ⊗ V_k) by ``view.keys``: join on shared keys (a delta input is broadcast),
    multiply payloads (``PayloadRing.multiply`` on Columns), group-by-sum. Shared keys are join
    variables, never NULL, so plain equality matches SQL."""
    from pyspark.sql import functions as F

    joined, have, factors = None, set(), []
    for i, (child, rows, small) in enumerate(inputs):
        columns = plan.payload_columns(child)
        renamed = rows.select(*child.keys, *[F.col(c).alias(f"_f{i}_{c}") for c in columns])
        if small:
            renamed = F.broadcast(renamed)
        shared = [k for k in child.keys if k in have]
        if joined is None:
            joined = renamed
        elif shared:
            joined = joined.join(renamed, shared)
        else:
            joined = joined.crossJoin(renamed)
        have |= set(child.keys)
        factors.append((plan.lifted(child), {c: F.col(f"_f{i}_{c}") for c in columns}))
    product = plan.ring.multiply(factors)
    summed = joined.groupBy(*view.keys).agg(*[F.sum(e).alias(c) for c, e in product.items()])
    return summed.where(F.col(ALIVE).isNotNull())


def _output_types(ctx: Context, plan: FivmPlan) -> dict[str, str]:
    """The SQL's output column types (analysis only), so the result has the view's own types."""
    sources = {r.alias: ctx.snapshot(r.table, ctx.pins[r.table]) for r in plan.query.relations}
    return output_types(ctx.spark, recompute_sql(plan.query, sources))


def _render(plan: FivmPlan, root: DataFrame, types: Mapping[str, str], exact: Mapping[str, str]) -> DataFrame:
    """Root view rows -> result rows: the SQL's outputs, hidden keys, state and cofactor columns.
    With no GROUP BY the result is one row even over an empty join (COUNT 0, SUM NULL). The
    outputs are finalized from the sums cast to their ``exact`` SQL types; the hidden state keeps
    the double payloads."""
    from pyspark.sql import functions as F

    columns = plan.payload_columns(plan.tree.root)
    if not plan.tree.root.keys:
        root = root.agg(*[F.coalesce(F.sum(c), F.lit(0)).cast(root.schema[c].dataType).alias(c) for c in columns])
    keys = plan.group_key_variables()
    state = root.select(
        *[F.col(v).alias(name) for name, v in keys],
        *[F.col(f"p_{k}").alias(comp.state) for k, comp in enumerate(plan.components)],
        *[F.col(c).alias(COFACTOR + c) for c in columns if not c.startswith("p_")])
    shown = {o.name for o in plan.query.outputs}
    hidden = [f"`{name}`" for name, _ in keys if name not in shown]
    hidden += [f"`_raw{c}` AS `{c}`" if c in exact else f"`{c}`" for c in state.columns if c.startswith(HIDDEN)]
    if exact:  # (Spark Connect refuses an empty withColumns)
        state = state.select("*", *[F.col(c).alias(f"_raw{c}") for c in exact]).withColumns(
            {c: F.col(c).cast(t) for c, t in exact.items()})
    visible = [f"CAST(({o.finalize_sql}) AS {types[o.name]}) AS `{o.name}`" for o in plan.query.outputs]
    return state.selectExpr(*visible, *dict.fromkeys(hidden))


def _types_at(lake, table: str, version: int) -> dict[str, str]:
    """{column: Spark SQL type} of a base table at ``version``, or of an upstream view's rows as its
    run ``version`` left them (``upstream.types_at``)."""
    from lakeivm.sources import upstream

    if table in lake.upstreams:
        return upstream.types_at(lake, lake.upstreams[table].spec, version)
    return lake.schema_at(lake.table_path(table), version)


def _stored_at_changed_keys(ctx: Context, plan: FivmPlan, path: str, deltas: list) -> DataFrame | None:
    """The stored result's rows of the groups the root ``deltas`` change, read by a key-filtered
    delta-rs scan in this process and handed to Spark as local rows (a superset: each key column
    filtered on its own; the semi-join that reads them is exact), where every delta is Arrow, the
    gate admits the table, it holds at most ``limits.scan_rows`` rows and no key is a float (NaN
    matches as Spark's ``<=>`` has it only there). None: Spark reads the result (a scan and a
    shuffle of every group, most of a second for 30,000 groups)."""
    from lakeivm.sources.changes import plain_field, plain_rows
    from lakeivm.store import fastpath, storage
    from lakeivm.views.state import key_filter

    most = ctx.lake.limits.scan_rows
    if not all(isinstance(d, pa.Table) for d in deltas):
        return None
    table = fastpath.load(path)
    if table is None or storage.rows_in(table, unknown=most + 1) > most:
        return None
    dataset = table.to_pyarrow_dataset()
    schema = pa.schema([plain_field(f) for f in dataset.schema])
    names = dict((v, name) for name, v in reversed(plan.group_key_variables()))  # a variable's first group key
    stored_keys = [names[v] for v in plan.tree.root.keys]
    if any(pa.types.is_floating(schema.field(k).type) for k in stored_keys):
        return None
    wanted = pa.concat_tables([d.select(plan.tree.root.keys).rename_columns(stored_keys)
                               .cast(pa.schema([schema.field(k) for k in stored_keys])) for d in deltas])
    rows = plain_rows(dataset.to_table(filter=key_filter(wanted, stored_keys, schema))).cast(schema)
    return storage.local_rows(ctx.spark, rows, storage.spark_ddl(table))


def _merge_result(ctx: Context, plan: FivmPlan, rows: DataFrame) -> None:
    """Touched groups into the result: updated, inserted, or deleted when their count is gone (by
    delta-rs in this process where it can: ``Lake.merge_small``)."""
    path, keys = ctx.lake.view_path(ctx.view), [name for name, _ in plan.group_key_variables()]
    if keys and ctx.lake.merge_small(path, rows, keys, f's."{COUNT}" = 0', f'NOT (s."{COUNT}" = 0)'):
        return
    on = " AND ".join(f"t.`{name}` <=> s.`{name}`" for name in keys) or "true"
    gone = f"s.`{COUNT}` = 0"
    ctx.lake.merge(path, rows, on, f"WHEN MATCHED AND {gone} THEN DELETE",
                   "WHEN MATCHED THEN UPDATE SET *", f"WHEN NOT MATCHED AND NOT ({gone}) THEN INSERT *")


def coefficients(lake, spec, latest: bool = False) -> list[tuple[dict[str, object], dict[str, float] | None]]:
    """The least-squares fit of a regression view (§7.2), per group, at the view's last consistent
    (or, ``latest``, newest) run: [(group key values, {"intercept": b0, feature: b, ...})], read
    from the root's cofactor triple in O(m³) per group (None for a group with no complete tuple)."""
    from lakeivm.store import commit
    from lakeivm.sources.upstream import prepare
    from lakeivm.errors import UnsupportedQuery
    from lakeivm.views.fivm.rings import ols_coefficients

    ctx, maintainer = prepare(lake, spec)
    if not isinstance(maintainer, FivmMaintainer) or not maintainer.plan(ctx).features:
        raise UnsupportedQuery(f"view {spec.name!r} is not a regression view; give it `features:` and `label:`.")
    row = commit.required_run(lake, spec.name, consistent=not latest)
    plan = maintainer.plan(ctx)
    ring = plan.ring.cofactor
    keys = [name for name, _ in plan.group_key_variables()]
    out = []
    for stored in lake.read(lake.view_path(spec.name), row.state_versions["result"]).collect():
        flat = {c: stored[COFACTOR + c] for c in ring.flat_columns()}
        payload = ring.from_flat(flat)
        fit = ols_coefficients(ring, payload, plan.label) if payload.c > 0 else None
        out.append(({k: stored[k] for k in keys}, fit))
    return out


def describe_fit(lake, spec, latest: bool = False) -> str:
    """The fitted model of a regression view as text, one line per group (``lakeivm read``)."""
    plan_label = spec.options.get("label")
    lines = []
    for group, fit in coefficients(lake, spec, latest):
        where = ", ".join(f"{k}={v}" for k, v in group.items())
        head = f"least squares of {plan_label}" + (f" [{where}]" if where else "")
        if fit is None:
            lines.append(f"{head}: no complete join tuple")
            continue
        terms = " ".join(f"{b:+.6g}*{name}" for name, b in fit.items() if name != "intercept")
        lines.append(f"{head} = {fit['intercept']:.6g} {terms}")
    return "\n".join(lines)
