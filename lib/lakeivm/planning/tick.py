"""What a maintenance run needs from the planner, read off the view's maintenance log.

The paper's model mapped onto runs: docs/design/planner.md#from-the-model-to-a-pipeline.

The engine hands ``plan_tick`` the pending change counts and the view's committed log rows; every
input of the LGM decision is derived from them, so nothing is a guess in code:

- cost model per source table: f(k) = a·k + b fitted (``fit_cost_model``) to the (rows, seconds)
  of the last runs that applied the table, with the calibrated (``lakeivm calibrate``) or declared
  (``cost_prior``) model as the prior until enough runs exist, the default prior (a guess) until the
  first -- or, where the view has applied other tables, the dearest of their costs (``Borrowed``)
  (``fit_costs: false`` keeps the prior);
  a line per read path (``TwoPathCost``) once batches above the lake's ``limits.small_delta_rows`` were
  measured;
- expected arrivals per table before the next tick: a high quantile of the arrivals observed
  between consecutive runs (d̂);
- run seconds: a high quantile of what a run that applies something pays besides its tables'
  seconds (lease, pins, writing the state and the result, commit) -- shared by the tables of one
  run, so not charged to them; the headroom is that, plus what runs that applied several tables took
  beyond the current models' prediction (``joint_excess``, their median: a refresh applies every table at once),
  plus the spec's declared ``headroom`` margin;
- the ONLINE epoch state: seconds spent and ticks since the last on-demand refresh
  (docs/design/planner.md#choices-the-paper-leaves-open).

Policies: ``lgm`` (default: ``decide``), ``naive`` (symmetric: apply everything once the
constraint would break) and ``eager`` (apply every pending table every tick).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from lakeivm.errors import SpecError
from lakeivm.limits import Limits
from lakeivm.planning.costs import MIN_OBSERVATIONS, CostFunction, LinearCost, fit_cost_model
from lakeivm.planning.decide import Decision, decide, refresh_decision

if TYPE_CHECKING:
    from lakeivm.store.commit import LogRow

POLICIES = ("lgm", "naive", "eager")
DEFAULT_PRIOR = LinearCost(a=1e-4, b=2.0)  # seconds: a Spark delta job on a warm session, before any run
WINDOW = 50  # runs a fit looks back over: costs drift as the other tables grow
QUANTILE = 0.9
RUN_COST = "(run)"  # the calibrated shared seconds of a run, stored in _system/costs beside the tables
JOINT_COST = "(joint)"  # the calibrated joint excess of a run applying every table (``joint_excess``), stored likewise


@dataclass(frozen=True)
class PlannerInputs:
    """Everything the decision used, kept so the log and ``lakeivm status`` can show it."""

    costs: Mapping[str, CostFunction]
    expected_arrivals: Mapping[str, float]
    headroom_seconds: float
    run_seconds: float
    joint_excess_seconds: float
    spent_seconds: float
    ticks_since_refresh: int


def planner_inputs(
    history: Sequence[LogRow],
    pending: Mapping[str, int],
    options: Mapping[str, object],
    calibrated: Mapping[str, CostFunction] | None = None,
    small_delta_rows: int = Limits.small_delta_rows,
) -> PlannerInputs:
    """Derive the planner's inputs from the committed log rows (oldest first); see module doc.
    ``small_delta_rows``: the lake's limit between the two read paths of a change range."""
    priors = {t: _prior(t, options, calibrated or {}) for t in pending}
    fit = bool(options.get("fit_costs", True))
    costs = {t: fit_cost_model(_observations(history, t) if fit else [], priors[t], _runs_before_fit(priors[t]),
                               threshold=small_delta_rows) for t in pending}
    borrowed = _borrowed(history, small_delta_rows) if fit else None
    if borrowed is not None:
        costs.update({t: borrowed for t in pending if priors[t] is DEFAULT_PRIOR and not _observations(history, t)})
    epoch, shared = _epoch(history), run_seconds(history, (calibrated or {}).get(RUN_COST))
    excess = joint_excess(history, costs, shared, (calibrated or {}).get(JOINT_COST))
    return PlannerInputs(
        costs=costs,
        expected_arrivals={t: _expected_arrivals(history, t, pending[t]) for t in pending},
        headroom_seconds=shared + excess + float(options.get("headroom", 0.0)),
        run_seconds=shared,
        joint_excess_seconds=excess,
        spent_seconds=sum(r.seconds for r in epoch),
        ticks_since_refresh=len(epoch),
    )


def plan_tick(
    history: Sequence[LogRow],
    pending: Mapping[str, int],
    deadline_seconds: float,
    options: Mapping[str, object],
    max_age_exceeded: frozenset[str] = frozenset(),
    calibrated: Mapping[str, CostFunction] | None = None,
    small_delta_rows: int = Limits.small_delta_rows,
) -> Decision:
    """The tables a scheduled tick applies under the view's ``planner`` policy (default ``lgm``)."""
    policy = str(options.get("planner", "lgm"))
    if policy not in POLICIES:
        raise SpecError(f"planner: {policy!r} is not a policy; use one of {', '.join(POLICIES)}")
    inputs = planner_inputs(history, pending, options, calibrated, small_delta_rows)
    lgm = decide(pending, inputs.costs, deadline_seconds, inputs.expected_arrivals, inputs.headroom_seconds,
                 max_age_exceeded, spent_seconds=inputs.spent_seconds, ticks_since_refresh=inputs.ticks_since_refresh,
                 run_seconds=inputs.run_seconds)
    if policy == "lgm":
        return _whole_run(lgm, pending, inputs)
    everything = frozenset(t for t, k in pending.items() if k > 0)
    if policy == "eager" or (lgm.apply - max_age_exceeded):  # naive: the constraint would break -> flush all
        seconds = sum(inputs.costs[t](pending[t]) for t in everything)
        reason = "eager: apply every pending table" if policy == "eager" else f"naive: symmetric flush ({lgm.reason})"
        return _whole_run(Decision(everything, seconds, inputs.headroom_seconds, reason), pending, inputs)
    return _whole_run(lgm, pending, inputs)


def _whole_run(decision: Decision, pending: Mapping[str, int], inputs: PlannerInputs) -> Decision:
    """A tick's prediction of its whole run, as a refresh's is: its tables' costs plus a run's shared
    seconds and, applying several tables, the joint runs' excess -- what the log row's actual seconds
    measure, and what ``auto`` weighs against a recompute's whole run."""
    applied = [t for t in decision.apply if pending.get(t, 0) > 0]
    if not applied:
        return decision
    extra = inputs.run_seconds + (inputs.joint_excess_seconds if len(applied) > 1 else 0.0)
    return replace(decision, predicted_seconds=decision.predicted_seconds + extra)


def plan_refresh(history: Sequence[LogRow], pending: Mapping[str, int], deadline_seconds: float,
                 options: Mapping[str, object], calibrated: Mapping[str, CostFunction] | None = None,
                 small_delta_rows: int = Limits.small_delta_rows) -> Decision:
    """An on-demand refresh applies everything; the prediction says whether it should meet the deadline."""
    inputs = planner_inputs(history, pending, options, calibrated, small_delta_rows)
    return refresh_decision(pending, inputs.costs, deadline_seconds, inputs.headroom_seconds)


def _prior(table: str, options: Mapping[str, object], calibrated: Mapping[str, CostFunction]) -> CostFunction:
    declared = options.get("cost_prior", {}) or {}
    if table in declared:
        entry = declared[table]  # type: ignore[index]
        return LinearCost(float(entry.get("per_row", 0.0)), float(entry.get("fixed", 0.0)))
    return calibrated.get(table, DEFAULT_PRIOR)


def _runs_before_fit(prior: CostFunction) -> int:
    """Measured runs of a table that replace its prior: the first one replaces DEFAULT_PRIOR (a guess
    in code, which can overstate a cheap kind's cost many times over and so push auto into
    recomputing it in full), MIN_OBSERVATIONS a calibrated or declared one."""
    return 1 if prior is DEFAULT_PRIOR else MIN_OBSERVATIONS


@dataclass(frozen=True)
class Borrowed:
    """The cost of a table a view has not applied yet, once it has applied others: at each batch size
    the dearest of their fitted costs. DEFAULT_PRIOR would guess 2 s and more, which pushed auto into
    recomputing cheap views in full (the TPC-DI pipeline's g_flows: 0.31 s measured on dim_trade's
    changes, 3.40 s predicted once fact_cash_balances' came too, recomputed at 1.8 s); the view's own
    tables are a better guess, though still one until the table's first run."""

    measured: tuple[CostFunction, ...]
    linear: bool = False  # the upper envelope of lines: monotone, not affine

    def __call__(self, k: float) -> float:
        return max(cost(k) for cost in self.measured) if k > 0 else 0.0


def _borrowed(history: Sequence[LogRow], small_delta_rows: int) -> Borrowed | None:
    """``Borrowed`` from the tables the view's runs have applied (each fitted as a first one would be), or None."""
    tables = sorted({t for r in history for t in r.delta_rows if _observations(history, t)})
    measured = tuple(fit_cost_model(_observations(history, t), DEFAULT_PRIOR, 1, threshold=small_delta_rows) for t in tables)
    return Borrowed(measured) if measured else None


def _observations(history: Sequence[LogRow], table: str) -> list[tuple[float, float]]:
    """(rows, seconds) of the last WINDOW runs that applied ``table``."""
    points = [(float(r.delta_rows[table]), float(r.table_seconds[table])) for r in history
              if table in r.table_seconds and r.delta_rows.get(table, 0) > 0]
    return points[-WINDOW:]


def _expected_arrivals(history: Sequence[LogRow], table: str, pending_now: int) -> float:
    """A high quantile of the change rows that arrived between consecutive runs (d̂).

    A refresh must also apply what arrives before the next tick
    (docs/design/planner.md#from-the-model-to-a-pipeline). A run's log row records what it left
    pending at its pins; the next run saw that plus the new arrivals, which it applied (delta_rows,
    netted: a lower bound) or left pending.
    """
    arrivals = []
    for before, after in zip(history, history[1:]):
        if table not in before.pending_rows or table not in after.pending_rows:
            continue
        seen = after.pending_rows[table] + (after.delta_rows.get(table, 0) if table in after.applied else 0)
        arrivals.append(max(0, seen - before.pending_rows[table]))
    if history and table in history[-1].pending_rows:
        arrivals.append(max(0, pending_now - history[-1].pending_rows[table]))
    if not arrivals:
        return 0.0
    return float(np.quantile(arrivals[-WINDOW:], QUANTILE))


def run_seconds(history: Sequence[LogRow], calibrated: LinearCost | None = None) -> float:
    """A high quantile of the shared seconds of the runs that applied something: each one's total
    minus the seconds of its tables (writing state and result is shared by the run's tables);
    before any such run, the calibrated value."""
    from lakeivm.planning.auto import FLUSH

    shared = [max(0.0, r.seconds - sum(s for t, s in r.table_seconds.items() if t != FLUSH)) for r in history
              if r.mode in ("tick", "refresh") and r.applied]
    if not shared:
        return calibrated.b if calibrated else 0.0
    return float(np.quantile(shared[-WINDOW:], QUANTILE))


def joint_excess(history: Sequence[LogRow], costs: Mapping[str, CostFunction], shared: float,
                 calibrated: LinearCost | None = None) -> float:
    """The median (0 at least) of what the runs that applied several tables took beyond the current
    models: their seconds less ``shared`` and each applied table's f(rows); before any such run, the
    calibrated value (``lakeivm calibrate`` ends with runs applying every table at once).

    Each table's model is fitted to its own seconds, mostly from runs that applied it alone (LGM
    applies tables apart; a table that rebuilds may never have run alone since calibration), while
    a refresh applies them together and pays for it: a rebuild costs more beside another table's
    changes than calibrated alone, and such refreshes take longer than the per-table models add up
    to. The deadline constraint is a refresh's, so the joint runs' excess is charged to every
    prediction of one (``headroom_seconds``). The median, not a high quantile: a bias to correct,
    not a margin (the spec's ``headroom`` is that); a slow warm-up run (the first refresh after a
    build) must not make every later prediction a worst case. A run that also probed a recompute
    for auto (``planning.auto.PROBES``) counts without the probe's seconds: they are not maintenance."""
    from lakeivm.planning.auto import probe_seconds

    excess = [r.seconds - probe_seconds(r) - shared - sum(costs[t](r.delta_rows[t]) for t in r.applied if r.delta_rows.get(t, 0) > 0)
              for r in history
              if r.mode in ("tick", "refresh") and sum(r.delta_rows.get(t, 0) > 0 for t in r.applied) > 1
              and all(t in costs for t in r.applied)]
    if not excess:
        return calibrated.b if calibrated else 0.0
    return max(0.0, float(np.median(excess[-WINDOW:])))


def _epoch(history: Sequence[LogRow]) -> list[LogRow]:
    """The ticks since the last refresh, bootstrap or rebuild (the ONLINE epoch, paper §4.3)."""
    ticks: list[LogRow] = []
    for row in reversed(history):
        if row.mode != "tick":
            break
        ticks.append(row)
    return ticks
