"""The engine's planner inputs come from the maintenance log: fitted costs, arrivals, headroom, epoch."""
from __future__ import annotations

import pytest

from lakeivm.store.commit import LogRow
from lakeivm.errors import SpecError
from lakeivm.planning.costs import LinearCost
from lakeivm.planning.tick import DEFAULT_PRIOR, JOINT_COST, RUN_COST, plan_refresh, plan_tick, planner_inputs


def run(seq, mode="tick", rows=None, seconds=None, pending=None, total=None) -> LogRow:
    rows, seconds = rows or {}, seconds or {}
    return LogRow(view="v", seq=seq, status="committed", mode=mode, kind="first_order", pins={}, watermarks={},
                  state_versions={}, consistent=False, applied=tuple(rows), delta_rows=rows, table_seconds=seconds,
                  pending_rows=pending or {"r": 0, "s": 0}, seconds=total if total is not None else sum(seconds.values()) + 1.0)


def test_costs_are_fitted_from_the_log_with_the_prior_until_the_first_run():
    history = [run(1, "bootstrap")]
    assert planner_inputs(history, {"r": 5}, {}).costs["r"].predict(10) == DEFAULT_PRIOR(10)
    history += [run(i, rows={"r": k}, seconds={"r": 2.0 + 0.01 * k}) for i, k in enumerate([10, 100, 1000, 50], 2)]
    model = planner_inputs(history, {"r": 5}, {}).costs["r"].small  # the large read path: not measured, the prior
    assert model.fitted and model.a == pytest.approx(0.01) and model.b == pytest.approx(2.0)
    declared = {"cost_prior": {"r": {"per_row": 1.0, "fixed": 0.5}}, "fit_costs": False}
    assert planner_inputs(history, {"r": 5}, declared).costs["r"].predict(10) == pytest.approx(10.5)
    assert planner_inputs([], {"r": 5}, {}, {"r": LinearCost(0.5, 0.0)}).costs["r"].predict(4) == 2.0


def test_the_first_measured_run_replaces_the_default_prior_a_calibrated_one_stays_until_three():
    """DEFAULT_PRIOR is a guess (2.1 s for 1,000 rows): one measured run says more. A calibrated or
    declared prior is itself measured: it gives way to MIN_OBSERVATIONS runs."""
    history = [run(1, "bootstrap"), run(2, rows={"r": 1000}, seconds={"r": 0.15})]
    model = planner_inputs(history, {"r": 1000}, {}).costs["r"]
    assert model.small.fitted and model(1000) == pytest.approx(0.15)  # one batch size: the prior's slope, b fitted
    assert model(3000) == pytest.approx(0.35)  # the small read path's line ...
    assert model(300_000) == pytest.approx(DEFAULT_PRIOR(300_000))  # ... the large path (Spark's) the prior until measured
    calibrated = {"r": LinearCost(1e-3, 0.5)}
    assert planner_inputs(history, {"r": 1000}, {}, calibrated).costs["r"].predict(1000) == pytest.approx(1.5)
    declared = {"cost_prior": {"r": {"per_row": 0.001, "fixed": 0.5}}}
    assert planner_inputs(history, {"r": 1000}, declared).costs["r"].predict(1000) == pytest.approx(1.5)


def test_a_table_not_applied_yet_costs_what_the_views_other_tables_cost():
    """Until a table's first run, a view that has applied others predicts it at their dearest cost for
    its batch size, not DEFAULT_PRIOR's 2 s: 0.6 s measured on one table must not become 3 s with a
    second (auto would recompute in full). A declared prior stays the table's own."""
    history = [run(1, "bootstrap"), run(2, rows={"r": 1000}, seconds={"r": 0.6}), run(3, rows={"s": 10}, seconds={"s": 0.2})]
    inputs = planner_inputs(history, {"r": 1000, "s": 10, "u": 1000}, {})
    assert inputs.costs["u"](1000) == pytest.approx(0.6) and inputs.costs["u"](10) == pytest.approx(max(0.6 - 990e-4, 0.2))
    assert inputs.costs["u"](0) == 0.0 and inputs.costs["u"](500_000) == pytest.approx(DEFAULT_PRIOR(500_000))  # Spark's path: unmeasured
    assert planner_inputs(history[:1], {"u": 1000}, {}).costs["u"](1000) == DEFAULT_PRIOR(1000)  # nothing measured yet
    declared = {"cost_prior": {"u": {"per_row": 0.01, "fixed": 1.0}}}
    assert planner_inputs(history, {"u": 1000}, declared).costs["u"](1000) == pytest.approx(11.0)
    assert plan_refresh(history, {"r": 1000, "u": 1000}, 60, {}).predicted_seconds == pytest.approx(0.6 + 0.6 + 1.0)  # + shared 1 s


def test_arrivals_headroom_and_epoch_come_from_consecutive_runs():
    history = [
        run(1, "refresh", pending={"r": 0, "s": 0}, total=3.0),
        run(2, rows={"s": 4}, seconds={"s": 1.0}, pending={"r": 6, "s": 0}, total=4.0),   # r: 6 arrived, s: 4
        run(3, rows={"r": 12}, seconds={"r": 2.0}, pending={"r": 0, "s": 8}, total=2.5),  # r: 6 more, s: 8
    ]
    inputs = planner_inputs(history, {"r": 7, "s": 8}, {"headroom": 1.5})
    assert inputs.expected_arrivals["r"] == pytest.approx(6.8)  # 90% quantile of [6, 6, 7]
    assert inputs.expected_arrivals["s"] == pytest.approx(7.2)  # of [4, 8, 0]
    # shared seconds of the runs that applied something: 3 and 0.5 (the first refresh applied nothing)
    assert inputs.run_seconds == pytest.approx(2.75)  # their 90% quantile
    assert inputs.headroom_seconds == pytest.approx(2.75 + 1.5)  # + the declared margin
    assert inputs.spent_seconds == pytest.approx(6.5) and inputs.ticks_since_refresh == 2


def test_what_joint_runs_took_beyond_the_models_is_headroom_for_a_refresh():
    """s's model says 2 s (calibrated alone); beside r's changes it took 2.8-3.2 s (TPC-H SF 1: a
    supplier rebuild beside partsupp's changes). A refresh applies both: its prediction charges that."""
    declared = {"cost_prior": {"r": {"per_row": 0.01, "fixed": 0.5}, "s": {"per_row": 0.0, "fixed": 2.0}}, "fit_costs": False}
    alone = [run(i, rows={"r": 100}, seconds={"r": 1.5}, total=2.0) for i in range(1, 4)]  # shared 0.5, r as modelled
    assert planner_inputs(alone, {"r": 1, "s": 1}, declared).joint_excess_seconds == 0.0
    calibrated = {JOINT_COST: LinearCost(0.0, 0.7)}  # lakeivm calibrate's joint runs: used until the log has some
    assert planner_inputs(alone, {"r": 1, "s": 1}, declared, calibrated).joint_excess_seconds == pytest.approx(0.7)
    joint = [run(i, "refresh", rows={"r": 100, "s": 3}, seconds={"r": 1.5, "s": s}, total=1.5 + s + 0.5)
             for i, s in ((4, 2.8), (5, 3.2), (6, 3.0))]
    inputs = planner_inputs([*alone, *joint], {"r": 100, "s": 3}, declared, calibrated)
    assert inputs.run_seconds == pytest.approx(0.5)
    assert inputs.joint_excess_seconds == pytest.approx(1.0)  # the median of 0.8, 1.2, 1.0
    assert inputs.headroom_seconds == pytest.approx(0.5 + 1.0)
    refresh = plan_refresh([*alone, *joint], {"r": 100, "s": 3}, 10.0, declared)
    assert refresh.predicted_seconds == pytest.approx(1.5 + 2.0 + 0.5 + 1.0)  # what the joint runs took (4.8-5.2 s)
    faster = [run(i, "refresh", rows={"r": 100, "s": 3}, seconds={"r": 1.0, "s": 1.0}, total=2.5) for i in (7, 8, 9)]
    assert planner_inputs(faster, {"r": 1, "s": 1}, declared).joint_excess_seconds == 0.0  # never below the models


def test_a_probed_recompute_is_not_counted_as_a_joint_runs_excess():
    """auto's probe times the view's SQL inside an incremental run (its seconds in table_seconds under
    PROBE). Counted as maintenance, TPC-H Q5's 4.8 s probe made a 2.4 s joint excess, its incremental
    prediction 6.35 s against runs of 3 s, and auto recomputed it in full at twice the cost."""
    from lakeivm.planning.auto import PROBE

    declared = {"cost_prior": {"r": {"per_row": 0.01, "fixed": 0.5}, "s": {"per_row": 0.0, "fixed": 2.0}}, "fit_costs": False}
    joint = [run(i, "refresh", rows={"r": 100, "s": 3}, seconds={"r": 1.5, "s": 2.0, **probe}, total=1.5 + 2.0 + 0.5 + sum(probe.values()))
             for i, probe in ((1, {}), (2, {PROBE: 4.8}))]  # as auto's second run probes
    inputs = planner_inputs(joint, {"r": 100, "s": 3}, declared)
    assert inputs.run_seconds == pytest.approx(0.5) and inputs.joint_excess_seconds == pytest.approx(0.0, abs=1e-9)
    assert plan_refresh(joint, {"r": 100, "s": 3}, 10.0, declared).predicted_seconds == pytest.approx(1.5 + 2.0 + 0.5)


def test_policies_lgm_batches_the_fixed_cost_table_naive_flushes_everything():
    history = [run(1, "refresh", pending={"r": 8, "s": 20})]  # arrivals since: r 2, s 5
    options = {"cost_prior": {"r": {"per_row": 0.001, "fixed": 30.0}, "s": {"per_row": 1.0, "fixed": 0.0}}, "fit_costs": False}
    pending = {"r": 10, "s": 25}  # 30 + 25 + headroom > 50: the constraint would break
    lgm = plan_tick(history, pending, 50.0, options)
    assert lgm.apply == {"s"} and lgm.predicted_refresh_seconds_after <= 50.0
    naive = plan_tick(history, pending, 50.0, {**options, "planner": "naive"})
    assert naive.apply == {"r", "s"} and "naive" in naive.reason
    quiet = plan_tick(history, {"r": 1, "s": 1}, 50.0, {**options, "planner": "naive"})
    assert quiet.apply == frozenset()
    assert plan_tick(history, {"r": 1, "s": 0}, 50.0, {**options, "planner": "eager"}).apply == {"r"}
    old = plan_tick(history, {"r": 1, "s": 1}, 50.0, options, max_age_exceeded=frozenset({"r"}))
    assert old.apply == {"r"} and "max pending age" in old.reason
    with pytest.raises(SpecError, match="planner"):
        plan_tick(history, pending, 50.0, {"planner": "fastest"})


def test_refresh_prediction_includes_headroom_and_judges_the_deadline():
    history = [run(1, "refresh", rows={"r": 3}, seconds={"r": 1.0}, total=6.0)]
    options = {"cost_prior": {"r": {"per_row": 0.1, "fixed": 1.0}}, "fit_costs": False}
    ok = plan_refresh(history, {"r": 10}, 10.0, options)
    assert ok.predicted_seconds == pytest.approx(2.0 + 5.0) and "within" in ok.reason  # + the run's shared seconds
    calibrated = {RUN_COST: LinearCost(0.0, 4.0)}  # before any applying run: the calibrated shared seconds
    assert plan_refresh([], {"r": 10}, 10.0, options, calibrated).predicted_seconds == pytest.approx(2.0 + 4.0)
    assert "MISSES" in plan_refresh(history, {"r": 100}, 10.0, options).reason


def test_a_runs_shared_seconds_make_the_symmetric_flush_compete():
    """Two tables whose marginal costs are small next to what every applying run pays once (writing
    state and result): applying one table now and the other in a run of its own soon after costs
    that shared part twice, so ONLINE's score prefers the joint run; without it, the minimal set."""
    options = {"cost_prior": {"r": {"per_row": 0.01, "fixed": 1.0}, "s": {"per_row": 0.01, "fixed": 1.0}},
               "fit_costs": False}
    quiet = run(1, "refresh", pending={"r": 0, "s": 0})
    arrivals = [run(2, pending={"r": 100, "s": 100}, total=0.2)]  # 100 changes per tick on each table
    pending = {"r": 200, "s": 200}  # 2 + 2 + 2 + 2 s of refresh after the next arrivals > 7.5 s
    minimal = plan_tick([quiet, *arrivals], pending, 7.5, options)
    assert len(minimal.apply) == 1 and "minimal set" in minimal.reason
    applying = run(3, "refresh", rows={"r": 1}, seconds={"r": 1.0}, pending={"r": 100, "s": 100}, total=6.0)
    shared = plan_tick([quiet, applying], pending, 7.5 + 5.0, options)  # the same budget above the shared 5 s
    assert shared.apply == {"r", "s"} and "shared seconds" in shared.reason
