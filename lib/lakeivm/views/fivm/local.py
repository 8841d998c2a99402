"""F-IVM's delta propagation (Fig. 4) on the calling process, for a small run.

When a table's lifted delta and every stored view on its path to the root are small (the stored
ones read by delta-rs already: ``AdditiveTable.current_local``), each step ⊕_X (δV_child ⊗
siblings) is a join on shared keys, a product of payloads and a sum, over a few thousand rows of
integers and doubles: DuckDB runs it in milliseconds on the Arrow tables, where Spark would take a
job (a shuffle, a local checkpoint) per step. Only arithmetic on payload columns happens here --
the user's SQL (filters, the lifted weights) was evaluated by Spark at the leaf, and the result is
rendered by Spark -- so no SQL meaning moves to another engine.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from lakeivm.views.fivm.payload import ALIVE
from lakeivm.views.state import duckdb_query, quoted

if TYPE_CHECKING:
    import pyarrow as pa

    from lakeivm.views.fivm.plan import FivmPlan
    from lakeivm.views.fivm.tree import View


class Expr(str):
    """A SQL expression whose ``*`` builds the product's text: ``PayloadRing.multiply`` is written
    for any values with ``*``, so it writes DuckDB SQL from these as it writes Spark Columns."""

    def __mul__(self, other: object) -> Expr:
        return Expr(f"({self} * {other})")


def join_sum(plan: FivmPlan, view: View, inputs: Sequence[tuple[View, pa.Table]]) -> pa.Table:
    """``maintainer._join_sum`` on Arrow tables: join ``inputs`` (child view, its rows) on shared keys,
    multiply payloads, sum by ``view.keys``; keys with a NULL count dropped. Integer payloads stay
    BIGINT and floating ones DOUBLE, as Spark's sums keep them."""
    sources, have, factors, tables = [], [], [], {}
    for i, (child, rows) in enumerate(inputs):
        columns = plan.payload_columns(child)
        tables[f"t{i}"] = rows.select([*child.keys, *columns]).rename_columns([*child.keys, *[f"_f{i}_{c}" for c in columns]])
        shared = [k for k in child.keys if k in have]
        sources.append(f"t{i}" if i == 0 else
                       f"JOIN t{i} USING ({', '.join(quoted(k) for k in shared)})" if shared else f"CROSS JOIN t{i}")
        have += [k for k in child.keys if k not in have]
        factors.append((plan.lifted(child), {c: Expr(quoted(f"_f{i}_{c}")) for c in columns}))
    product = plan.ring.multiply(factors)
    keys = ", ".join(quoted(k) for k in view.keys)
    sums = ", ".join(f"SUM({e}) AS {quoted(c)}" for c, e in product.items())
    text = f"SELECT {keys + ', ' if keys else ''}{sums} FROM {' '.join(sources)}" + (f" GROUP BY {keys}" if keys else "")
    return _spark_types(duckdb_query(f"SELECT * FROM ({text}) WHERE {quoted(ALIVE)} IS NOT NULL", **tables), product)


def _spark_types(table: pa.Table, payloads: Sequence[str]) -> pa.Table:
    """DuckDB's sums as Spark's: a HUGEINT (Arrow decimal of scale 0) sum of integers as BIGINT;
    view string types as plain ones (pyspark reads those)."""
    import pyarrow as pa

    from lakeivm.sources.changes import plain_field

    fields = []
    for field in table.schema:
        if field.name in payloads and (pa.types.is_integer(field.type) or (pa.types.is_decimal(field.type) and field.type.scale == 0)):
            field = field.with_type(pa.int64())
        fields.append(plain_field(field))
    return table.cast(pa.schema(fields))
