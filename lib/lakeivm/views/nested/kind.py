"""The nested kind: correlated nested aggregates with an ordered aggregate index (RPAI, Abo Khamis et al.)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from lakeivm.errors import UnsupportedQuery
from lakeivm.views.kind import Kind, Schemas
from lakeivm.views.nested.general import describe as describe_general
from lakeivm.views.nested.shape import diagnose, nested_shape

if TYPE_CHECKING:
    from lakeivm.spec import ViewSpec
    from lakeivm.sql import Query


def _fit(spec: ViewSpec, query: Query, schemas: Schemas) -> Query:
    shape = nested_shape(query)
    if shape is None:
        raise UnsupportedQuery(f"{spec.source}: kind nested: {diagnose(query)}.")
    inexact = shape.plan.inexact(schemas) if shape.plan is not None else None
    if inexact:
        raise UnsupportedQuery(f"{spec.source}: kind nested: {inexact}.")
    return query


def _describe(spec: ViewSpec, query: Query) -> str:
    shape = nested_shape(query)
    return (describe_general(shape.plan) if shape.plan is not None else
            f"nested, the shipped shape {shape.name} (RPAI §4.3): an ordered aggregate index, O(log n) per change")


KIND = Kind(
    name="nested",
    maintainer="lakeivm.views.nested.maintainer:NestedMaintainer",
    summary="RPAI: correlated nested aggregates (VWAP-like, TPC-H Q17-like) with an ordered aggregate index",
    claims=lambda spec, query: query.has_subquery,
    fit=_fit,
    describe=_describe,
)
