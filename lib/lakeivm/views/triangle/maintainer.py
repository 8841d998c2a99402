"""IVM^ε triangle counts on Spark: heavy/light parts, auxiliary views, batch delta rule.

State (IVM^ε §2.3, digest §7.6), two additive ℤ-relations under ``views/<view>/aux/``, keyed by a
``role`` column: ``rel`` (role, x, y, part, m) -- each relation once, its rows tagged heavy/light by
the degree of x -- and ``w`` (role, x, z, cnt) -- the views W[R] = V_RS(a,c), W[S] = V_ST(b,a),
W[T] = V_TR(c,b). ``result`` holds the count Q with the threshold base N, |D| and ε.

A run collects the batch's netted changes to the driver and applies them there, relation by
relation (telescoped rule, digest §7.2), over a *slice* of the state: the rows along the bounded
fan-outs of the steps (§7.3) and of the values that move (§7.4), fetched from ``rel`` and ``w``
(``slices.py``, whose pure run is checked against the whole-state batch rule). Tables of up to
``LOCAL_STATE_ROWS`` rows are read by delta-rs in the run's process and rewritten whole; larger
ones are bags of appended changes (an append is one cheap commit, a MERGE into millions of rows
~10 s), scanned by delta-rs by the slice's keys and summed per key by DuckDB, and compacted now and
then (``AdditiveTable``): no Spark job but the change feed's. A lake whose large state was written
with deletion vectors (before appends) keeps a Spark fetch and MERGEs; a bag too large for delta-rs
to scan is fetched by Spark. When |D| leaves [N/4, N) (major rebalancing, N := 2|D|+1), ε
changes, or a batch has more than DRIVER_ROWS changed keys, parts and views are rebuilt strictly
on Spark. An edge table joined with itself is kept as three
logical copies R, S, T. Classes never affect correctness, only cost (§7.1).
"""
from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from lakeivm.sql import MULTIPLICITY
from lakeivm.views.base import Context
from lakeivm.views import state
from lakeivm.views.state import AdditiveTable, consolidate, duckdb_connection, read_result
from lakeivm.views.triangle.core import HEAVY, LIGHT, add_all
from lakeivm.views.triangle.shape import NEXT, ROLES, TriangleShape, triangle_shape
from lakeivm.views.triangle.slices import Requests, Slice, SliceRun, first_requests, run_on_slice, second_requests

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

REL_KEYS, VIEW_KEYS = ("x", "y", "part"), ("x", "z")
DRIVER_ROWS = 200_000  # a batch with more changed keys than this (per relation) is applied by a rebuild


class TriangleMaintainer:
    """Keeps a triangle count with IVM^ε (see module doc); ε from the spec (default 0.5)."""

    def __init__(self) -> None:
        self._shared: dict[str, AdditiveTable] = {}
        self._reset()

    def _reset(self) -> None:
        self._changes: dict[str, dict[Any, int]] = {role: {} for role in ROLES}  # netted ΔK on the driver, no zeros
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
        collected: dict[tuple[str, str], dict[Any, int] | None] = {}
        for side in _shape(ctx).sides_of(table):
            rows = delta.selectExpr(f"`{side.x}` AS x", f"`{side.y}` AS y", MULTIPLICITY)
            self._frames[side.role].append(rows)
            if (side.x, side.y) not in collected:
                collected[side.x, side.y] = _collect_changes(rows)
            changes = collected[side.x, side.y]
            if changes is None:
                self._too_large = True
            else:
                add_all(self._changes[side.role], changes.items())
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
    def _run_on_driver(self, ctx: Context, base: int, epsilon: float, size: int) -> SliceRun:
        """Fetch the slice of the state the batch reads, apply the batch rule to it on the driver
        (``slices.run_on_slice``) and buffer the resulting changes of ``rel`` and ``w``."""
        shared = self._shared_tables(ctx)
        local = shared["rel"].readable_locally() and shared["w"].readable_locally()  # read by delta-rs: no Spark job
        if local:
            fetch = lambda req: _fetch_local(shared["rel"], shared["w"], req)  # noqa: E731
        else:
            rel, view = (_stored(ctx, shared[name]) for name in ("rel", "w"))
            fetch = lambda req: _fetch(ctx, rel, view, req)  # noqa: E731
        fetched = fetch(first_requests(self._changes))
        fetched.update(fetch(second_requests(self._changes, fetched, base ** epsilon, epsilon)))
        run = run_on_slice(self._changes, fetched, base, epsilon, size)
        rel_delta = [(role, x, y, part, m) for (role, part, x, y), m in run.rel_delta.items()]
        view_delta = [(role, x, z, c) for (role, x, z), c in run.view_delta.items()]
        if local:
            shared["rel"].add(_arrow(shared["rel"].arrow_schema(), ("role", "x", "y", "part", MULTIPLICITY), rel_delta))
            shared["w"].add(_arrow(shared["w"].arrow_schema(), ("role", "x", "z", "cnt"), view_delta))
        else:
            shared["rel"].add(_frame(ctx, rel.schema, ("role", "x", "y", "part", MULTIPLICITY), rel_delta))
            shared["w"].add(_frame(ctx, view.schema, ("role", "x", "z", "cnt"), view_delta))
        return run

    def _rebuild(self, ctx: Context, relations: Mapping[str, DataFrame], epsilon: float,
                 full_count: bool) -> tuple[int | None, int, int]:
        """Major rebalancing (IVM^ε §4.2): N := 2|D|+1, strict parts and views from the relations;
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
            rows = state.LOCAL_STATE_ROWS  # up to this size the run reads and rewrites them in this process
            self._shared = {"rel": AdditiveTable(ctx.lake, aux("rel"), ("role", *REL_KEYS), (MULTIPLICITY,), local_rows=rows),
                            "w": AdditiveTable(ctx.lake, aux("w"), ("role", *VIEW_KEYS), ("cnt",), local_rows=rows)}
            for table in self._shared.values():
                table.append_only = _appends(table)
        return self._shared


def _fetch(ctx: Context, rel: DataFrame, view: DataFrame, req: Requests) -> Slice:
    """The requested rows of the stored ``rel`` and ``view`` (``w``), in one query (semantics:
    ``slices.answer``). A single scan of ``rel`` marks the rows each request wants through broadcast
    joins with the driver's key sets; a value's degree comes back as the count of its rows."""
    from pyspark.sql import functions as F

    on_x, on_y = _Flags(), _Flags()
    on_x.add("light_out", req.light_out)
    on_x.add("rows_of", req.rows_of)
    on_x.add("degree", req.degrees)
    on_y.add("heavy_into", req.heavy_into)
    for grid in ("a", "c"):
        on_x.add(f"grid_{grid}_x", ((role, x) for g, role, x in req.grid_x if g == grid))
        on_y.add(f"grid_{grid}_y", ((role, y) for g, role, y in req.grid_y if g == grid))
    pairs = _Flags()
    pairs.add("pair", req.pairs)
    marked = rel
    for flags, on in ((on_x, ["role", "x"]), (on_y, ["role", "y"]), (pairs, ["role", "x", "y"])):
        marked = flags.join(ctx, marked, on)
    flag = lambda name: F.coalesce(F.col(name), F.lit(False))  # noqa: E731
    wanted = ((flag("light_out") & (F.col("part") == LIGHT)) | flag("rows_of") | flag("pair")
              | (flag("heavy_into") & (F.col("part") == HEAVY))
              | (flag("grid_a_x") & flag("grid_a_y")) | (flag("grid_c_x") & flag("grid_c_y")))
    marked = marked.withColumn("row", wanted).where(F.col("row") | flag("degree"))
    parts = [marked.groupBy("role", "x", F.when(F.col("row"), F.col("y")).alias("y"), "part",
                            F.when(F.col("row"), F.col(MULTIPLICITY)).alias(MULTIPLICITY), "row",
                            flag("degree").alias("degree"))
             .agg(F.count("*").alias("n")).withColumn("cnt", F.lit(None).cast("bigint"))]
    if req.light_after:
        movers = rel.join(F.broadcast(_frame(ctx, rel.schema, ("role", "x"), list(req.light_after))), ["role", "x"])
        successors = movers.select(_next_role().alias("role"), F.col("y").alias("x")).distinct()
        parts.append(rel.where(rel["part"] == LIGHT).join(F.broadcast(successors), ["role", "x"]).select(
            "role", "x", "y", "part", MULTIPLICITY, F.lit(True).alias("row"), F.lit(False).alias("degree"),
            F.lit(1).cast("bigint").alias("n"), F.lit(None).cast("bigint").alias("cnt")))
    if req.views:
        keys = _frame(ctx, rel.schema, ("role", "x", "y"), list(req.views))
        parts.append(view.withColumnRenamed("z", "y").join(F.broadcast(keys), ["role", "x", "y"]).select(
            "role", "x", "y", F.lit(None).cast("string").alias("part"), F.lit(None).cast("bigint").alias(MULTIPLICITY),
            F.lit(False).alias("row"), F.lit(False).alias("degree"), F.lit(0).cast("bigint").alias("n"), "cnt"))
    union = parts[0]
    for frame in parts[1:]:
        union = union.unionByName(frame)
    table = union.toArrow()
    fetched = Slice()
    names = ("role", "x", "y", "part", MULTIPLICITY, "row", "degree", "n", "cnt")
    for role, x, y, part, m, row, degree, n, cnt in zip(*(table.column(name).to_pylist() for name in names)):
        if row:
            fetched.rows[role, x, y] = (part, m)
        if degree:
            fetched.degrees[role, x] = (part, fetched.degrees.get((role, x), (part, 0))[1] + n)
        if cnt is not None:
            fetched.views[role, x, y] = cnt
    return fetched


def _fetch_local(rel: AdditiveTable, view: AdditiveTable, req: Requests) -> Slice:
    """``_fetch`` in this process: the stored rows whose x or y a request names, scanned by delta-rs
    (``AdditiveTable.local_where``), summed per key (a large table is a bag of appended changes;
    every row of a key shares its x and y, so a scan by either finds all of them) and marked as
    ``_fetch`` marks them, by DuckDB: only the rows a request wants come to Python (a hub's
    degree is counted there, not fetched)."""
    import pyarrow.compute as pc

    grid = {g: ({(r, x) for h, r, x in req.grid_x if h == g}, {(r, y) for h, r, y in req.grid_y if h == g}) for g in ("a", "c")}
    on_x = {"degree": req.degrees, "light_out": req.light_out, "rows_of": req.rows_of, "a_x": grid["a"][0], "c_x": grid["c"][0]}
    on_y = {"heavy_into": req.heavy_into, "a_y": grid["a"][1], "c_y": grid["c"][1]}
    types = rel.arrow_schema()
    xs = {x for keys in on_x.values() for _, x in keys} | {x for _, x, _ in req.pairs}
    ys = {y for keys in on_y.values() for _, y in keys}
    picked = rel.local_where(pc.field("x").isin(_values(xs, types, "x")) | pc.field("y").isin(_values(ys, types, "y")))
    m, flag = MULTIPLICITY, lambda name: f"COALESCE({name}, FALSE)"  # noqa: E731
    wanted = (f"{flag('rows_of')} OR ({flag('light_out')} AND part = '{LIGHT}') OR ({flag('heavy_into')} AND part = '{HEAVY}')"
              f" OR p.role IS NOT NULL OR ({flag('a_x')} AND {flag('a_y')}) OR ({flag('c_x')} AND {flag('c_y')})")
    with duckdb_connection(picked=picked, on_x=_flags(on_x, "x", types), on_y=_flags(on_y, "y", types),
                           pairs=_arrow(types, ("role", "x", "y"), req.pairs)) as con:
        con.execute(f"""CREATE TEMP TABLE marked AS SELECT r.*, {flag('degree')} AS degree, {wanted} AS wanted
            FROM ({_summed_sql("picked", ("role", "x", "y", "part"), m)}) r
            LEFT JOIN on_x ON r.role = on_x.role AND r.x IS NOT DISTINCT FROM on_x.x
            LEFT JOIN on_y ON r.role = on_y.role AND r.y IS NOT DISTINCT FROM on_y.y
            LEFT JOIN pairs p ON r.role = p.role AND r.x IS NOT DISTINCT FROM p.x AND r.y IS NOT DISTINCT FROM p.y""")
        degrees = con.sql("SELECT role, x, part, COUNT(*) FROM marked WHERE degree GROUP BY role, x, part").fetchall()
        rows = con.sql(f'SELECT role, x, y, part, "{m}" FROM marked WHERE wanted').fetchall()
    fetched = Slice()
    fetched.degrees = {(role, x): (part, n) for role, x, part, n in degrees}
    fetched.rows = {(role, x, y): (part, m) for role, x, y, part, m in rows}
    if req.light_after:  # the light rows out of every successor y of a mover x
        successors = {(NEXT[role], y) for role, x, y, _, _ in _summed_where(rel, "x", req.light_after)}
        for role, x, y, part, m in _summed_where(rel, "x", successors):
            if part == LIGHT:
                fetched.rows[role, x, y] = (part, m)
    if req.views:
        for role, x, z, cnt in _summed_where(view, "x", {(r, x) for r, x, _ in req.views}):
            if (role, x, z) in req.views:
                fetched.views[role, x, z] = cnt
    return fetched


def _summed_where(table: AdditiveTable, column: str, keys: set[tuple]) -> list[tuple]:
    """The stored rows of ``table`` whose (role, ``column``) is in ``keys``, summed per key."""
    import pyarrow.compute as pc

    if not keys:
        return []
    types = table.arrow_schema()
    picked = table.local_where(pc.field(column).isin(_values({v for _, v in keys}, types, column)))
    summed = _summed_sql("picked", table.keys, *table.payloads)
    with duckdb_connection(picked=picked, keys=_arrow(types, ("role", column), keys)) as con:
        return con.sql(f"SELECT r.* FROM ({summed}) r SEMI JOIN keys k ON r.role = k.role"
                       f" AND r.{column} IS NOT DISTINCT FROM k.{column}").fetchall()


def _summed_sql(name: str, keys: tuple[str, ...], payload: str) -> str:
    """DuckDB SQL: the rows of ``name`` summed per key, zero sums dropped."""
    group = ", ".join(keys)
    return f'SELECT {group}, SUM("{payload}") AS "{payload}" FROM {name} GROUP BY {group} HAVING SUM("{payload}") <> 0'


def _values(values: set, types, column: str):
    import pyarrow as pa

    return pa.array(list(values), types.field(column).type)


def _flags(requests: Mapping[str, set[tuple]], column: str, types):
    """The (role, ``column``) keys the requests name, with one boolean column per request (NULL
    where it does not name the key)."""
    import pyarrow as pa

    flags: dict[tuple, set[str]] = {}
    for name, keys in requests.items():
        for key in keys:
            flags.setdefault(key, set()).add(name)
    table = _arrow(types, ("role", column), list(flags))
    for name in requests:
        table = table.append_column(name, pa.array([name in named or None for named in flags.values()], pa.bool_()))
    return table


def _stored(ctx: Context, table: AdditiveTable) -> DataFrame:
    """A stored state table read by Spark, summed per key if it is a bag of appended changes."""
    stored = ctx.lake.read(table.path)
    return consolidate(stored, table.keys, table.payloads, table.alive) if table.append_only else stored


def _appends(table: AdditiveTable) -> bool:
    """Whether a state table takes its changes as appends (a bag, summed per key by its readers)
    rather than MERGEs: yes, unless the table has deletion vectors -- a lake whose large state
    was written before appends, which keeps its MERGEs (delta-rs scans no such table)."""
    return not table.has_reader_features()


def _arrow(schema, names: tuple[str, ...], rows: Collection[tuple]):
    """Driver rows (or key tuples) as an Arrow table with the given columns typed as in the Arrow ``schema``."""
    import pyarrow as pa

    columns = list(zip(*rows)) if rows else [() for _ in names]
    return pa.table({name: pa.array(list(values), schema.field(name).type) for name, values in zip(names, columns)})


def _stored_result(ctx: Context) -> dict:
    """The stored result row (the count, N, |D|, ε): read by delta-rs, else by Spark."""
    rows = ctx.lake.read_small_arrow(ctx.lake.view_path(ctx.view), 10)
    if rows is not None and rows.num_rows:
        return rows.to_pylist()[0]
    return ctx.lake.read(ctx.lake.view_path(ctx.view)).first().asDict()


class _Flags:
    """Keys held on the driver, each with the boolean flags of the requests that name it; joined
    (broadcast, left) to a stored table, it adds one column per flag (NULL for rows no key names)."""

    def __init__(self) -> None:
        self.flags: list[str] = []
        self.keys: dict[tuple, set[str]] = {}

    def add(self, flag: str, keys: Iterable[tuple]) -> None:
        self.flags.append(flag)
        for key in keys:
            self.keys.setdefault(key, set()).add(flag)

    def join(self, ctx: Context, table: DataFrame, on: list[str]) -> DataFrame:
        from pyspark.sql import functions as F
        from pyspark.sql.types import BooleanType, StructField

        rows = [(*key, *(flag in wanted for flag in self.flags)) for key, wanted in self.keys.items()]
        types = {**{n: table.schema[n] for n in on}, **{f: StructField(f, BooleanType()) for f in self.flags}}
        return table.join(F.broadcast(_frame(ctx, types, (*on, *self.flags), rows)), on, "left")


def _frame(ctx: Context, schema: Any, names: tuple[str, ...], rows: list[tuple]) -> DataFrame:
    """A Spark frame of driver rows with the given columns typed as in ``schema`` (via Arrow)."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_type
    from pyspark.sql.types import StructType

    columns = list(zip(*rows)) if rows else [() for _ in names]
    arrays = {name: pa.array(list(values), to_arrow_type(schema[name].dataType)) for name, values in zip(names, columns)}
    # The schema too: Spark Connect cannot infer one from an empty table.
    return ctx.spark.createDataFrame(pa.table(arrays), schema=StructType([schema[name] for name in names]))


def _collect_changes(rows: DataFrame) -> dict[Any, int] | None:
    """The netted (x, y) -> Δm of a delta on the driver, or None beyond DRIVER_ROWS keys."""
    table = consolidate(rows, ("x", "y"), (MULTIPLICITY,)).limit(DRIVER_ROWS + 1).toArrow()
    if table.num_rows > DRIVER_ROWS:
        return None
    return {(x, y): m for x, y, m in zip(*(table.column(c).to_pylist() for c in ("x", "y", MULTIPLICITY)))}


def _live(rel: AdditiveTable, role: str, deltas: Iterable[DataFrame] = ()) -> DataFrame:
    """Relation ``role``'s consolidated rows (x, y, m), parts dropped, plus ``deltas``."""
    from pyspark.sql import functions as F

    frame = rel.current()
    frame = frame.where(frame["role"] == role).select("x", "y", MULTIPLICITY)
    for delta in deltas:
        frame = frame.unionByName(delta.select("x", "y", F.col(MULTIPLICITY).cast("bigint").alias(MULTIPLICITY)))
    return consolidate(frame, ("x", "y"), (MULTIPLICITY,))


def _next_role():
    from pyspark.sql import functions as F

    expr = F.when(F.col("role") == ROLES[0], NEXT[ROLES[0]])
    for role in ROLES[1:]:
        expr = expr.when(F.col("role") == role, NEXT[role])
    return expr


def _by_role(frames: Mapping[str, DataFrame]) -> DataFrame:
    """One frame of all roles' rows, tagged with their role."""
    from pyspark.sql import functions as F

    tagged = [frames[r].withColumn("role", F.lit(r)) for r in ROLES]
    return tagged[0].unionByName(tagged[1]).unionByName(tagged[2])


def _full_count(parts: Mapping[str, DataFrame], views: Mapping[str, DataFrame]) -> int:
    """Q = Σ R(x,y)·S(y,z)·T(z,x) from scratch, by the batch plan with ΔR = R (digest §7.3): tA over
    T_h (any S part), tB through W[S] = S_h·T_l, tC over S_l·T_l. One query; Spark chooses the joins."""
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
        stored = ctx.lake.read_small_arrow(path, 10)
        if stored is not None and stored.schema.names == schema.names:
            ctx.lake.overwrite_small(path, pa.Table.from_pylist([dict(zip(schema.names, row))], schema), schema)
            return
    ddl = f"`{shape.output}` BIGINT, _lakeivm_base BIGINT, _lakeivm_size BIGINT, _lakeivm_epsilon DOUBLE"
    ctx.spark.createDataFrame([row], ddl).write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(path)
