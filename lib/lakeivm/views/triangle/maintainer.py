"""IVM^ε triangle counts on Spark: heavy/light parts, auxiliary views, batch delta rule.

State (IVM^ε §2.3, digest §7.6), two additive ℤ-relations under ``views/<view>/aux/`` (one
MERGE each per run), keyed by a ``role`` column: ``rel`` (role, x, y, part, m) -- each relation
once, its rows tagged heavy/light by the degree of x -- and ``w`` (role, x, z, cnt) -- the views
W[R] = V_RS(a,c) = Σ_b R_h·S_l, W[S] = V_ST(b,a), W[T] = V_TR(c,b).
``result`` holds the count Q with the threshold base N, |D| and ε.

A batch is applied relation by relation (telescoped rule, digest §7.2): ΔK joined with the current
state of the other two only along bounded fan-outs (§7.3), so a step costs O(|ΔK|·N^max(ε,1-ε))
join output. An edge table joined with itself is kept as three logical copies and its batch is
applied to R, then S, then T. Afterwards the batch's values whose degree left the band move
(minor rebalancing, §7.4), or, when |D| leaves [N/4, N), N := 2|D|+1 and all parts and views are
rebuilt strictly (major rebalancing). Classes never affect correctness, only cost (§7.1).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from lakeivm.sql import MULTIPLICITY
from lakeivm.views.base import Context
from lakeivm.views.state import AdditiveTable, consolidate, small_side
from lakeivm.views.triangle.shape import NEXT, PREV, ROLES, TriangleShape, triangle_shape

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

REL_KEYS, VIEW_KEYS = ("x", "y", "part"), ("x", "z")
HEAVY, LIGHT = "h", "l"


class TriangleMaintainer:
    """Keeps a triangle count with IVM^ε (see module doc); ε from the spec (default 0.5)."""

    def __init__(self) -> None:
        self._tables: dict[str, RoleSlice] | None = None
        self._shared: dict[str, AdditiveTable] = {}
        self._count_delta = 0
        self._size_delta = 0
        self._touched: dict[str, list[DataFrame]] = {role: [] for role in ROLES}

    # -- protocol ------------------------------------------------------------------------------
    def state_tables(self, ctx: Context) -> Mapping[str, str]:
        return {"result": ctx.lake.view_path(ctx.view), **{n: t.path for n, t in self._shared_tables(ctx).items()}}

    def bootstrap(self, ctx: Context) -> None:
        shape, shared = _shape(ctx), self._shared_tables(ctx)
        relations = {}
        for side in shape.sides:
            rows = ctx.spark.read.table(ctx.snapshot(side.table, ctx.pins[side.table])).selectExpr(
                f"`{side.x}` AS x", f"`{side.y}` AS y", f"CAST(1 AS BIGINT) AS {MULTIPLICITY}")
            relations[side.role] = consolidate(rows, ("x", "y"), (MULTIPLICITY,)).localCheckpoint(eager=True)
        size = sum(r.count() for r in relations.values())
        base, epsilon = 2 * size + 1, _epsilon(ctx)
        parts, views = _partition(relations, base ** epsilon)
        shared["rel"].create(_by_role(parts))
        shared["w"].create(_by_role(views))
        count = _scalar(_delta_count(parts["R"], parts["T"], parts["S"], views["S"], small=lambda frame: frame))
        _write_result(ctx, shape, count, base, size, epsilon)
        ctx.checkpoint("bootstrap:result")

    def apply(self, ctx: Context, table: str, delta: DataFrame) -> None:
        for side in _shape(ctx).sides_of(table):
            rows = delta.selectExpr(f"`{side.x}` AS x", f"`{side.y}` AS y", MULTIPLICITY)
            self._step(ctx, side.role, rows)
        ctx.checkpoint(f"apply:{table}")

    def flush(self, ctx: Context) -> None:
        if not any(self._touched.values()):
            return
        shape, tables, shared = _shape(ctx), self._state(ctx), self._shared_tables(ctx)
        stored = ctx.lake.read(ctx.lake.view_path(ctx.view)).first()
        base, size, epsilon = stored["_lakeivm_base"], stored["_lakeivm_size"] + self._size_delta, _epsilon(ctx)
        if epsilon != stored["_lakeivm_epsilon"] or not base // 4 <= size < base:
            base = 2 * size + 1
            relations = {r: consolidate(tables[f"rel_{r}"].current(), ("x", "y"), (MULTIPLICITY,)) for r in ROLES}
            parts, views = _partition(relations, base ** epsilon)
            shared["rel"].replace(_by_role(parts))
            shared["w"].replace(_by_role(views))
        else:
            for role in ROLES:
                self._rebalance_minor(tables, role, base ** epsilon)
        for name, table in shared.items():
            table.flush()
            ctx.checkpoint(f"flush:{name}")
        _write_result(ctx, shape, stored[shape.output] + self._count_delta, base, size, epsilon)
        self._count_delta = self._size_delta = 0
        self._touched = {role: [] for role in ROLES}
        ctx.checkpoint("flush")

    def result(self, ctx: Context, version: int | None = None) -> DataFrame:
        return ctx.lake.read(ctx.lake.view_path(ctx.view), version).select(_shape(ctx).output)

    # -- the batch delta rule -------------------------------------------------------------------
    def _step(self, ctx: Context, role: str, rows: DataFrame) -> None:
        """Apply a consolidated batch ΔK to relation ``role`` (digest §7.3), frozen classes."""
        from pyspark.sql import functions as F

        tables = self._state(ctx)
        prev, nxt = PREV[role], NEXT[role]
        relation = tables[f"rel_{role}"]
        touched = rows.select("x").distinct()
        live = _slice(relation, touched).localCheckpoint(eager=True)
        classes = live.select("x", "part").distinct()
        new_class = HEAVY if _epsilon(ctx) == 0 else LIGHT
        delta = small_side(rows.join(F.broadcast(classes), "x", "left").withColumn("part", F.coalesce("part", F.lit(new_class))))
        other_prev, other_next = tables[f"rel_{prev}"].current(), tables[f"rel_{nxt}"].current()
        count = _delta_count(delta, other_prev, other_next, tables[f"w_{nxt}"].current())
        size, triangles = _size_change(live, delta).crossJoin(count).first()  # one Spark job for both
        self._size_delta += int(size or 0)
        self._count_delta += int(triangles)
        tables[f"w_{role}"].add(_view_rows(_part(delta, HEAVY), _part(other_next, LIGHT)))
        tables[f"w_{prev}"].add(_view_rows(_part(other_prev, HEAVY), _part(delta, LIGHT)))
        relation.add(delta)
        self._touched[role].append(touched)

    def _rebalance_minor(self, tables: dict[str, RoleSlice], role: str, theta: float) -> None:
        """Move the batch's values of ``role`` whose degree left the band (IVM^ε §4.1, digest §7.4)."""
        from pyspark.sql import functions as F

        if not self._touched[role]:
            return
        touched = self._touched[role][0]
        for more in self._touched[role][1:]:
            touched = touched.unionByName(more)
        live = _slice(tables[f"rel_{role}"], touched.distinct())
        degrees = live.groupBy("x", "part").agg(F.count("*").alias("deg"))
        moving = degrees.where(f"(part = '{LIGHT}' AND deg >= {1.5 * theta}) OR (part = '{HEAVY}' AND deg < {0.5 * theta})")
        moved = small_side(live.join(F.broadcast(moving.select("x")), "x"))
        if moved.isEmpty():
            return
        sign = F.when(F.col("part") == LIGHT, 1).otherwise(-1)  # +1: light -> heavy
        signed = moved.withColumn(MULTIPLICITY, F.col(MULTIPLICITY) * sign)
        flipped = F.when(F.col("part") == LIGHT, HEAVY).otherwise(LIGHT)
        tables[f"w_{role}"].add(_view_rows(signed, _part(tables[f"rel_{NEXT[role]}"].current(), LIGHT)))
        tables[f"w_{PREV[role]}"].add(_view_rows(_part(tables[f"rel_{PREV[role]}"].current(), HEAVY),
                                                 signed.withColumn(MULTIPLICITY, -F.col(MULTIPLICITY))))
        tables[f"rel_{role}"].add(moved.withColumn(MULTIPLICITY, -F.col(MULTIPLICITY)))
        tables[f"rel_{role}"].add(moved.withColumn("part", flipped))

    def _shared_tables(self, ctx: Context) -> dict[str, AdditiveTable]:
        """The two state tables: ``rel`` (role, x, y, part, m) and ``w`` (role, x, z, cnt)."""
        if not self._shared:
            aux = lambda name: ctx.lake.view_path(ctx.view, f"aux/{name}")  # noqa: E731
            self._shared = {"rel": AdditiveTable(ctx.lake, aux("rel"), ("role", *REL_KEYS), (MULTIPLICITY,)),
                            "w": AdditiveTable(ctx.lake, aux("w"), ("role", *VIEW_KEYS), ("cnt",))}
        return self._shared

    def _state(self, ctx: Context) -> dict[str, RoleSlice]:
        """{"rel_R": .., "w_T": ..}: each role's slice of the two shared state tables."""
        if self._tables is None:
            self._tables = {f"{name}_{r}": RoleSlice(table, r) for name, table in self._shared_tables(ctx).items() for r in ROLES}
        return self._tables


class RoleSlice:
    """The rows of one role (R, S or T) of a shared additive table with a ``role`` key column."""

    def __init__(self, table: AdditiveTable, role: str) -> None:
        self.table, self.role = table, role

    def current(self) -> DataFrame:
        frame = self.table.current()
        return frame.where(frame["role"] == self.role).drop("role")

    def add(self, delta: DataFrame) -> None:
        from pyspark.sql import functions as F

        self.table.add(delta.withColumn("role", F.lit(self.role)))


def _by_role(frames: Mapping[str, DataFrame]) -> DataFrame:
    """One frame of all roles' rows, tagged with their role."""
    from pyspark.sql import functions as F

    tagged = [frames[r].withColumn("role", F.lit(r)) for r in ROLES]
    return tagged[0].unionByName(tagged[1]).unionByName(tagged[2])


def _delta_count(delta: DataFrame, prev: DataFrame, nxt: DataFrame, view_next: DataFrame, small=small_side) -> DataFrame:
    """Σ ΔK(x,y)·NEXT(y,z)·PREV(z,x) as three bounded fan-out joins (digest §7.3): tA over
    PREV_h (any NEXT part), tB through the view W[NEXT] (NEXT_h·PREV_l), tC over NEXT_l·PREV_l.
    A batch's ``delta`` comes from ``small_side``, and each join's first step is computed and shipped
    the same way (``small``), so the stored relations are scanned, never shuffled; the bootstrap
    passes a whole relation and ``small=identity``: one query, Spark chooses the joins."""
    from pyspark.sql import functions as F

    d, p, n, w = delta.alias("d"), _part(prev, HEAVY).alias("p"), nxt.alias("n"), view_next.alias("w")
    dp = small(d.join(p, F.col("d.x") == F.col("p.y")).select(
        F.col("d.x").alias("dx"), F.col("d.y").alias("dy"), F.col("p.x").alias("px"), F.expr(f"d.{MULTIPLICITY} * p.{MULTIPLICITY}").alias("fan")))
    t_a = (dp.join(n, (F.col("dy") == F.col("n.x")) & (F.col("px") == F.col("n.y")))
           .select(F.expr(f"fan * n.{MULTIPLICITY}").alias("v")))
    t_b = d.join(w, (F.col("d.y") == F.col("w.x")) & (F.col("d.x") == F.col("w.z"))).select(F.expr(f"d.{MULTIPLICITY} * w.cnt").alias("v"))
    nl, pl = _part(nxt, LIGHT).alias("nl"), _part(prev, LIGHT).alias("pl")
    dn = small(d.join(nl, F.col("d.y") == F.col("nl.x")).select(
        F.col("d.x").alias("dx"), F.col("nl.y").alias("ny"), F.expr(f"d.{MULTIPLICITY} * nl.{MULTIPLICITY}").alias("fan")))
    t_c = (dn.join(pl, (F.col("ny") == F.col("pl.x")) & (F.col("dx") == F.col("pl.y")))
           .select(F.expr(f"fan * pl.{MULTIPLICITY}").alias("v")))
    return t_a.unionByName(t_b).unionByName(t_c).agg(F.coalesce(F.sum("v"), F.lit(0)).cast("bigint"))


def _view_rows(heavy: DataFrame, light_next: DataFrame) -> DataFrame:
    """W(x, z) = Σ_y heavy(x, y)·light_next(y, z), grouped by (x, z)."""
    from pyspark.sql import functions as F

    h, n = heavy.alias("h"), light_next.alias("n")
    return (h.join(n, F.col("h.y") == F.col("n.x"))
            .groupBy(F.col("h.x").alias("x"), F.col("n.y").alias("z"))
            .agg(F.sum(F.expr(f"h.{MULTIPLICITY} * n.{MULTIPLICITY}")).cast("bigint").alias("cnt")))


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


def _slice(table: RoleSlice, values: DataFrame) -> DataFrame:
    """The table's live rows whose x is among ``values`` (consolidated)."""
    from pyspark.sql import functions as F

    return consolidate(table.current().join(F.broadcast(values), "x"), REL_KEYS, (MULTIPLICITY,))


def _size_change(live: DataFrame, delta: DataFrame) -> DataFrame:
    """One value: how many (x, y) keys appear minus disappear when ``delta`` is added to ``live``."""
    from pyspark.sql import functions as F

    before = live.groupBy("x", "y").agg(F.sum(MULTIPLICITY).alias("b"))
    change = delta.groupBy("x", "y").agg(F.sum(MULTIPLICITY).alias("d"))
    joined = change.join(before, ["x", "y"], "left").select(F.coalesce("b", F.lit(0)).alias("b"), "d")
    return joined.agg(F.sum(F.expr("CASE WHEN b = 0 AND b + d != 0 THEN 1 WHEN b != 0 AND b + d = 0 THEN -1 ELSE 0 END")))


def _part(rows: DataFrame, part: str) -> DataFrame:
    return rows.where(rows["part"] == part)


def _scalar(frame: DataFrame) -> int:
    return int(frame.first()[0])


def _shape(ctx: Context) -> TriangleShape:
    shape = triangle_shape(ctx.query)
    assert shape is not None, "the classifier only sends triangle counts to the triangle kind"
    return shape


def _epsilon(ctx: Context) -> float:
    return float(ctx.spec.options.get("epsilon", 0.5))


def _write_result(ctx: Context, shape: TriangleShape, count: int, base: int, size: int, epsilon: float) -> None:
    ddl = f"`{shape.output}` BIGINT, _lakeivm_base BIGINT, _lakeivm_size BIGINT, _lakeivm_epsilon DOUBLE"
    row = ctx.spark.createDataFrame([(int(count), int(base), int(size), float(epsilon))], ddl)
    row.write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(ctx.lake.view_path(ctx.view))
