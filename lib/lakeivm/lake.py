"""The lake's layout (ARCHITECTURE §3), base-table creation with CDF on, and the system tables.

```
tables/<name>               base tables (Delta, delta.enableChangeDataFeed = true)
views/<view>/result         the maintained view
views/<view>/aux/<name>     auxiliary views      views/<view>/index/<name>  serialized indexes
views/<view>/sample         reservoir samples    _system/log, _system/costs, _system/leases/<view>
```
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from lakeivm.config import SCHEMAS
from lakeivm.errors import StateError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

SYSTEM_SCHEMAS = SCHEMAS / "system"
CDF = "delta.enableChangeDataFeed"


@dataclass
class Lake:
    """A lake rooted at ``root`` (a local path or any Hadoop/object-store URI)."""

    spark: SparkSession
    root: str
    cache: dict = field(default_factory=dict, repr=False)  # immutable facts, e.g. commit histories

    def __post_init__(self) -> None:
        if not urlparse(self.root).scheme:
            self.root = os.path.abspath(self.root)
        self.root = self.root.rstrip("/")

    def table_path(self, name: str) -> str:
        return f"{self.root}/tables/{name}"

    def view_path(self, view: str, part: str = "result") -> str:
        """``result``, ``sample``, ``aux/<name>`` or ``index/<name>`` of a view."""
        return f"{self.root}/views/{view}/{part}"

    @property
    def log_path(self) -> str:
        return f"{self.root}/_system/log"

    @property
    def costs_path(self) -> str:
        return f"{self.root}/_system/costs"

    def lease_path(self, view: str) -> str:
        return f"{self.root}/_system/leases/{view}.json"

    def create_table(self, name: str, df: DataFrame, mode: str = "error") -> str:
        """Write ``df`` as base table ``name`` with the change data feed on; returns its path."""
        path = self.table_path(name)
        df.write.format("delta").mode(mode).option(CDF, "true").save(path)
        return path

    def is_delta(self, path: str) -> bool:
        from delta.tables import DeltaTable

        return DeltaTable.isDeltaTable(self.spark, path)

    def head_version(self, path: str) -> int:
        """The newest committed version of the Delta table at ``path``: the highest commit file
        ``_delta_log/<version>.json`` (Delta writes each atomically, so a listed one is committed).
        One directory listing instead of a Spark job over the table's history."""
        fs, log = self.fs(f"{path}/_delta_log")
        names = [s.getPath().getName() for s in fs.listStatus(log)] if fs.exists(log) else []
        versions = [int(n[:-5]) for n in names if n.endswith(".json") and n[:-5].isdigit()]
        if not versions:
            raise StateError(f"{path} is not a Delta table (no commit in {path}/_delta_log); create it first.")
        return max(versions)

    def read(self, path: str, version: int | None = None) -> DataFrame:
        reader = self.spark.read.format("delta")
        if version is not None:
            reader = reader.option("versionAsOf", version)
        return reader.load(path)

    def table_names(self) -> list[str]:
        """Base tables present under ``tables/``."""
        fs, path = self.fs(f"{self.root}/tables")
        if not fs.exists(path):
            return []
        return sorted(s.getPath().getName() for s in fs.listStatus(path) if s.isDirectory())

    def table_schemas(self) -> dict[str, dict[str, str]]:
        """{table: {column: Spark SQL type}} of every base table at its head version."""
        return {name: {f.name: f.dataType.simpleString() for f in self.read(self.table_path(name)).schema.fields}
                for name in self.table_names()}

    def ensure_system_tables(self) -> None:
        """Create ``_system/log`` and ``_system/costs`` (schemas in lakeivm/schemas/system/) if missing."""
        for path, schema_file in ((self.log_path, "log.json"), (self.costs_path, "costs.json")):
            if not self.is_delta(path):
                ddl = ", ".join(f"`{c}` {t}" for c, t in self.system_schema(schema_file).items())
                self.spark.createDataFrame([], ddl).write.format("delta").mode("ignore").save(path)

    @staticmethod
    def system_schema(schema_file: str) -> dict[str, str]:
        return json.loads((SYSTEM_SCHEMAS / schema_file).read_text())["columns"]

    def delete(self, path: str) -> None:
        """Remove a folder (state of a view being dropped or rebuilt from scratch)."""
        fs, hpath = self.fs(path)
        if fs.exists(hpath):
            fs.delete(hpath, True)

    def fs(self, path: str):
        """(Hadoop FileSystem, Hadoop Path) for ``path``: works for any URI scheme Spark can read."""
        jvm = self.spark.sparkContext._jvm
        hpath = jvm.org.apache.hadoop.fs.Path(path)
        return hpath.getFileSystem(self.spark.sparkContext._jsc.hadoopConfiguration()), hpath
