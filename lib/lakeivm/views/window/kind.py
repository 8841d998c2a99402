"""The window kind: window functions over one relation, a change recomputing only its partitions."""
from __future__ import annotations

from typing import TYPE_CHECKING

from lakeivm.views.kind import Kind, Schemas
from lakeivm.sql import has_window
from lakeivm.views.window.shape import partition_of

if TYPE_CHECKING:
    from lakeivm.spec import ViewSpec
    from lakeivm.sql import Query


def _fit(spec: ViewSpec, query: Query, schemas: Schemas) -> Query:
    partition_of(query, spec.source)
    return query


def _describe(spec: ViewSpec, query: Query) -> str:
    p = partition_of(query, spec.source)
    renamed = ", ".join(c if c == o else f"{c} (result column {o})" for c, o in zip(p.columns, p.outputs))
    return (f"window, partitioned by {renamed} of {p.table}: a change to rows of a partition changes only that "
            "partition's window outputs, so a run recomputes the view's SQL on the partitions its changes touch "
            "(their rows at the pin) and replaces those partitions' result rows; its cost is the touched partitions' rows"
            + (f" (where a change only inserts, those from each partition's lowest kept {p.top.order} on)" if p.top else ""))


KIND = Kind(
    name="window",
    maintainer="lakeivm.views.window.maintainer:WindowMaintainer",
    summary="window functions with a PARTITION BY over one table or view: the partitions a change touches recomputed",
    claims=lambda spec, query: has_window(query.sql),
    fit=_fit,
    describe=_describe,
    per_group=True,
    as_written=has_window,
)
