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
    """The view's ``sql`` over ``{table: version}`` snapshots of ``lake``, evaluated by DuckDB. A
    table the gate refuses (``fastpath``: e.g. deletion vectors, which delta-rs would not apply) is
    a LakeIVMError naming it: the baseline must read what Spark reads."""
    import duckdb
    import sqlglot
    from deltalake import DeltaTable

    from lakeivm.errors import LakeIVMError
    from lakeivm.store import fastpath

    t0 = time.perf_counter()
    loaded = {name: DeltaTable(lake.table_path(name), version=version) for name, version in versions.items()}
    for name, table in loaded.items():
        refused = fastpath.refusal(table)
        if refused:
            raise LakeIVMError(f"DuckDB baseline: table {name} at version {versions[name]}: {refused}")
    tables = {name: table.to_pyarrow_table() for name, table in loaded.items()}
    t1 = time.perf_counter()
    con = duckdb.connect()
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    for name, table in tables.items():
        con.register(name, table)
    rows = con.execute(sqlglot.transpile(sql, read="spark", write="duckdb")[0]).fetchall()
    con.close()
    return DuckdbRun(t1 - t0, time.perf_counter() - t1, rows)
