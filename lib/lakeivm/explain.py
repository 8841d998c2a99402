"""How a view is maintained, as text: incremental or full and why, its kind and the kind's plan."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lakeivm.lake import Lake
    from lakeivm.spec import ViewSpec


def explain(lake: Lake, spec: ViewSpec) -> str:
    """The lines ``lakeivm explain`` prints: the policy's choice, the views it reads or that were
    split off it, why it is not incremental, and for fivm its view tree (F-IVM §3), for nested the
    general algorithm's plan or the shipped shape (RPAI §4)."""
    from lakeivm.engine import schemas_for
    from lakeivm.registry import choose, why_not_fivm

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
    if choice.kind == "fivm":  # the view tree: each view's keys, what it sums out, stored or not
        from lakeivm.views.fivm.plan import build_plan, describe

        lines.append(describe(build_plan(choice.query, spec.options)))
    elif choice.kind == "nested":
        from lakeivm.views.nested.general import describe as describe_general
        from lakeivm.views.nested.shape import nested_shape

        shape = nested_shape(choice.query)
        lines.append(describe_general(shape.plan) if shape.plan is not None else
                     f"nested, the shipped shape {shape.name} (RPAI §4.3-4.7): an ordered aggregate index, O(log n) per change")
    elif choice.kind == "first_order" and (reason := why_not_fivm(spec, choice.query)):
        lines.append(f"not fivm: {reason}")
    return "\n".join(lines)
