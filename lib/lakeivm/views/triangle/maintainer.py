"""IVM^ε triangle counts on Spark: heavy/light parts, auxiliary views, batch delta rule.

State (IVM^ε §3, Figure 2; one table per relation, rows marked heavy or light:
docs/kinds/triangle.md#notation-and-routing), two additive ℤ-relations under ``views/<view>/aux/``,
keyed by a ``role`` column: ``rel`` (role, x, y, part, m) -- each relation once, its rows tagged
heavy/light by the degree of x -- and ``w`` (role, x, z, cnt) -- the views W[R] = V_RS(a,c), W[S] =
V_ST(b,a), W[T] = V_TR(c,b). ``result`` holds the count Q with the threshold base N, |D| and ε.

A run collects the batch's netted changes to the driver and applies them there, relation by relation
(docs/kinds/triangle.md#batches), as SQL run by DuckDB over the stored rows the batch reads
(``sql_batch.py``, checked against the whole-state batch rule): the rows of ``rel`` and ``w`` named
by the batch's values, fetched as Arrow, never as Python objects. Tables of up to the lake's
``limits.local_state_rows`` rows are read by delta-rs in the run's process and rewritten whole; larger ones
are bags of appended changes (an append is one cheap commit, a MERGE into millions of rows rewrites
their files), scanned by delta-rs by the batch's values and summed per key by DuckDB, and compacted
now and then (``AdditiveTable``): no Spark job but the change feed's. A lake whose large state was
written with deletion vectors (before appends) is fetched by Spark and MERGEd; so is a bag too large
for delta-rs to scan. When |D| leaves [N/4, N) (major rebalancing, N := 2|D|+1), ε changes, or a
batch has more than ``limits.driver_rows`` changed keys, parts and views are rebuilt strictly on Spark. An edge
table joined with itself is kept as three logical copies R, S, T. Classes never affect correctness,
only cost (docs/kinds/triangle.md#batches).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from lakeivm.store import storage
from lakeivm.columns import MULTIPLICITY
from lakeivm.views.base import Context
from lakeivm.views import state
from lakeivm.views.state import AdditiveTable, consolidate, read_result
from lakeivm.views.triangle.core import HEAVY, LIGHT
from lakeivm.views.triangle.shape import NEXT, ROLES, TriangleShape, triangle_shape
from lakeivm.views.triangle.sql_batch import BatchRun, run_batch

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

REL_KEYS, VIEW_KEYS = ("x", "y", "part"), ("x", "z")


class TriangleMaintainer:
    """Keeps a triangle count with IVM^ε (see module doc); ε from the spec (default 0.5)."""

    def __init__(self) -> None:
        self._shared: dict[str, AdditiveTable] = {}
        self._reset()

    def _reset(self) -> None:
        self._changes: list[pa.Table] = []  # ΔK on the driver (role, x, y, m), each table's netted
        self._frames: dict[str, list[DataFrame]] = {role: [] for role in ROLES}  # the same ΔK on Spark
        self._too_large = False

    # -- protocol ------------------------------------------------------------------------------
    def state_tables(self, ctx: Context) -> Mapping[str, str]:
        return {"result": ctx.lake.view_path(ctx.view), **{n: t.path for n, t in self._shared_tables(ctx).items()}}

    def bootstrap(self, ctx: Context) -> None:
        shape, shared = _shape(ctx), self._shared_tables(ctx)
        relations = {}
        for side in shape.sides:
            rows = ctx.spark.read.table(ctx.snapshot(side.table, ctx.pins[side.table])).selectExpr(
                f"`{side.x}` AS x", f"`{side.y}` AS y", f"CAST(1 AS BIGINT) AS {MULTIPLICITY}")
            relations[side.role] = consolidate(rows, ("x", "y"), (MULTIPLICITY,))
        epsilon = _epsilon(ctx)
        parts, views, base, size = _strict(relations, epsilon)
        shared["rel"].create(_by_role(parts))
        shared["w"].create(_by_role(views))
        _write_result(ctx, shape, _full_count(parts, views), base, size, epsilon)
        ctx.checkpoint("bootstrap:result")

    def apply(self, ctx: Context, table: str, delta: DataFrame) -> None:
        """Collect the table's netted change of each relation it plays (once per column pair)."""
        import pyarrow as pa

        collected: dict[tuple[str, str], pa.Table | None] = {}
        for side in _shape(ctx).sides_of(table):
            rows = delta.selectExpr(f"`{side.x}` AS x", f"`{side.y}` AS y", MULTIPLICITY)
            self._frames[side.role].append(rows)
            if (side.x, side.y) not in collected:
                collected[side.x, side.y] = _collect_changes(rows, ctx.lake.limits.driver_rows)
            changes = collected[side.x, side.y]
            if changes is None:
                self._too_large = True
            else:
                self._changes.append(changes.add_column(0, "role", pa.array([side.role] * changes.num_rows, pa.string())))
        ctx.checkpoint(f"apply:{table}")

    def flush(self, ctx: Context) -> None:
        if not any(self._frames.values()):
            return
        shape, shared = _shape(ctx), self._shared_tables(ctx)
        stored = _stored_result(ctx)
        base, size, epsilon = stored["_lakeivm_base"], stored["_lakeivm_size"], stored["_lakeivm_epsilon"]
        if self._too_large:
            relations = {r: _live(shared["rel"], r, self._frames[r]) for r in ROLES}
            epsilon = _epsilon(ctx)
            count, base, size = self._rebuild(ctx, relations, epsilon, full_count=True)
        else:
            run = self._run_on_driver(ctx, base, epsilon, size)
            count, size = stored[shape.output] + run.count_delta, run.size
            if run.major or epsilon != _epsilon(ctx):
                epsilon = _epsilon(ctx)
                _, base, size = self._rebuild(ctx, {r: _live(shared["rel"], r) for r in ROLES}, epsilon, full_count=False)
        for name, table in shared.items():
            table.flush()
            ctx.checkpoint(f"flush:{name}")
        _write_result(ctx, shape, count, base, size, epsilon)
        self._reset()
        ctx.checkpoint("flush")

    def result(self, ctx: Context, version: int | None = None) -> DataFrame:
        return read_result(ctx, version).select(_shape(ctx).output)

    # -- the two ways of a run ------------------------------------------------------------------
    def _run_on_driver(self, ctx: Context, base: int, epsilon: float, size: int) -> BatchRun:
        """Apply the batch on the driver to the stored rows it reads (``sql_batch.run_batch``,
        fetched by delta-rs, else by Spark) and buffer the resulting changes of ``rel`` and ``w``."""
        import pyarrow as pa

        shared = self._shared_tables(ctx)
        if shared["rel"].readable_locally() and shared["w"].readable_locally():  # read by delta-rs: no Spark job
            types = shared["rel"].arrow_schema()
            fetch_rel = lambda xs, ys: _local_where(shared["rel"], x=xs, y=ys)  # noqa: E731
            fetch_views = lambda xs: _local_where(shared["w"], x=xs)  # noqa: E731
        else:
            from pyspark.sql.pandas.types import to_arrow_schema

            rel, view = (ctx.lake.read(shared[name].path) for name in ("rel", "w"))
            types = to_arrow_schema(rel.schema)
            fetch_rel = lambda xs, ys: _spark_where(ctx, rel, x=xs, y=ys)  # noqa: E731
            fetch_views = lambda xs: _spark_where(ctx, view, x=xs)  # noqa: E731
        schema = pa.schema([types.field(name) for name in ("role", "x", "y", MULTIPLICITY)])
        changes = pa.concat_tables([t.select(schema.names).cast(schema) for t in self._changes]) if self._changes else schema.empty_table()
        run = run_batch(changes, fetch_rel, fetch_views, base, epsilon, size, MULTIPLICITY)
        shared["rel"].add(run.rel_delta)
        shared["w"].add(run.view_delta)
        return run

    def _rebuild(self, ctx: Context, relations: Mapping[str, DataFrame], epsilon: float,
                 full_count: bool) -> tuple[int | None, int, int]:
        """Major rebalancing (IVM^ε §4, Prop. 13): N := 2|D|+1, strict parts and views from the relations;
        Q recounted from scratch when ``full_count`` (the count is split-independent otherwise)."""
        parts, views, base, size = _strict(relations, epsilon)
        shared = self._shared_tables(ctx)
        shared["rel"].replace(_by_role(parts))
        shared["w"].replace(_by_role(views))
        return (_full_count(parts, views) if full_count else None), base, size

    def _shared_tables(self, ctx: Context) -> dict[str, AdditiveTable]:
        """The two state tables: ``rel`` (role, x, y, part, m) and ``w`` (role, x, z, cnt)."""
        if not self._shared:
            aux = lambda name: ctx.lake.view_path(ctx.view, f"aux/{name}")  # noqa: E731
            rows = ctx.lake.limits.local_state_rows  # up to this size the run reads and rewrites them in this process
            self._shared = {"rel": AdditiveTable(ctx.lake, aux("rel"), ("role", *REL_KEYS), (MULTIPLICITY,), local_rows=rows),
                            "w": AdditiveTable(ctx.lake, aux("w"), ("role", *VIEW_KEYS), ("cnt",), local_rows=rows)}
            for table in self._shared.values():
                table.append_only = _appends(table)
        return self._shared


def _local_where(table: AdditiveTable, **values):
    """The stored rows of ``table`` whose column (a keyword) is in its values (any column matching),
    scanned by delta-rs (``AdditiveTable.local_where``); NULL matches NULL."""
    import pyarrow.compute as pc

    types = table.arrow_schema()
    wanted = pc.scalar(False)
    for column, among in values.items():
        wanted |= storage.is_in(column, among, types.field(column).type)
    return table.local_where(wanted)


def _spark_where(ctx: Context, stored: DataFrame, **values) -> pa.Table:
    """``_local_where`` by Spark: null-safe broadcast semi joins, each column's rows once."""
    import pyarrow as pa
    from pyspark.sql import functions as F

    picked, rest = [], stored
    for column, among in values.items():
        keys = F.broadcast(storage.local_rows(ctx.spark, pa.table({"v": among})))
        picked.append(rest.join(keys, rest[column].eqNullSafe(keys["v"]), "left_semi"))
        rest = rest.join(keys, rest[column].eqNullSafe(keys["v"]), "left_anti")
    union = picked[0]
    for frame in picked[1:]:
        union = union.unionByName(frame)
    return union.toArrow()


def _appends(table: AdditiveTable) -> bool:
    """Whether a state table takes its changes as appends (a bag, summed per key by its readers)
    rather than MERGEs: yes, unless delta-rs may not read and write it (``fastpath``) -- e.g. a lake
    whose large state got deletion vectors before appends, which keeps its MERGEs."""
    return table.writable_locally()


def _stored_result(ctx: Context) -> dict:
    """The stored result row (the count, N, |D|, ε): read by delta-rs, else by Spark."""
    rows = ctx.lake.read_small_arrow(ctx.lake.view_path(ctx.view), 10)
    if rows is not None and rows.num_rows:
        return rows.to_pylist()[0]
    return ctx.lake.read(ctx.lake.view_path(ctx.view)).first().asDict()


def _collect_changes(rows: DataFrame, max_rows: int) -> pa.Table | None:
    """The netted (x, y, Δm) of a delta on the driver, or None beyond ``max_rows`` keys."""
    table = consolidate(rows, ("x", "y"), (MULTIPLICITY,)).limit(max_rows + 1).toArrow()
    return None if table.num_rows > max_rows else table


def _live(rel: AdditiveTable, role: str, deltas: Iterable[DataFrame] = ()) -> DataFrame:
    """Relation ``role``'s consolidated rows (x, y, m), parts dropped, plus ``deltas``."""
    from pyspark.sql import functions as F

    frame = rel.current()
    frame = frame.where(frame["role"] == role).select("x", "y", MULTIPLICITY)
    for delta in deltas:
        frame = frame.unionByName(delta.select("x", "y", F.col(MULTIPLICITY).cast("bigint").alias(MULTIPLICITY)))
    return consolidate(frame, ("x", "y"), (MULTIPLICITY,))


def _by_role(frames: Mapping[str, DataFrame]) -> DataFrame:
    """One frame of all roles' rows, tagged with their role."""
    from pyspark.sql import functions as F

    tagged = [frames[r].withColumn("role", F.lit(r)) for r in ROLES]
    return tagged[0].unionByName(tagged[1]).unionByName(tagged[2])


def _full_count(parts: Mapping[str, DataFrame], views: Mapping[str, DataFrame]) -> int:
    """Q = Σ R(x,y)·S(y,z)·T(z,x) from scratch, by the batch plan with ΔR = R
    (docs/kinds/triangle.md#batches): tA over T_h (any S part), tB through W[S] = S_h·T_l, tC over
    S_l·T_l. One query; Spark chooses the joins."""
    from pyspark.sql import functions as F

    d, p, n, w = parts["R"].alias("d"), _part(parts["T"], HEAVY).alias("p"), parts["S"].alias("n"), views["S"].alias("w")
    dp = d.join(p, F.col("d.x") == F.col("p.y")).select(
        F.col("d.x").alias("dx"), F.col("d.y").alias("dy"), F.col("p.x").alias("px"), F.expr(f"d.{MULTIPLICITY} * p.{MULTIPLICITY}").alias("fan"))
    t_a = (dp.join(n, (F.col("dy") == F.col("n.x")) & (F.col("px") == F.col("n.y")))
           .select(F.expr(f"fan * n.{MULTIPLICITY}").alias("v")))
    t_b = d.join(w, (F.col("d.y") == F.col("w.x")) & (F.col("d.x") == F.col("w.z"))).select(F.expr(f"d.{MULTIPLICITY} * w.cnt").alias("v"))
    nl, pl = _part(parts["S"], LIGHT).alias("nl"), _part(parts["T"], LIGHT).alias("pl")
    dn = d.join(nl, F.col("d.y") == F.col("nl.x")).select(
        F.col("d.x").alias("dx"), F.col("nl.y").alias("ny"), F.expr(f"d.{MULTIPLICITY} * nl.{MULTIPLICITY}").alias("fan"))
    t_c = (dn.join(pl, (F.col("ny") == F.col("pl.x")) & (F.col("dx") == F.col("pl.y")))
           .select(F.expr(f"fan * pl.{MULTIPLICITY}").alias("v")))
    return int(t_a.unionByName(t_b).unionByName(t_c).agg(F.coalesce(F.sum("v"), F.lit(0)).cast("bigint")).first()[0])


def _view_rows(heavy: DataFrame, light_next: DataFrame) -> DataFrame:
    """W(x, z) = Σ_y heavy(x, y)·light_next(y, z), grouped by (x, z)."""
    from pyspark.sql import functions as F

    h, n = heavy.alias("h"), light_next.alias("n")
    return (h.join(n, F.col("h.y") == F.col("n.x"))
            .groupBy(F.col("h.x").alias("x"), F.col("n.y").alias("z"))
            .agg(F.sum(F.expr(f"h.{MULTIPLICITY} * n.{MULTIPLICITY}")).cast("bigint").alias("cnt")))


def _strict(relations: Mapping[str, DataFrame], epsilon: float) -> tuple[dict[str, DataFrame], dict[str, DataFrame], int, int]:
    """Parts, views, base N = 2|D|+1 and |D| of a strict partition of ``relations`` (Prop. 10, 13)."""
    relations = {role: frame.localCheckpoint(eager=True) for role, frame in relations.items()}
    size = sum(frame.count() for frame in relations.values())
    base = 2 * size + 1
    parts, views = _partition(relations, base ** epsilon)
    return parts, views, base, size


def _partition(relations: Mapping[str, DataFrame], theta: float) -> tuple[dict[str, DataFrame], dict[str, DataFrame]]:
    """Strict partition (heavy iff degree ≥ θ, IVM^ε Def. 8) and the three views from scratch."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    parts = {}
    for role, rows in relations.items():
        degree = F.count("*").over(Window.partitionBy("x"))
        parts[role] = (rows.withColumn("part", F.when(degree >= theta, HEAVY).otherwise(LIGHT))
                       .select(*REL_KEYS, MULTIPLICITY).localCheckpoint(eager=True))
    views = {role: _view_rows(_part(parts[role], HEAVY), _part(parts[NEXT[role]], LIGHT)) for role in ROLES}
    return parts, views


def _part(rows: DataFrame, part: str) -> DataFrame:
    return rows.where(rows["part"] == part)


def _shape(ctx: Context) -> TriangleShape:
    shape = triangle_shape(ctx.query)
    assert shape is not None, "the classifier only sends triangle counts to the triangle kind"
    return shape


def _epsilon(ctx: Context) -> float:
    return float(ctx.spec.options.get("epsilon", 0.5))


def _write_result(ctx: Context, shape: TriangleShape, count: int, base: int, size: int, epsilon: float) -> None:
    """The one result row: created by Spark, then rewritten by delta-rs (one commit, no Spark job)."""
    path, row = ctx.lake.view_path(ctx.view), (int(count), int(base), int(size), float(epsilon))
    if ctx.lake.is_delta(path):
        import pyarrow as pa

        schema = pa.schema([(shape.output, pa.int64()), ("_lakeivm_base", pa.int64()), ("_lakeivm_size", pa.int64()),
                            ("_lakeivm_epsilon", pa.float64())])
        stored = ctx.lake.read_small_arrow(path, 10, write=True)
        if stored is not None and stored.schema.names == schema.names:
            ctx.lake.overwrite_small(path, pa.Table.from_pylist([dict(zip(schema.names, row))], schema), schema)
            return
    ddl = f"`{shape.output}` BIGINT, _lakeivm_base BIGINT, _lakeivm_size BIGINT, _lakeivm_epsilon DOUBLE"
    ctx.spark.createDataFrame([row], ddl).write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(path)
