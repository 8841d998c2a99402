"""First-order IVM of join + GROUP BY + SUM/COUNT/AVG views: the classical delta rule.

For a table R occurring as aliases R1..Rn, ΔV = Σ_i V(R1', .., R(i-1)', ΔRi, R(i+1), .., Rn) with
every other table as of its watermark, R' = R at the pin: a telescoping sum, exact for self-joins
and asymmetric plans. Per group the state is a row count and, per aggregated expression, the sum
of its non-null values and their count (lakeivm.sql); states add, and a group whose count reaches
zero is deleted. Cost per batch: one join of the delta with the other relations, one MERGE.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from lakeivm.lake import CDF
from lakeivm.sql import COUNT, Query, state_sql
from lakeivm.views.base import Context

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

HIDDEN = "_lakeivm_"


class FirstOrderMaintainer:
    """Keeps ``views/<view>/result``: the view's columns plus hidden per-group state columns.

    The state deltas of the tables applied in one run are summed and MERGEd once, in ``flush``.
    """

    def __init__(self) -> None:
        self._changes: list[DataFrame] = []

    def state_tables(self, ctx: Context) -> Mapping[str, str]:
        return {"result": ctx.lake.view_path(ctx.view)}

    def bootstrap(self, ctx: Context) -> None:
        sources = {r.alias: ctx.snapshot(r.table, ctx.pins[r.table]) for r in ctx.query.relations}
        state = ctx.spark.sql(state_sql(ctx.query, sources))
        if ctx.query.group_keys:
            state = state.where(f"{COUNT} > 0")
        rows = finalize(ctx.query, state)
        rows.write.format("delta").mode("overwrite").option("overwriteSchema", "true").option(CDF, "true").save(
            ctx.lake.view_path(ctx.view)
        )
        ctx.checkpoint("bootstrap:result")

    def apply(self, ctx: Context, table: str, delta: DataFrame) -> None:
        name = f"lakeivm_{ctx.view}_{table}_delta"
        delta.createOrReplaceTempView(name)
        parts = [ctx.spark.sql(state_sql(ctx.query, self._sources(ctx, table, alias, name), alias))
                 for alias in ctx.query.aliases_of(table)]
        for part in parts:
            self._changes.append(part.localCheckpoint(eager=True))
        ctx.checkpoint(f"apply:{table}")

    def flush(self, ctx: Context) -> None:
        if not self._changes:
            return
        change = self._changes[0]
        for part in self._changes[1:]:
            change = change.unionByName(part)
        merge_state(ctx, change)
        self._changes = []
        ctx.checkpoint("flush")

    def result(self, ctx: Context, version: int | None = None) -> DataFrame:
        df = ctx.lake.read(ctx.lake.view_path(ctx.view), version)
        return df.select(*[c for c in df.columns if not c.startswith(HIDDEN)])

    @staticmethod
    def _sources(ctx: Context, table: str, delta_alias: str, delta_view: str) -> dict[str, str]:
        aliases = ctx.query.aliases_of(table)
        position = aliases.index(delta_alias)
        sources = {}
        for relation in ctx.query.relations:
            if relation.alias == delta_alias:
                sources[relation.alias] = delta_view
            elif relation.table == table and aliases.index(relation.alias) < position:
                sources[relation.alias] = ctx.snapshot(table, ctx.pins[table])
            else:
                sources[relation.alias] = ctx.snapshot(relation.table, ctx.watermarks[relation.table])
        return sources


def finalize(query: Query, state: DataFrame) -> DataFrame:
    """State rows -> stored rows: the view's columns, then hidden keys and state columns."""
    keys = [k.name for k in query.group_keys]
    visible = [f"{o.finalize_sql} AS `{o.name}`" for o in query.outputs]
    shown = {o.name for o in query.outputs}
    hidden = [f"`{k}`" for k in keys if k not in shown] + list(query.state_columns)
    return state.selectExpr(*visible, *hidden)


def merge_state(ctx: Context, change: DataFrame) -> None:
    """Add a state delta into the stored view (MERGE); delete groups whose count reaches zero."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    query, path = ctx.query, ctx.lake.view_path(ctx.view)
    keys = [k.name for k in query.group_keys]
    sums = [F.sum(c).alias(c) for c in query.state_columns]
    change = change.groupBy(*keys).agg(*sums) if keys else change.agg(*sums)
    on = " AND ".join(f"c.`{k}` <=> d.`{k}`" for k in keys) or "true"
    added = [f"COALESCE(c.`{s}`, 0) + COALESCE(d.`{s}`, 0) AS `{s}`" for s in query.state_columns]
    joined = change.alias("d").join(ctx.lake.read(path).alias("c"), on=F.expr(on), how="left")
    # Materialize the (small) set of touched groups: MERGE evaluates its source more than once.
    updated = finalize(query, joined.selectExpr(*[f"d.`{k}` AS `{k}`" for k in keys], *added)).localCheckpoint(eager=True)
    target = DeltaTable.forPath(ctx.spark, path).alias("t")
    merge = target.merge(updated.alias("s"), " AND ".join(f"t.`{k}` <=> s.`{k}`" for k in keys) or "true")
    if keys:
        merge = merge.whenMatchedDelete(f"s.{COUNT} = 0").whenMatchedUpdateAll().whenNotMatchedInsertAll(f"s.{COUNT} > 0")
    else:
        merge = merge.whenMatchedUpdateAll().whenNotMatchedInsertAll()
    merge.execute()
