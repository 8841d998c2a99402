"""How a view is maintained, as text: incremental or full and why, its kind and the kind's plan."""
from __future__ import annotations

from typing import TYPE_CHECKING

from lakeivm.errors import analysed_as
from lakeivm.spec import FULL

if TYPE_CHECKING:
    from lakeivm.store.lake import Lake
    from lakeivm.spec import ViewSpec


def explain(lake: Lake, spec: ViewSpec) -> str:
    """The lines ``lakeivm explain`` prints: the policy's choice, the views it reads or that were
    split off it, why it is not incremental, the kind's plan (``Kind.describe``: fivm's view tree, the
    nested kind's index plan) and why the kinds ahead of it in order did not take it."""
    from lakeivm.run.engine import schemas_for
    from lakeivm.views.kinds import kind
    from lakeivm.catalog.registry import choose, why_not

    with analysed_as(spec):
        choice = choose(spec, schemas_for(lake, spec))
    lines = [f"{spec.name}: refresh policy {spec.refresh_policy}: {choice.mode}, kind {choice.kind}"]
    if spec.derived_from:
        lines.append(f"an aggregating CTE, derived table or uncorrelated subquery of view {spec.derived_from}, maintained "
                     f"as a view of its own that {spec.derived_from} reads")
    derived = [name for name, up in spec.upstreams.items() if up.derived_from == spec.name]
    if derived:
        lines.append(f"its aggregating CTEs, derived tables or uncorrelated subqueries are views of their own: "
                     f"{', '.join(derived)} (`lakeivm explain` each)")
    if spec.upstreams:
        lines.append(f"reads views {', '.join(spec.upstreams)}: their committed results, a change being the difference "
                     "between two of their runs; `lakeivm refresh` refreshes them first, the DAG also runs when they publish")
    if choice.auto:
        lines.append("auto: each run maintains it incrementally or recomputes it in full, whichever its log predicts "
                     "cheaper (`lakeivm status` shows the last choice; the log row's plan says why)")
    if choice.why_full:  # the construct that keeps it from incremental maintenance (or the policy)
        lines.append(f"not incremental: {choice.why_full}")
    lines.extend(choice.query.notes)
    describe = kind(choice.kind).describe
    if describe is not None and (plan := describe(spec, choice.query)):  # e.g. fivm's view tree, nested's index plan
        lines.append(plan)
    if choice.kind != FULL:
        lines.extend(why_not(spec, choice.query, choice.kind))
    return "\n".join(lines)
