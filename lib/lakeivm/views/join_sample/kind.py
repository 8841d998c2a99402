"""The join_sample kind: a uniform reservoir sample of a join's results (RSJoin, Dai, Hu, Yi SIGMOD 2024)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from lakeivm.views.kind import Kind, Schemas
from lakeivm.views.join_sample.plan import plan_sample

if TYPE_CHECKING:
    from lakeivm.spec import ViewSpec
    from lakeivm.sql import Query

OPTIONS = {
    "sample_size": {"type": "integer", "minimum": 1, "description": "join_sample: reservoir size k"},
    "foreign_keys": {"type": "array", "items": {"type": "string", "pattern": "^\\s*\\w+\\s*->\\s*\\w+\\s*$"},
                     "description": "join_sample: 'referencing -> referenced' FROM-alias pairs merged before sampling (RSJoin §4.4)"},
}


def _fit(spec: ViewSpec, query: Query, schemas: Schemas) -> Query:
    plan_sample(query, spec.options, spec.source)  # raises UnsupportedQuery naming the construct
    return query


KIND = Kind(
    name="join_sample",
    maintainer="lakeivm.views.join_sample.maintainer:JoinSampleMaintainer",
    summary="RSJoin: a uniform sample of k rows of an acyclic join, kept under inserts",
    claims=lambda spec, query: "sample_size" in spec.options,
    fit=_fit,
    options=OPTIONS,
)
