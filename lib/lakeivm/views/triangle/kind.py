"""The triangle kind: IVM^ε triangle counts with heavy/light partitions (Kara et al., ICDT 2019)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from lakeivm.errors import UnsupportedQuery
from lakeivm.views.kind import Kind, Schemas, plain
from lakeivm.views.triangle.shape import triangle_shape

if TYPE_CHECKING:
    from lakeivm.spec import ViewSpec
    from lakeivm.sql import Query


def _fit(spec: ViewSpec, query: Query, schemas: Schemas) -> Query:
    if triangle_shape(query) is None:
        raise UnsupportedQuery(
            f"{spec.source}: kind triangle needs a triangle count: SELECT COUNT(*) over three relations joined "
            "in a cycle R(a,b), S(b,c), T(c,a) (or one edge table joined with itself so), with no filters "
            "or GROUP BY. Remove `kind: triangle` to let the classifier choose."
        )
    return query


KIND = Kind(
    name="triangle",
    maintainer="lakeivm.views.triangle.maintainer:TriangleMaintainer",
    summary="IVM^ε: a triangle count over three relations joined in a cycle, heavy/light partitions",
    claims=lambda spec, query: plain(query) and triangle_shape(query) is not None,
    fit=_fit,
    options={"epsilon": {"type": "number", "minimum": 0, "maximum": 1, "description": "triangle: heavy/light exponent"}},
)
