"""The first_order kind: the classical delta rule, for any SQL the others do not claim."""
from __future__ import annotations

from typing import TYPE_CHECKING

from lakeivm.errors import UnsupportedQuery
from lakeivm.views.kind import Kind, Schemas

if TYPE_CHECKING:
    from lakeivm.spec import ViewSpec
    from lakeivm.sql import Query


def _fit(spec: ViewSpec, query: Query, schemas: Schemas) -> Query:
    if query.has_subquery:
        raise UnsupportedQuery(f"{spec.source}: first_order cannot maintain a nested subquery; it needs the nested kind.")
    if not query.aggregates and not query.group_keys:
        raise UnsupportedQuery(
            f"{spec.source}: a first_order view needs aggregates (SUM/COUNT/AVG with or without GROUP BY) or GROUP BY; "
            "a plain join is kept as a sample with sample_size."
        )
    return query


KIND = Kind(
    name="first_order",
    maintainer="lakeivm.views.first_order.maintainer:FirstOrderMaintainer",
    summary="first-order IVM (the delta rule): aggregates over joins, outer joins, UNION ALL, DISTINCT, top-k",
    claims=lambda spec, query: True,
    fit=_fit,
    per_group=True,
    set_operations=True,
)
