"""What a kind declares to the registry: its name, options, what SQL it fits, how to describe its plan.

The registry (``lakeivm.views.kinds``) asks the kinds in order, most specific first, which one claims a
view, and the chosen kind's ``fit`` either returns the query it maintains or raises UnsupportedQuery
naming the construct that prevents it (``docs/design/run.md#kinds-and-their-maintainers``). A kind's
maintainer is named by its import path and loaded on first use, so that choosing a kind imports no
Spark.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lakeivm.spec import ViewSpec
    from lakeivm.sql import Query

Schemas = Mapping[str, Mapping[str, str]]  # table -> column -> Spark type


def plain(query: Query) -> bool:
    """No outer join, UNION ALL or bare projection: the shapes only a kind with set operations maintains."""
    return query.implicit_keys != "projection" and not query.outer and not query.branches


def _claims_nothing(spec: ViewSpec, query: Query) -> bool:
    return False


def _fits_as_is(spec: ViewSpec, query: Query, schemas: Schemas) -> Query:
    return query


@dataclass(frozen=True)
class Kind:
    """One way to maintain a view.

    - ``claims(spec, query)``: whether the classifier picks this kind for a view that names none
      (asked in the registry's order; the first that claims it wins);
    - ``fit(spec, query, schemas)``: the query the kind maintains, or UnsupportedQuery saying why not;
    - ``describe(spec, query)``: lines ``lakeivm explain`` prints about the kind's plan, or None;
    - ``why_not(spec, query)``: why a view this kind could claim went to a later kind, or None;
    - ``options``: the spec fields only this kind reads, each with its JSON schema (merged into the
      view schema; naming one under another kind is an error);
    - ``per_group``: keeps a state per group, so it maintains top-k and views over views;
    - ``set_operations``: maintains outer joins and UNION ALL;
    - ``as_written``: claims, by its text, SQL the incremental parser refuses (window functions):
      its query is then parsed as written (``lakeivm.sql.parse_full``) and no later kind is asked.
    """

    name: str
    maintainer: str  # "module:Class"
    summary: str
    claims: Callable[[ViewSpec, Query], bool] = _claims_nothing
    fit: Callable[[ViewSpec, Query, Schemas], Query] = _fits_as_is
    describe: Callable[[ViewSpec, Query], str | None] | None = None
    why_not: Callable[[ViewSpec, Query], str | None] | None = None
    options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    per_group: bool = False
    set_operations: bool = False
    as_written: Callable[[str], bool] | None = None
