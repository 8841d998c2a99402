"""The single-machine baseline: DuckDB recomputing a view's SQL over the same Delta tables.

What a user with one machine would run instead of lakeivm: read each table's snapshot with delta-rs
(the ``deltalake`` package) into Arrow, then let DuckDB evaluate the view's SQL (transpiled from
Spark SQL by sqlglot). Read and compute are timed apart, so a benchmark can show both.
"""
from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class DuckdbRun:
    """One recomputation: seconds reading the snapshots, seconds computing, the result's rows."""

    read_s: float
    compute_s: float
    rows: list[tuple]

    @property
    def seconds(self) -> float:
        return self.read_s + self.compute_s


def recompute_duckdb(lake, sql: str, versions: Mapping[str, int], threads: int | None = None) -> DuckdbRun:
    """The view's ``sql`` over ``{table: version}`` snapshots of ``lake``, evaluated by DuckDB."""
    import duckdb
    import sqlglot
    from deltalake import DeltaTable

    t0 = time.perf_counter()
    tables = {name: DeltaTable(lake.table_path(name), version=version).to_pyarrow_table() for name, version in versions.items()}
    t1 = time.perf_counter()
    con = duckdb.connect()
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    for name, table in tables.items():
        con.register(name, table)
    rows = con.execute(sqlglot.transpile(sql, read="spark", write="duckdb")[0]).fetchall()
    con.close()
    return DuckdbRun(t1 - t0, time.perf_counter() - t1, rows)
