"""The fivm kind: factorized higher-order IVM over payload rings (F-IVM, Nikolic & Olteanu, SIGMOD 2018)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from lakeivm.errors import UnsupportedQuery
from lakeivm.views.kind import Kind, Schemas, plain
from lakeivm.views.fivm.plan import build_plan, describe, fit_query

if TYPE_CHECKING:
    from lakeivm.spec import ViewSpec
    from lakeivm.sql import Query

OPTIONS = {
    "variable_order": {"description": "fivm: explicit variable order"},
    "updatable": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}, "minItems": 1}],
                  "description": "fivm: tables whose changes are applied incrementally (default all); others rebuild the state"},
    "features": {"type": "array", "items": {"type": "string"}, "description": "fivm regression: feature columns"},
    "label": {"type": "string", "description": "fivm regression: label column"},
}
_ASKS_FOR_FIVM = ("features", "label", "updatable")  # options that make a view fivm's without `kind:`


def why_not(spec: ViewSpec, query: Query) -> str | None:
    """Why F-IVM cannot maintain the view (it then goes to first_order), or None if it can."""
    try:
        build_plan(query, spec.options)
    except UnsupportedQuery as err:
        return str(err)
    return None


def _fit(spec: ViewSpec, query: Query, schemas: Schemas) -> Query:
    try:
        query = fit_query(query, spec.options, schemas)
        build_plan(query, spec.options)
    except UnsupportedQuery as err:
        raise UnsupportedQuery(f"{spec.source}: kind fivm: {err}") from err
    return query


KIND = Kind(
    name="fivm",
    maintainer="lakeivm.views.fivm.maintainer:FivmMaintainer",
    summary="F-IVM: a view tree of stored aggregates over an acyclic join; SUM/COUNT/AVG and regression (cofactor ring)",
    claims=lambda spec, query: plain(query) and (any(option in spec.options for option in _ASKS_FOR_FIVM) or why_not(spec, query) is None),
    fit=_fit,
    describe=lambda spec, query: describe(build_plan(query, spec.options)),
    why_not=why_not,
    options=OPTIONS,
    per_group=True,
)
