"""The generators' changes to a lake's base tables: one DELETE or UPDATE commit, by delta-rs in this
process where the fast-path gate admits the table for writes on a local lake, else by Spark."""
from __future__ import annotations

from urllib.parse import urlparse


def local_table(lake, table: str):
    """The table loaded by delta-rs when this process reads and changes it itself: on a local lake,
    admitted by the gate for writes (``fastpath``: no deletion vectors, column mapping, ...); else
    None, and Spark does (an s3a:// lake too)."""
    if urlparse(lake.root).scheme:
        return None
    from lakeivm.store import fastpath

    return fastpath.load(lake.table_path(table), write=True)


def dml(lake, table: str, where: str, updates: dict[str, str] | None = None) -> None:
    """DELETE the rows of ``table`` matching ``where``, or UPDATE them (``updates``: column -> SQL
    expression): one commit, its change data feed written alike by either engine."""
    local = local_table(lake, table)
    if local is not None:
        if updates is None:
            local.delete(where)
        else:
            local.update(updates=updates, predicate=where)
        return
    target = f"delta.`{lake.table_path(table)}`"
    if updates is None:
        lake.spark.sql(f"DELETE FROM {target} WHERE {where}")
    else:
        assignments = ", ".join(f"{column} = {expression}" for column, expression in updates.items())
        lake.spark.sql(f"UPDATE {target} SET {assignments} WHERE {where}")
