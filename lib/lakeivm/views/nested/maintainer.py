"""Nested-aggregate views on Spark: a per-commit time series from ordered aggregate indexes (RPAI §4).

State, all Delta tables versioned by the engine's commit protocol
(docs/kinds/nested.md#state-commits-and-query-texts):

* ``views/<view>/index/<table>``: per source table, rows of *absolute* per-key sums in the layout
  the evaluator names (``STATE``: e.g. VWAP's ``bids`` as ``price, cnt, sum_volume,
  sum_price_volume``). Bootstrap is a GROUP BY of the snapshot at the pins; a run adds the
  summed change of its commits (keys whose sums all reach zero are deleted): an index of up to
  ``limits.local_state_rows`` rows is read and rewritten whole by delta-rs in the run's process, a
  larger one MERGEd by Spark.
* ``views/<view>/result``: the **time series** of the view: one emission per source commit
  version (plus one at bootstrap), each the query's output rows in SQL's own shape, under the
  versions of every source table it is the answer for (column ``version`` for a one-table view,
  ``version_<table>`` per table otherwise), an emission counter ``_lakeivm_seq`` and
  ``_lakeivm_empty`` (a placeholder row when a GROUP BY view has no group at that version).

A run loads the evaluator from the index tables (O(G) keys, not the base rows), then, table by
table in the engine's order, reads that table's change data feed *per commit version* itself (the
engine's netted delta merges commits and would lose the per-version results), applies each
commit's signed rows and emits the result; other tables stay at their watermarks, so an
asymmetric plan emits exact results for the version pairs it passes through. ``flush`` also
catches up tables the engine advanced without calling ``apply`` (commits whose changes net to
zero), then writes the emissions and the index MERGEs.

Evaluation is exact (int/Decimal/Fraction arithmetic); results are stored in the SQL's output types
(DECIMAL rounded half-up at the SQL's scale, as Spark does). Views with a partition key are
evaluated per key with ``applyInPandas`` (module ``partitioned``):

* TPC-H Q17, correlated by equality on the part key: each part's stored sums and commits go to
  ``contribution_steps``; the per-commit changes are summed per step and accumulated on the
  driver. Only parts of the query's brand and container contribute, so only their rows are
  kept in the indexes (``_contributing``: a semi-join reduction) and replayed: in the run's
  process when the indexes are small enough to read there (the commits
  then come as Arrow and no Spark job runs after the change feed's), else per part with Spark's
  ``applyInPandas``, the driver never holding the index.
* MST, grouped per broker: the driver keeps only the global asks and bids sides (bids summed over
  brokers: O(prices), not O(brokers × prices)) and computes both cuts after every commit; each
  broker's stored bids and bid commits go to ``broker_steps`` with those cuts.

VWAP, PSP and Example 2.1 are one global cut with no partition key; they are evaluated on the
driver from collected per-version deltas.
"""
from __future__ import annotations

import decimal
from collections.abc import Mapping
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from lakeivm.sources import changes
from lakeivm.errors import ChangeRangeError, StateError
from lakeivm.columns import MULTIPLICITY
from lakeivm.sql import recompute_sql
from lakeivm.views.base import Context
from lakeivm.views.nested.evaluators import Example21, Mst, Psp, Q17, Vwap
from lakeivm.views.nested.general import General, RowEvent
from lakeivm.views.nested.events import BookRow, Event, LineitemRow, PartRow
from lakeivm.views.nested.partitioned import (BEFORE, BID_EVENT, BID_STATE, LINE_EVENT, LINE_STATE, PART_EVENT, PART_STATE,
                                              broker_steps, contribution_steps)
from lakeivm.views.nested.shape import NestedShape, nested_shape
from lakeivm.views.state import AdditiveTable

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import DataType, StructType

EVALUATORS = {"example_2_1": Example21, "vwap": Vwap, "mst": Mst, "psp": Psp, "q17": Q17}  # the general shape: General(plan)
ROW_TYPES = {"bids": BookRow, "asks": BookRow, "lineitem": LineitemRow, "part": PartRow}
SEQ, EMPTY = "_lakeivm_seq", "_lakeivm_empty"
PRECISION = 100  # decimal digits for the driver-side sums (Spark's DECIMAL stops at 38)
PARTITIONED = {"q17", "mst"}  # shapes evaluated per partition key with applyInPandas (module doc)
ROW_COLUMNS = ("kind", "step", "pk", "quantity", "price", "brand", "container", "m")  # partitioned's input rows


class NestedMaintainer:
    """Keeps a nested-aggregate view as a per-commit time series (see module doc)."""

    def __init__(self) -> None:
        self._evaluator: Any = None
        self._progress: dict[str, int] = {}
        self._seq = 0
        self._emitted: list[tuple] = []
        self._index: dict[str, AdditiveTable] | None = None
        self._schema: StructType | None = None
        self._deferred: list[tuple[str, int, int, DataFrame]] = []  # partitioned shapes: (table, start, until, changes)
        self._read_to: dict[str, int] = {}
        self._bound: NestedShape | None = None

    def _shape(self, ctx: Context) -> NestedShape:
        """The view's shape, bound once per run (a run asks for it per emitted version)."""
        if self._bound is None:
            self._bound = _shape(ctx)
        return self._bound

    # -- protocol ------------------------------------------------------------------------------
    def state_tables(self, ctx: Context) -> Mapping[str, str]:
        return {"result": ctx.lake.view_path(ctx.view), **{f"index_{t}": a.path for t, a in self._tables(ctx).items()}}

    def bootstrap(self, ctx: Context) -> None:
        from pyspark.sql.types import StructField, StructType

        shape = self._shape(ctx)
        for table, index in self._tables(ctx).items():
            index.create(ctx.spark.sql(state_sql(shape, table, _contributing(ctx, shape, table, ctx.pins))))
            ctx.checkpoint(f"bootstrap:index_{table}")
        sources = {r.alias: ctx.snapshot(r.table, ctx.pins[r.table]) for r in ctx.query.relations}
        analysed = ctx.spark.sql(recompute_sql(ctx.query, sources)).schema  # analysed, not executed
        self._schema = StructType([StructField(f.name, f.dataType) for f in analysed.fields])
        stored = self.series(ctx).schema.fields if _result_exists(ctx) else []
        # a rebuild continues the series unless the outputs changed, or the result is not a series (auto
        # maintained the view by `full` before, which stores the SQL's rows alone)
        fresh = SEQ not in {f.name for f in stored} or (
            [(f.name, f.dataType) for f in stored if f.name in shape.outputs] != [(f.name, f.dataType) for f in analysed])
        self._progress, self._seq = dict(ctx.pins), 0 if fresh else _last_seq(ctx) + 1
        if shape.name in PARTITIONED:
            self._evaluate_partitioned(ctx)  # no commits: the stored contributions' total
        else:
            self._load_evaluator(ctx)
            self._emit(ctx)
        self._write_emissions(ctx, fresh=fresh)
        ctx.checkpoint("bootstrap:result")

    def apply(self, ctx: Context, table: str, delta: DataFrame) -> None:
        """Apply ``table``'s commits one by one (the netted ``delta`` is not used: see module doc)."""
        self._advance(ctx, table, ctx.pins[table])
        ctx.checkpoint(f"apply:{table}")

    def flush(self, ctx: Context) -> None:
        for table in ctx.query.tables:  # tables advanced without apply (their commits net to zero)
            self._advance(ctx, table, ctx.watermarks[table])
        if self._deferred:
            self._evaluate_partitioned(ctx)  # reads the indexes before their MERGEs below
        for table, index in self._tables(ctx).items():
            index.flush()
            ctx.checkpoint(f"flush:index_{table}")
        if self._emitted:
            self._write_emissions(ctx, fresh=False)
            ctx.checkpoint("flush:result")
        ctx.checkpoint("flush")

    def result(self, ctx: Context, version: int | None = None) -> DataFrame:
        """The newest emission's rows in the SQL's own output shape (what ``audit`` compares).

        The whole per-version series is :meth:`series`.
        """
        from pyspark.sql import functions as F

        series = self.series(ctx, version)
        newest = series.agg(F.max(SEQ)).first()[0]
        return series.where((F.col(SEQ) == newest) & ~F.col(EMPTY)).select(*self._shape(ctx).outputs)

    def series(self, ctx: Context, version: int | None = None) -> DataFrame:
        """Every emission: version column(s), the outputs, ``_lakeivm_seq`` and ``_lakeivm_empty``."""
        return ctx.lake.read(ctx.lake.view_path(ctx.view), version)

    # -- per-commit processing -----------------------------------------------------------------
    def _advance(self, ctx: Context, table: str, until: int) -> None:
        """Apply ``table``'s commits (progress, until], emitting the result after each."""
        start = self._read_to.get(table, self._versions(ctx)[table])
        if until <= start:
            return
        shape = self._shape(ctx)
        role = shape.role_of(table)
        index, local = self._tables(ctx)[table], self._local(ctx)
        frame = read_versions(ctx, table, start, until, row_values(shape, role), local=local)  # local: Arrow, no Spark job after
        if shape.name != "q17":  # Q17's indexes take the run's changes once the parts that count are known (_evaluate_q17)
            index.add(index_delta(shape, table, frame, index.stored_arrow().schema) if local else
                      ctx.spark.sql(_delta_state_sql(shape, table, _temp(frame, f"lakeivm_{ctx.view}_{table}_cdf"))))
        self._read_to[table] = until
        if shape.name in PARTITIONED:
            self._deferred.append((table, start, until, frame))
            return
        if self._evaluator is None:
            self._load_evaluator(ctx)
        by_version = _events_by_version(shape, table, frame)
        with _exact():
            for version in range(start + 1, until + 1):
                for event in by_version.get(version, ()):
                    self._evaluator.apply(event)
                self._progress[table] = version
                self._emit(ctx)

    def _evaluate_partitioned(self, ctx: Context) -> None:
        """Emit after every deferred commit, evaluated per partition key (module doc)."""
        if self._shape(ctx).name == "mst":
            self._evaluate_mst(ctx)
        else:
            self._evaluate_q17(ctx)
        self._deferred = []

    def _evaluate_mst(self, ctx: Context) -> None:
        """MST: global cuts on the driver, each broker's qualifying bids with ``broker_steps`` (applyInPandas)."""
        from pyspark.sql import functions as F

        shape = self._shape(ctx)
        indexes = self._tables(ctx)
        bids_table, asks_table = shape.tables["bids"], shape.tables["asks"]
        stored_bids, stored_asks = ctx.lake.read(indexes[bids_table].path), ctx.lake.read(indexes[asks_table].path)
        sides = Mst(**dict(shape.params), per_broker=False)
        sums = [sum_name(s) for s in Mst.STATE["bids"][1]]
        by_price = stored_bids.groupBy("price").agg(*(F.sum(c).alias(c) for c in sums)).collect()
        steps, ranges, asks, bid_events, offset = [], [], [], [], 0
        with _exact():
            sides.load("asks", _state_rows(shape, asks_table, stored_asks.toArrow()))
            sides.load("bids", [((None, r["price"]), tuple(r[c] for c in sums)) for r in by_price])

            def cut() -> None:
                cuts = sides.cuts()
                ranges.append(None if cuts is None else cuts[0])
                asks.append(None if cuts is None else cuts[1:])

            cut()
            for table, start, until, frame in self._deferred:
                by_version = _events_by_version(shape, table, frame)
                for version in range(start + 1, until + 1):
                    for event in by_version.get(version, ()):
                        sides.apply(event)
                    steps.append((table, version))
                    cut()
                if table == bids_table:
                    bid_events.append(self._bid_rows(ctx, frame, F.col("_commit_version") - (start + 1 - offset)))
                offset += until - start
        types = stored_bids.schema
        union = self._bid_rows(ctx, stored_bids, None)
        for frame in bid_events:
            union = union.unionByName(frame)
        pv_type = types["sum_price_volume"].dataType
        quantum = decimal.Decimal(1).scaleb(-pv_type.scale) if hasattr(pv_type, "scale") else None

        def per_broker(key, frame):
            import pandas as pd

            with _exact():
                rows = frame[["kind", "step", "price", "cnt", "pv"]].itertuples(index=False)
                out = broker_steps(ranges, (tuple(map(_python, r)) for r in rows))
            return pd.DataFrame({"broker": [key[0]] * len(out), "step": [s for s, _, _ in out], "cnt": [c for _, c, _ in out],
                                 "pv": [decimal.Decimal(v).quantize(quantum) if quantum else v for _, _, v in out]})

        schema = (f"broker {types['broker_id'].dataType.simpleString()}, step bigint, cnt bigint, "
                  f"pv {pv_type.simpleString()}")
        per_step: dict[int, dict[Any, tuple[int, Any]]] = {}
        for r in union.groupBy("broker").applyInPandas(per_broker, schema).collect():
            per_step.setdefault(r["step"], {})[r["broker"]] = (int(r["cnt"]), r["pv"])
        brokers = per_step.get(BEFORE, {})

        def emit(i: int) -> None:
            with _exact():
                self._emit_value(ctx, {} if asks[i] is None else Mst.combine(brokers, *asks[i]))

        if not steps:
            emit(0)
        for i, (table, version) in enumerate(steps):
            brokers.update(per_step.get(i, {}))
            self._progress[table] = version
            emit(i + 1)

    def _bid_rows(self, ctx: Context, frame: DataFrame, step) -> DataFrame:
        """The bids index (``step`` None) or one run's bid commits as ``broker_steps`` input rows, keyed by broker."""
        from pyspark.sql import functions as F

        shape = self._shape(ctx)
        types = ctx.lake.read(self._tables(ctx)[shape.tables["bids"]].path).schema
        if step is None:
            kind, broker, price, cnt, pv = BID_STATE, frame["broker_id"], frame["price"], frame["cnt"], frame["sum_price_volume"]
            step = F.lit(None)
        else:
            c = {f: frame[f"`{col}`"] for f, col in shape.columns["bids"].items()}
            kind, broker, price, cnt = BID_EVENT, c["broker_id"], c["price"], frame[MULTIPLICITY]
            pv = cnt * c["price"] * c["volume"]
        return frame.select(F.lit(kind).alias("kind"), step.cast("bigint").alias("step"),
                            broker.cast(types["broker_id"].dataType).alias("broker"),
                            price.cast(types["price"].dataType).alias("price"), cnt.cast("bigint").alias("cnt"),
                            pv.cast(types["sum_price_volume"].dataType).alias("pv"))

    def _evaluate_q17(self, ctx: Context) -> None:
        """Q17: each relevant part's contributions (``contribution_steps``) summed per step, accumulated here."""
        steps, offset, ranges = [], 0, []
        for table, start, until, _ in self._deferred:
            steps += [(table, v) for v in range(start + 1, until + 1)]
            ranges.append(start + 1 - offset)  # a commit's step is its version minus this
            offset += until - start
        if self._local(ctx):
            tables = self._tables(ctx)
            lines, parts = (tables[self._shape(ctx).tables[role]].stored_arrow() for role in ("lineitem", "part"))
            by_step = self._q17_steps_locally(ctx, lines, parts, ranges)
        else:
            by_step = self._q17_steps_on_spark(ctx, ranges)
        count, total = by_step.get(BEFORE, (0, 0))
        evaluator = make_evaluator(self._shape(ctx))
        if not steps:
            self._emit_value(ctx, evaluator.result_of(count, total))
        with _exact():
            for i, (table, version) in enumerate(steps):
                dc, dv = by_step.get(i, (0, 0))
                count, total = count + dc, total + dv
                self._progress[table] = version
                self._emit_value(ctx, evaluator.result_of(count, total))

    def _q17_steps_locally(self, ctx: Context, lines, parts, ranges: list[int]) -> dict[int, tuple[int, Any]]:
        """{step: (Δcount, Δsum)} with ``BEFORE`` the stored total, from the indexes read by delta-rs and
        the run's commits collected (Arrow): only parts of the query's brand and container contribute,
        so only their rows are replayed, part by part, in this process."""
        import pyarrow as pa
        import pyarrow.compute as pc

        shape = self._shape(ctx)
        params = dict(shape.params)
        events = []  # (kind, step, pk, quantity, price, brand, container, m)
        for (table, _, _, frame), first in zip(self._deferred, ranges):
            role, changes = shape.role_of(table), frame  # read_versions(local=True): Arrow
            c = {f: changes[col].to_pylist() for f, col in shape.columns[role].items()}
            step = [v - first for v in changes["_commit_version"].to_pylist()]
            m = changes[MULTIPLICITY].to_pylist()
            if role == "lineitem":
                events += zip([LINE_EVENT] * len(m), step, c["l_partkey"], c["l_quantity"], c["l_extendedprice"],
                              [None] * len(m), [None] * len(m), m)
            else:
                events += zip([PART_EVENT] * len(m), step, c["p_partkey"], [None] * len(m), [None] * len(m),
                              c["p_brand"], c["p_container"], m)
        chosen = parts.filter(pc.and_(pc.equal(parts["p_brand"], params["brand"]), pc.equal(parts["p_container"], params["container"])))
        relevant = set(chosen["p_partkey"].to_pylist())
        relevant |= {r[2] for r in events if r[0] == PART_EVENT and (r[5], r[6]) == (params["brand"], params["container"])}
        lines = self._q17_index_locally(ctx, lines, relevant)
        rows: dict[Any, list[tuple]] = {pk: [] for pk in relevant}
        for r in events:
            if r[2] in rows:
                rows[r[2]].append(r)
        def of_relevant(table, column: str):
            return table.filter(pc.is_in(table[column], value_set=pa.array(list(relevant), table.schema.field(column).type)))

        line_rows = of_relevant(lines, "l_partkey")
        for pk, qty, price, cnt in zip(*(line_rows[c].to_pylist() for c in ("l_partkey", "l_quantity", "sum_l_extendedprice", "cnt"))):
            rows[pk].append((LINE_STATE, None, pk, qty, price, None, None, cnt))
        part_rows = of_relevant(parts, "p_partkey")
        for pk, brand, container, cnt in zip(*(part_rows[c].to_pylist() for c in ("p_partkey", "p_brand", "p_container", "cnt"))):
            rows[pk].append((PART_STATE, None, pk, None, None, brand, container, cnt))
        by_step: dict[int, tuple[int, Any]] = {}
        with _exact():
            for part_rows_of_pk in rows.values():
                for step, dc, dv in contribution_steps(params, part_rows_of_pk):
                    count, value = by_step.get(step, (0, 0))
                    by_step[step] = (count + dc, value + dv)
        return by_step

    def _q17_index_locally(self, ctx: Context, lines, relevant: set):
        """Keep Q17's indexes to the rows that can contribute (``_contributing``): the part index takes
        the changes of parts of the query's brand and container; the lineitem index the changes of the
        part keys it holds, and the rows, read from the snapshot, of a part key that comes to count and
        that it does not hold yet. Returns the lineitem index's rows with the added keys'."""
        import pyarrow as pa
        import pyarrow.compute as pc

        shape, indexes = self._shape(ctx), self._tables(ctx)
        line_table = shape.tables["lineitem"]
        missing = relevant - set(lines["l_partkey"].to_pylist())
        if missing:
            found = ctx.spark.sql(state_sql(shape, line_table, _lines_of(ctx, shape, self._versions(ctx)[line_table], missing)))
            found = found.toArrow().select(lines.schema.names).cast(lines.schema)
            indexes[line_table].add(found)
            lines = pa.concat_tables([lines, found])
        held = pa.array(list(set(lines["l_partkey"].to_pylist())), lines.schema.field("l_partkey").type)
        for table, _, _, frame in self._deferred:
            columns = shape.columns[shape.role_of(table)]
            counts = (pc.is_in(frame[columns["l_partkey"]], value_set=held) if table == line_table else
                      pc.and_(pc.equal(frame[columns["p_brand"]], shape.params["brand"]),
                              pc.equal(frame[columns["p_container"]], shape.params["container"])))
            index = indexes[table]
            index.add(index_delta(shape, table, frame.filter(pc.fill_null(counts, False)), index.stored_arrow().schema))
        return lines

    def _q17_index_on_spark(self, ctx: Context, relevant: DataFrame) -> DataFrame | None:
        """``_q17_index_locally`` by Spark, the parts that count as a frame of ``pk``: returns the added
        part keys' lineitem index rows (None when the index holds every part key that counts)."""
        from pyspark.sql import functions as F

        shape, indexes = self._shape(ctx), self._tables(ctx)
        line_table = shape.tables["lineitem"]
        held = ctx.lake.read(indexes[line_table].path).select(F.col("l_partkey").alias("pk"))
        missing = relevant.join(held, "pk", "left_anti").collect()
        found = None
        if missing:
            found = indexes[line_table].add(ctx.spark.sql(state_sql(
                shape, line_table, _lines_of(ctx, shape, self._versions(ctx)[line_table], {r["pk"] for r in missing}))))
            held = held.unionByName(found.select(F.col("l_partkey").alias("pk")))
        for table, _, _, frame in self._deferred:
            columns = shape.columns[shape.role_of(table)]
            if table == line_table:
                counted = frame.join(held.distinct().withColumnRenamed("pk", columns["l_partkey"]), columns["l_partkey"], "left_semi")
            else:
                counted = frame.where((F.col(f"`{columns['p_brand']}`") == shape.params["brand"])
                                      & (F.col(f"`{columns['p_container']}`") == shape.params["container"]))
            indexes[table].add(ctx.spark.sql(_delta_state_sql(shape, table, _temp(counted, f"lakeivm_{ctx.view}_{table}_counted"))))
        return found

    def _q17_steps_on_spark(self, ctx: Context, ranges: list[int]) -> dict[int, tuple[int, Any]]:
        """As ``_q17_steps_locally`` for indexes too large for this process: ``contribution_steps`` per
        part key with ``applyInPandas``, summed per step by Spark."""
        from pyspark.sql import functions as F

        params = dict(self._shape(ctx).params)
        rows = [self._state_rows_frame(ctx, t) for t in ctx.query.tables]
        for (table, _, _, frame), first in zip(self._deferred, ranges):
            rows.append(self._event_rows_frame(ctx, table, frame, F.col("_commit_version") - first))
        union = rows[0]
        for frame in rows[1:]:
            union = union.unionByName(frame)
        filtered = (union.where(F.col("kind").isin(PART_STATE, PART_EVENT) & (F.col("brand") == params["brand"])
                                & (F.col("container") == params["container"])).select("pk").distinct())
        found = self._q17_index_on_spark(ctx, filtered)
        if found is not None:
            none = F.lit(None)
            union = union.unionByName(self._q17_rows(ctx, found, LINE_STATE, none, found["l_partkey"], found["l_quantity"],
                                                     found["sum_l_extendedprice"], none, none, found["cnt"]))
        scale = union.schema["price"].dataType.scale

        def per_part(frame):
            import pandas as pd

            with _exact():
                rows = frame[list(ROW_COLUMNS)].itertuples(index=False)  # a USING join moved pk first
                out = contribution_steps(params, (tuple(map(_python, r)) for r in rows))
            quantum = decimal.Decimal(1).scaleb(-scale)
            return pd.DataFrame({"step": [s for s, _, _ in out], "cnt": [c for _, c, _ in out],
                                 "value": [decimal.Decimal(v).quantize(quantum) for _, _, v in out]})

        per_step = (union.join(filtered, "pk", "left_semi").groupBy("pk")
                    .applyInPandas(per_part, f"step bigint, cnt bigint, value decimal(38,{scale})")
                    .groupBy("step").agg(F.sum("cnt").alias("cnt"), F.sum("value").alias("value")))
        return {r["step"]: (int(r["cnt"]), r["value"]) for r in per_step.collect()}

    def _state_rows_frame(self, ctx: Context, table: str) -> DataFrame:
        """A Q17 index as ``partitioned`` input rows."""
        from pyspark.sql import functions as F

        stored, none = ctx.lake.read(self._tables(ctx)[table].path), F.lit(None)
        if self._shape(ctx).role_of(table) == "lineitem":
            return self._q17_rows(ctx, stored, LINE_STATE, none, stored["l_partkey"], stored["l_quantity"],
                                  stored["sum_l_extendedprice"], none, none, stored["cnt"])
        return self._q17_rows(ctx, stored, PART_STATE, none, stored["p_partkey"], none, none, stored["p_brand"],
                              stored["p_container"], stored["cnt"])

    def _event_rows_frame(self, ctx: Context, table: str, frame: DataFrame, step) -> DataFrame:
        """One table's per-commit changes as ``partitioned`` input rows, ``step`` numbering the run's commits."""
        from pyspark.sql import functions as F

        shape, none = self._shape(ctx), F.lit(None)
        c = {f: frame[f"`{col}`"] for f, col in shape.columns[shape.role_of(table)].items()}
        if shape.role_of(table) == "lineitem":
            return self._q17_rows(ctx, frame, LINE_EVENT, step, c["l_partkey"], c["l_quantity"], c["l_extendedprice"],
                                  none, none, frame[MULTIPLICITY])
        return self._q17_rows(ctx, frame, PART_EVENT, step, c["p_partkey"], none, none, c["p_brand"], c["p_container"],
                              frame[MULTIPLICITY])

    def _q17_rows(self, ctx: Context, frame: DataFrame, kind: int, step, pk, quantity, price, brand, container, m) -> DataFrame:
        """``partitioned`` input rows in one schema for states and changes: the lineitem index's key and sum types."""
        from pyspark.sql import functions as F

        types = ctx.lake.read(self._tables(ctx)[self._shape(ctx).tables["lineitem"]].path).schema
        return frame.select(F.lit(kind).alias("kind"), step.cast("bigint").alias("step"),
                            pk.cast(types["l_partkey"].dataType).alias("pk"),
                            quantity.cast(types["l_quantity"].dataType).alias("quantity"),
                            price.cast(types["sum_l_extendedprice"].dataType).alias("price"), brand.cast("string").alias("brand"),
                            container.cast("string").alias("container"), m.cast("bigint").alias("m"))

    def _local(self, ctx: Context) -> bool:
        """Whether the run reads its commits and the indexes in this process (Arrow, delta-rs): every index
        small enough (``limits.local_state_rows``), and a shape evaluated on the driver or Q17 (MST is on Spark)."""
        return self._shape(ctx).name != "mst" and all(t.stored_arrow() is not None for t in self._tables(ctx).values())

    def _versions(self, ctx: Context) -> dict[str, int]:
        """The source versions of the newest emission (read from the series once per run)."""
        if not self._progress:
            last = _newest_emission(ctx)
            if last is None:
                raise StateError(f"view {ctx.view!r}: its result series is empty; rebuild it (lakeivm refresh --rebuild)")
            self._progress = {t: int(last[c]) for t, c in version_columns(ctx.query.tables).items()}
            self._seq = int(last[SEQ]) + 1
        return self._progress

    def _load_evaluator(self, ctx: Context) -> None:
        """Build the evaluator from the stored per-key sums (O(G) keys)."""
        shape = self._shape(ctx)
        self._evaluator = make_evaluator(shape)
        with _exact():
            for table, index in self._tables(ctx).items():
                stored = index.stored_arrow()  # read by delta-rs, if small enough
                self._evaluator.load(shape.role_of(table), _state_rows(shape, table, stored if stored is not None
                                                                       else ctx.lake.read(index.path).toArrow()))

    def _emit(self, ctx: Context) -> None:
        """Buffer the evaluator's result at the current versions as rows of the series."""
        with _exact():
            value = self._evaluator.result()
        self._emit_value(ctx, value)

    def _emit_value(self, ctx: Context, value: Any) -> None:
        shape, schema = self._shape(ctx), self._output_schema(ctx)
        versions = tuple(self._progress[t] for t in ctx.query.tables)
        types = {f.name: f.dataType for f in schema.fields}
        if shape.plan is not None:
            rows = [dict(zip(shape.outputs, r)) for r in value]
        elif shape.group_output is None:
            rows = [{shape.outputs[0]: value}]
        else:
            (measure,) = [o for o in shape.outputs if o != shape.group_output]
            rows = [{shape.group_output: k, measure: v} for k, v in sorted(value.items(), key=lambda kv: repr(kv[0]))]
        if not rows:
            self._emitted.append((*versions, *[None] * len(shape.outputs), self._seq, True))
        for row in rows:
            self._emitted.append((*versions, *[to_sql(row[o], types[o]) for o in shape.outputs], self._seq, False))
        self._seq += 1

    def _write_emissions(self, ctx: Context, fresh: bool) -> None:
        from pyspark.sql.types import BooleanType, LongType, StructField, StructType

        outputs = self._output_schema(ctx)
        schema = StructType([*(StructField(c, LongType()) for c in version_columns(ctx.query.tables).values()),
                             *outputs.fields, StructField(SEQ, LongType()), StructField(EMPTY, BooleanType())])
        frame = ctx.spark.createDataFrame(self._emitted, schema)
        writer = frame.write.format("delta")
        if fresh:
            writer.mode("overwrite").option("overwriteSchema", "true").save(ctx.lake.view_path(ctx.view))
        else:
            writer.mode("append").save(ctx.lake.view_path(ctx.view))
        self._emitted = []

    def _output_schema(self, ctx: Context) -> StructType:
        """The SQL's output columns and types: analysed by Spark at bootstrap, then the series'."""
        from pyspark.sql.types import StructType

        if self._schema is None:
            stored = {f.name: f for f in self.series(ctx).schema.fields}
            self._schema = StructType([stored[o] for o in self._shape(ctx).outputs])
        return self._schema

    def _tables(self, ctx: Context) -> dict[str, AdditiveTable]:
        if self._index is None:
            shape = self._shape(ctx)
            self._index = {}
            for table in ctx.query.tables:
                keys, sums = layout(shape, shape.role_of(table))
                self._index[table] = AdditiveTable(ctx.lake, ctx.lake.view_path(ctx.view, f"index/{table}"),
                                                   keys, tuple(sum_name(s) for s in sums), local_rows=ctx.lake.limits.local_state_rows)
        return self._index


# -- pure helpers ---------------------------------------------------------------------------------
def make_evaluator(shape: NestedShape) -> Any:
    """The evaluator of ``shape`` with its bound constants (the ``general`` shape: with its plan)."""
    if shape.plan is not None:
        return General(shape.plan)
    return EVALUATORS[shape.name](**dict(shape.params))


def layout(shape: NestedShape, role: str) -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...]]:
    """The index's key fields and per-key sums (products of fields) for ``role``: the evaluator's
    ``STATE``, or for the ``general`` shape its keys ``k<i>`` and the row count plus each term."""
    if shape.plan is not None:
        relation = shape.plan.relations[int(role[1:])]
        return tuple(f"k{i}" for i in range(len(relation.keys))), ((), *((name,) for name, _ in relation.terms))
    return EVALUATORS[shape.name].STATE[role]


def row_values(shape: NestedShape, role: str) -> dict[str, str]:
    """{name in a change frame: its SQL over the table's row}: the shape's columns, or for the ``general``
    shape its keys and terms (a term is an expression, computed as the feed is read)."""
    if shape.plan is not None:
        relation = shape.plan.relations[int(role[1:])]
        return {**{f"k{i}": f"`{c}`" for i, c in enumerate(relation.keys)}, **dict(relation.terms)}
    return {c: f"`{c}`" for c in shape.columns[role].values()}


def version_columns(tables: tuple[str, ...]) -> dict[str, str]:
    """{table: its version column in the series}: ``version`` alone for a one-table view."""
    return {tables[0]: "version"} if len(tables) == 1 else {t: f"version_{t}" for t in tables}


def sum_name(product: tuple[str, ...]) -> str:
    """Column name of a per-key sum: ``cnt`` for the row count, else ``sum_<field>_<field>``."""
    return "cnt" if not product else "sum_" + "_".join(product)


def to_sql(value: Any, data_type: DataType) -> Any:
    """An exact Python number as a value of ``data_type`` (DECIMAL rounded half-up, like Spark)."""
    from pyspark.sql.types import DecimalType, DoubleType, FloatType, IntegralType

    if value is None:
        return None
    if isinstance(data_type, DecimalType):
        with _exact():
            number = Fraction(value)
            exact_value = decimal.Decimal(number.numerator) / decimal.Decimal(number.denominator)
            return exact_value.quantize(decimal.Decimal(1).scaleb(-data_type.scale), rounding=decimal.ROUND_HALF_UP)
    if isinstance(data_type, IntegralType):
        if Fraction(value).denominator != 1:
            raise StateError(f"non-integral value {value} for an integral output")
        return int(value)
    if isinstance(data_type, (DoubleType, FloatType)):
        return float(value)
    return value


def state_sql(shape: NestedShape, table: str, source: str) -> str:
    """Per-key absolute sums of ``table``'s snapshot ``source`` in the evaluator's layout (GROUP BY)."""
    return _grouped_sql(shape, table, source, "CAST(1 AS BIGINT)", row_values(shape, shape.role_of(table)))


def _contributing(ctx: Context, shape: NestedShape, table: str, versions: Mapping[str, int]) -> str:
    """``table``'s snapshot at ``versions``, for Q17 only the rows that can contribute: parts of the
    query's brand and container, and those parts' lineitems (a semi-join reduction: at SF 1 the
    lineitem index keeps ~6,000 of 6 M keys). Any other shape: the whole snapshot."""
    source = ctx.snapshot(table, versions[table])
    if shape.name != "q17":
        return source
    part_table, parts = shape.tables["part"], shape.columns["part"]
    counts = (f"`{parts['p_brand']}` = {_string(shape.params['brand'])} "
              f"AND `{parts['p_container']}` = {_string(shape.params['container'])}")
    if table == part_table:
        return f"(SELECT * FROM {source} WHERE {counts}) AS contributing"
    pk = shape.columns["lineitem"]["l_partkey"]
    return (f"(SELECT * FROM {source} WHERE `{pk}` IN (SELECT `{parts['p_partkey']}` "
            f"FROM {ctx.snapshot(part_table, versions[part_table])} WHERE {counts})) AS contributing")


def _lines_of(ctx: Context, shape: NestedShape, version: int, keys: set) -> str:
    """Q17's lineitem snapshot at ``version``, the rows of the part ``keys`` only (a temp view's name)."""
    from pyspark.sql import functions as F

    table, pk = shape.tables["lineitem"], shape.columns["lineitem"]["l_partkey"]
    rows = ctx.spark.table(ctx.snapshot(table, version)).where(F.col(f"`{pk}`").isin(sorted(keys)))
    return _temp(rows, f"lakeivm_{ctx.view}_{table}_v{version}_counted")


def _string(value: str) -> str:
    """A Spark SQL string literal (sqlglot's quoting)."""
    from sqlglot import exp

    from lakeivm.sql.ir import DIALECT

    return exp.Literal.string(value).sql(dialect=DIALECT)


def _delta_state_sql(shape: NestedShape, table: str, source: str) -> str:
    """The same of a :func:`read_versions` frame, whose columns are the row values already."""
    return _grouped_sql(shape, table, source, MULTIPLICITY, {c: f"`{c}`" for c in row_values(shape, shape.role_of(table))})


def _grouped_sql(shape: NestedShape, table: str, source: str, multiplicity: str, values: Mapping[str, str]) -> str:
    role = shape.role_of(table)
    keys, sums = layout(shape, role)
    columns = shape.columns[role]
    key_sql = [f"{values[columns[k]]} AS `{k}`" for k in keys]
    sum_sql = [f"SUM({' * '.join([multiplicity, *(f'({values[columns[f]]})' for f in s)])}) AS `{sum_name(s)}`" for s in sums]
    group = ", ".join(values[columns[k]] for k in keys)
    return f"SELECT {', '.join(key_sql + sum_sql)} FROM {source}" + (f" GROUP BY {group}" if keys else f" HAVING COUNT(*) > 0")


def read_versions(ctx: Context, table: str, start: int, end: int, values: Mapping[str, str], local: bool = False):
    """``table``'s changes in (start, end], netted *per commit*: ``values`` (name -> SQL over the row),
    ``_commit_version``, ``_lakeivm_m``; a computed Spark frame, or with ``local`` an Arrow table in this process.

    As :func:`lakeivm.sources.changes.read_delta`, but grouped by commit version too
    (docs/kinds/nested.md#state-commits-and-query-texts). The engine has already run
    :func:`lakeivm.sources.changes.check_readable` on every range it advances.
    """
    from pyspark.sql import functions as F

    lake = ctx.lake
    positive = [t for t, s in changes.SIGN.items() if s > 0]
    sign = F.when(F.col("_change_type").isin(*positive), 1).otherwise(-1)
    try:
        feed = (lake.spark.read.format("delta").option("readChangeFeed", "true")
                .option("startingVersion", start + 1).option("endingVersion", end).load(lake.table_path(table)))
        columns = list(values)
        netted = (feed.select(*(F.expr(sql).alias(name) for name, sql in values.items()), "_commit_version",
                              sign.alias(MULTIPLICITY))
                  .groupBy("_commit_version", *columns)
                  .agg(F.sum(MULTIPLICITY).cast("bigint").alias(MULTIPLICITY))
                  .where(F.col(MULTIPLICITY) != 0))
        return netted.toArrow() if local else netted.localCheckpoint(eager=True)
    except Exception as err:  # classified as in changes.read_delta
        raise ChangeRangeError(changes.explain_read_error(table, start, end, err)) from err


def _events_by_version(shape: NestedShape, table: str, frame) -> dict[int, list[Event]]:
    """A :func:`read_versions` frame or Arrow table as signed events per commit version (on the driver)."""
    role = shape.role_of(table)
    by_version: dict[int, list[Event]] = {}
    rows = frame.to_pylist() if hasattr(frame, "to_pylist") else [r.asDict() for r in frame.collect()]
    if shape.plan is not None:
        keys, (_, *terms) = layout(shape, role)
        for row in sorted(rows, key=lambda r: r["_commit_version"]):
            event = RowEvent(tuple(row[k] for k in keys), tuple(row[t] for (t,) in terms), row[MULTIPLICITY], int(role[1:]))
            by_version.setdefault(row["_commit_version"], []).append(event)
        return by_version
    columns, fields = shape.columns[role], ROW_TYPES[role].__dataclass_fields__
    for row in sorted(rows, key=lambda r: r["_commit_version"]):
        values = {f: row[columns[f]] if f in columns else None for f in fields}
        m = row[MULTIPLICITY]
        event = Event(role, ROW_TYPES[role](**values), 1 if m > 0 else -1)
        by_version.setdefault(row["_commit_version"], []).extend([event] * abs(m))
    return by_version


def index_delta(shape: NestedShape, table: str, changes, schema):
    """``_delta_state_sql`` on the driver: an Arrow table of ``read_versions`` rows summed per index key
    (exact int/Decimal arithmetic), typed as the stored index (Arrow ``schema``)."""
    import pyarrow as pa

    role = shape.role_of(table)
    keys, sums = layout(shape, role)
    columns = shape.columns[role]
    values = {f: changes[columns[f]].to_pylist() for f in {*keys, *(f for s in sums for f in s)}}
    summed: dict[tuple, list] = {}
    with _exact():
        for i, m in enumerate(changes[MULTIPLICITY].to_pylist()):
            totals = summed.setdefault(tuple(values[k][i] for k in keys), [0] * len(sums))
            for j, product in enumerate(sums):
                term = m
                for f in product:
                    term *= values[f][i]
                totals[j] += term
    names = [*keys, *(sum_name(s) for s in sums)]
    rows = [(*key, *totals) for key, totals in summed.items()]
    columns_out = list(zip(*rows)) if rows else [() for _ in names]
    return pa.table({n: pa.array(list(c), schema.field(n).type) for n, c in zip(names, columns_out)})


def _state_rows(shape: NestedShape, table: str, rows) -> list[tuple[tuple, tuple]]:
    """An index's rows (an Arrow table) as the evaluator's ``(keys, sums)``."""
    keys, sums = layout(shape, shape.role_of(table))
    key_columns = [rows[k].to_pylist() for k in keys]
    sum_columns = [rows[sum_name(s)].to_pylist() for s in sums]
    return list(zip(zip(*key_columns), zip(*sum_columns))) if rows.num_rows else []


def _python(value: Any) -> Any:
    """A pandas cell as a plain Python value (None for missing, int for numpy integers)."""
    import pandas as pd

    if value is None or (not isinstance(value, (str, decimal.Decimal)) and pd.isna(value)):
        return None
    return value.item() if hasattr(value, "item") else value


def _exact() -> decimal.localcontext:
    """A decimal context wide enough that sums of DECIMAL(38, s) values never round."""
    return decimal.localcontext(prec=PRECISION)


def _shape(ctx: Context) -> NestedShape:
    shape = nested_shape(ctx.query)
    if shape is None:
        raise StateError(f"view {ctx.view!r} is not a shipped nested shape; the classifier should have rejected it")
    return shape


def _temp(frame: DataFrame, name: str) -> str:
    frame.createOrReplaceTempView(name)
    return name


def _result_exists(ctx: Context) -> bool:
    return ctx.lake.is_delta(ctx.lake.view_path(ctx.view))


def _newest_emission(ctx: Context) -> Mapping[str, Any] | None:
    """One row of the series' newest emission: read by delta-rs (the files holding the newest
    ``_lakeivm_seq`` by their statistics), else by Spark."""
    import pyarrow.compute as pc
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaProtocolError

    from lakeivm.store import fastpath

    try:
        table = DeltaTable(ctx.lake.view_path(ctx.view))
        if not fastpath.admits(table):
            raise KeyError(SEQ)  # read through Spark
        seqs = table.get_add_actions(flatten=True).column(f"max.{SEQ}").to_pylist()
        if None in seqs:
            raise KeyError(SEQ)  # a file without statistics could hold the newest
        newest = max(seqs, default=None)
        rows = table.to_pyarrow_dataset().to_table(filter=pc.field(SEQ) == newest) if newest is not None else None
        return rows.slice(0, 1).to_pylist()[0] if rows is not None and rows.num_rows else None
    except (DeltaProtocolError, KeyError):  # a table feature delta-rs lacks, or files without statistics
        last = ctx.lake.read(ctx.lake.view_path(ctx.view)).orderBy(SEQ, ascending=False).first()
        return None if last is None else last.asDict()


def _last_seq(ctx: Context) -> int:
    from pyspark.sql import functions as F

    return int(ctx.lake.read(ctx.lake.view_path(ctx.view)).agg(F.max(SEQ)).first()[0] or 0)
