"""TPC-H base tables from ``tpchgen-cli``, and a change stream committed as ordinary Delta writes.

The stream follows TPC-H's refresh functions -- RF1 inserts new orders with their lineitems, RF2
deletes old orders with theirs -- plus UPDATEs of ``partsupp.ps_supplycost`` and of
``supplier.s_nationkey`` (and, when asked, of ``customer.c_acctbal`` and ``part.p_retailprice``), so
the change data feed carries inserts, deletes and updates.
RF1's new orders are copies of existing orders under fresh keys (tpchgen-cli does not implement the
refresh functions), which keeps every foreign key valid.
"""
from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import pyarrow.dataset

from lakeivm.datagen.writes import dml, local_table
from lakeivm.errors import InvalidInput, LakeIVMError
from lakeivm.store.lake import CDF, Lake

TABLES = ("region", "nation", "supplier", "customer", "part", "partsupp", "orders", "lineitem")


def tpch_tables(names: Iterable[str]) -> list[str]:
    """``names`` as a list, refused naming the choices if one is not a TPC-H table."""
    tables = [name.strip() for name in names]
    unknown = sorted(set(tables) - set(TABLES))
    if unknown:
        raise InvalidInput(f"unknown TPC-H tables {unknown}; choose from {', '.join(TABLES)}.")
    return tables


def generate_tpch(lake: Lake, scale: float, tables: Iterable[str] = TABLES, progress: Callable[[str], None] = print) -> dict[str, int]:
    """Write TPC-H tables at ``scale`` as Delta tables (CDF on) under ``tables/``; returns row counts."""
    tables = tpch_tables(tables)
    counts = {}
    staging = None  # a local lake stages the files under its root, where a Connect server or a worker sharing the lake sees them
    if not urlparse(lake.root).scheme:
        staging = f"{lake.root}/_staging"
        os.makedirs(staging, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tpchgen", dir=staging) as folder:
        progress(f"tpchgen-cli: generating TPC-H SF {scale} ({', '.join(tables)})")
        subprocess.run(
            [tpchgen(), "parquet", "-s", str(scale), "--tables", ",".join(tables), "--output-dir", folder],
            check=True, capture_output=True, text=True,
        )
        for table in tables:
            written = str(Path(folder) / f"{table}.parquet")
            generated = pyarrow.dataset.dataset(written)
            if staging is None:
                lake.create_table(table, lake.spark.read.parquet(written), mode="overwrite")
            else:
                lake.write_small(lake.table_path(table), _as_spark_writes_it(generated), "overwrite", configuration={CDF: "true"})
            counts[table] = generated.count_rows()  # the files' footers: no Spark job
            progress(f"  tables/{table}: {counts[table]} rows")
    return counts


def _as_spark_writes_it(generated: pyarrow.dataset.Dataset) -> pyarrow.RecordBatchReader:
    """A generated table's batches as ``Lake.create_table`` would store them through Spark: every
    column nullable, no Parquet field ids (Spark would then expect them in its own files). On a local
    lake delta-rs writes them, without the Spark jobs that writing small tables costs."""
    schema = pyarrow.schema([field.with_nullable(True).remove_metadata() for field in generated.schema])
    return pyarrow.RecordBatchReader.from_batches(schema, (batch.cast(schema) for batch in generated.to_batches()))


@dataclass
class TpchChangeStream:
    """Seeded TPC-H change batches; each call commits to the lake's base tables."""

    lake: Lake
    seed: int = 7

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def rf1(self, orders: int) -> int:
        """Insert ``orders`` new orders (copies of random ones under fresh keys) with their lineitems."""
        local = self._local_table("orders"), self._local_table("lineitem")
        if None not in local:
            return self._rf1_in_process(orders, *local)
        from pyspark.sql import functions as F
        from pyspark.sql.window import Window

        lake = self.lake
        current = lake.read(lake.table_path("orders"))
        top = current.agg(F.max("o_orderkey")).first()[0] or 0
        picked = current.orderBy(F.rand(self.rng.randrange(2**31))).limit(orders)  # a few rows: one window partition is right
        keyed = picked.withColumn("new_key", (F.lit(top) + F.row_number().over(Window.partitionBy(F.lit(0)).orderBy("o_orderkey"))).cast("bigint")).cache()
        lines = lake.read(lake.table_path("lineitem")).join(keyed.select(F.col("o_orderkey").alias("l_orderkey"), "new_key"), "l_orderkey")
        new_lines = lines.withColumn("l_orderkey", F.col("new_key")).drop("new_key")
        new_orders = keyed.withColumn("o_orderkey", F.col("new_key")).drop("new_key")
        new_orders.select(*current.columns).write.format("delta").mode("append").save(lake.table_path("orders"))
        lineitem_columns = lake.read(lake.table_path("lineitem")).columns
        new_lines.select(*lineitem_columns).write.format("delta").mode("append").save(lake.table_path("lineitem"))
        keyed.unpersist()
        return orders

    def rf2(self, orders: int) -> int:
        """Delete ``orders`` random existing orders and their lineitems."""
        keys = self._sample("orders", "o_orderkey", orders)
        if keys:
            listed = ", ".join(map(str, keys))
            self._dml("lineitem", f"l_orderkey IN ({listed})")
            self._dml("orders", f"o_orderkey IN ({listed})")
        return len(keys)

    def update_supplycost(self, parts: int) -> int:
        """Raise or cut ``ps_supplycost`` of every supplier of ``parts`` random parts."""
        keys = self._sample("partsupp", "ps_partkey", parts)
        factor = self.rng.choice(["1.10", "0.95", "1.02"])
        if keys:
            self._dml("partsupp", f"ps_partkey IN ({', '.join(map(str, keys))})",
                      {"ps_supplycost": f"CAST(ps_supplycost * {factor} AS DECIMAL(15,2))"})
        return len(keys)

    def update_supplier_nation(self, suppliers: int) -> int:
        """Move ``suppliers`` random suppliers to another nation."""
        keys = self._sample("supplier", "s_suppkey", suppliers)
        delta = self.rng.randint(1, 24)
        if keys:
            self._dml("supplier", f"s_suppkey IN ({', '.join(map(str, keys))})", {"s_nationkey": f"(s_nationkey + {delta}) % 25"})
        return len(keys)

    def update_customer_balance(self, customers: int) -> int:
        """Pay in or draw on the account of ``customers`` random customers (``c_acctbal``)."""
        keys = self._sample("customer", "c_custkey", customers)
        amount = self.rng.choice(["250.00", "-120.50", "75.25"])
        if keys:
            self._dml("customer", f"c_custkey IN ({', '.join(map(str, keys))})", {"c_acctbal": f"CAST(c_acctbal + {amount} AS DECIMAL(15,2))"})
        return len(keys)

    def update_part_price(self, parts: int) -> int:
        """Reprice ``parts`` random parts (``p_retailprice``)."""
        keys = self._sample("part", "p_partkey", parts)
        factor = self.rng.choice(["1.05", "0.97"])
        if keys:
            self._dml("part", f"p_partkey IN ({', '.join(map(str, keys))})", {"p_retailprice": f"CAST(p_retailprice * {factor} AS DECIMAL(15,2))"})
        return len(keys)

    def batch(self, orders: int = 20, parts: int = 5, suppliers: int = 2, customers: int = 0, prices: int = 0) -> str:
        """One mixed batch: RF1, RF2 and the UPDATEs (``customers``' balances and ``prices`` parts'
        prices only when asked); returns a one-line description."""
        inserted, deleted = self.rf1(orders), self.rf2(orders)
        costs, moved = self.update_supplycost(parts), self.update_supplier_nation(suppliers)
        said = f"RF1 +{inserted} orders, RF2 -{deleted} orders, {costs} parts re-costed, {moved} suppliers moved"
        if customers:
            said += f", {self.update_customer_balance(customers)} balances changed"
        if prices:
            said += f", {self.update_part_price(prices)} parts repriced"
        return said

    def _sample(self, table: str, column: str, n: int) -> list[int]:
        """``n`` random distinct values of ``column``."""
        local = self._local_table(table)
        if local is not None:
            values = sorted(set(_column(local, column)))
            return self.rng.sample(values, min(n, len(values)))
        from pyspark.sql import functions as F

        df = self.lake.read(self.lake.table_path(table)).select(column).distinct()
        return [r[0] for r in df.orderBy(F.rand(self.rng.randrange(2**31))).limit(n).collect()]

    def _dml(self, table: str, where: str, updates: dict[str, str] | None = None) -> None:
        dml(self.lake, table, where, updates)

    def _rf1_in_process(self, orders: int, stored_orders, stored_lines) -> int:
        """``rf1`` read and written by delta-rs (the two tables loaded by ``_local_table``): the picked
        orders and their lineitems filtered out of the files, re-keyed after the largest key in
        ``o_orderkey`` order, appended."""
        import pyarrow.compute as pc

        keys = _column(stored_orders, "o_orderkey")
        picked = sorted(self.rng.sample(sorted(keys), min(orders, len(keys))))
        top = max(keys, default=0)
        new_key = dict(zip(picked, range(top + 1, top + 1 + len(picked))))
        for table, stored, column in (("orders", stored_orders, "o_orderkey"), ("lineitem", stored_lines, "l_orderkey")):
            rows = stored.to_pyarrow_dataset().to_table(filter=pc.field(column).isin(picked))
            renamed = pyarrow.array([new_key[k] for k in rows.column(column).to_pylist()], rows.schema.field(column).type)
            self.lake.write_small(self.lake.table_path(table), rows.set_column(rows.schema.get_field_index(column), column, renamed), "append")
        return len(picked)

    def _local_table(self, table: str):
        return local_table(self.lake, table)

def _column(table, column: str) -> list:
    """One column of a delta-rs table, as Python values."""
    return table.to_pyarrow_dataset().to_table(columns=[column]).column(column).to_pylist()


def tpchgen() -> str:
    """The tpchgen-cli program (the bench extra installs it beside this Python); LakeIVMError naming the extra if absent."""
    here = Path(sys.executable).parent / "tpchgen-cli"
    found = str(here) if here.exists() else shutil.which("tpchgen-cli")
    if not found:
        raise LakeIVMError("tpchgen-cli is not installed: TPC-H data needs `pip install 'lakeivm[bench]'` (or `make setup`).")
    return found
