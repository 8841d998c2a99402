"""The planner in the engine: ticks batch and apply asymmetrically, refreshes meet the deadline.

One table carries a large fixed cost per action (r: think a scan of a big relation), the other a
large cost per row (s: index lookups). The cost models are declared (``fit_costs: false``) so the
decisions are deterministic; arrivals and headroom are still measured from the log.
"""
from __future__ import annotations

import pytest

from lakeivm.store import commit
from lakeivm.run.audit import audit
from lakeivm.run.engine import run_view
from lakeivm.planning.tick import RUN_COST, run_seconds
from lakeivm.catalog.registry import spec_from_dict
from tests.helpers import sql

VIEW = spec_from_dict({
    "name": "planned",
    "sql": "SELECT g, SUM(x) AS sx, COUNT(*) AS c FROM r JOIN s ON r.a = s.a GROUP BY g",
    "deadline": 60,
    "kind": "first_order",
    "cost_prior": {"r": {"per_row": 0.001, "fixed": 30.0}, "s": {"per_row": 1.0, "fixed": 0.0}},
    "fit_costs": False,
})


def test_ticks_apply_asymmetrically_and_refreshes_meet_the_deadline(lake, spark):
    lake.create_table("r", spark.createDataFrame([(a, a * 10) for a in range(5)], "a int, x int"))
    lake.create_table("s", spark.createDataFrame([(a, a % 2) for a in range(5)], "a int, g int"))
    run_view(lake, VIEW)
    applied = []
    for tick in range(6):
        sql(lake, "INSERT INTO {t} VALUES " + ", ".join(f"({tick % 5}, {tick + i})" for i in range(2)), "r")
        sql(lake, "INSERT INTO {t} VALUES " + ", ".join(f"({(tick + i) % 7}, {i % 2})" for i in range(5)), "s")
        row = run_view(lake, VIEW, mode="tick")
        applied.append(set(row.applied))
        refresh_after = float(row.plan.split("predicted refresh afterwards ")[1].split(" s")[0])
        assert refresh_after <= VIEW.deadline_s, row.plan  # the LGM invariant, with arrivals and headroom
        assert audit(lake, VIEW).ok  # mixed versions: still the SQL at the watermarks
    assert {"s"} in applied and {"r", "s"} not in applied, applied  # s applied alone, r batched throughout
    assert set() in applied  # and some ticks only batch
    applied_row = next(r for r in commit.log_rows(lake, "planned") if r.applied == ("s",))
    before = [r for r in commit.log_rows(lake, "planned") if r.seq < applied_row.seq]  # s's declared cost + a run's shared seconds
    assert applied_row.predicted_seconds == pytest.approx(1.0 * applied_row.delta_rows["s"] + run_seconds(before))
    refresh = run_view(lake, VIEW, mode="refresh")
    assert refresh.deadline_met and refresh.consistent and refresh.seconds <= VIEW.deadline_s
    assert "within the deadline" in refresh.plan
    assert audit(lake, VIEW).ok


def test_naive_policy_flushes_symmetrically(lake, spark):
    lake.create_table("r", spark.createDataFrame([(0, 1)], "a int, x int"))
    lake.create_table("s", spark.createDataFrame([(0, 0)], "a int, g int"))
    naive = spec_from_dict({**{k: v for k, v in VIEW.options.items()}, "name": "naive", "sql": VIEW.sql,
                            "deadline": 40, "kind": "first_order", "planner": "naive"})
    run_view(lake, naive)
    sql(lake, "INSERT INTO {t} VALUES " + ", ".join(f"({i % 3}, {i})" for i in range(4)), "r")
    sql(lake, "INSERT INTO {t} VALUES " + ", ".join(f"({i % 3}, {i % 2})" for i in range(12)), "s")
    row = run_view(lake, naive, mode="tick")  # 30 + 12 > 40: full, NAIVE applies both
    assert set(row.applied) == {"r", "s"} and "naive" in row.plan
    assert audit(lake, naive).ok


def test_calibrate_times_a_scratch_copy_and_stores_the_model(lake, spark):
    from lakeivm.run.calibrate import JOINT_STEPS, calibrate
    from lakeivm.planning.tick import JOINT_COST

    lake.create_table("r", spark.createDataFrame([(a, a) for a in range(6)], "a int, x int"))
    lake.create_table("s", spark.createDataFrame([(a, a % 2) for a in range(6)], "a int, g int"))
    run_view(lake, VIEW)
    heads = {t: lake.head_version(lake.table_path(t)) for t in ("r", "s")}
    models = calibrate(lake, VIEW, max_exponent=2, tables=["s"], progress=lambda m: None)
    assert set(models) == {"s", RUN_COST} and models["s"].samples == 3 and models["s"].a >= 0 and models["s"].b >= 0
    assert models["s"].above is None  # no batch reached Spark's read path: one line
    assert models[RUN_COST].a == 0 and models[RUN_COST].b > 0  # a run's shared seconds, besides the table's
    stored = commit.calibrated_costs(lake, "planned")
    assert stored["s"].b == pytest.approx(models["s"].b) and stored[RUN_COST].b == pytest.approx(models[RUN_COST].b)
    assert {t: lake.head_version(lake.table_path(t)) for t in ("r", "s")} == heads  # the view's data untouched
    assert audit(lake, VIEW).ok
    both = calibrate(lake, VIEW, max_exponent=1, progress=lambda m: None)  # ends with runs applying both tables at once
    assert set(both) == {"r", "s", RUN_COST, JOINT_COST} and both[JOINT_COST].samples == len(JOINT_STEPS)
    assert both[JOINT_COST].a == 0 and both[JOINT_COST].b >= 0
    assert commit.calibrated_costs(lake, "planned")[JOINT_COST].b == pytest.approx(both[JOINT_COST].b)


def test_a_calibration_per_read_path_is_stored_and_read_back(lake):
    from lakeivm.planning.costs import Calibration, LinearCost, TwoPathCost

    commit.record_costs(lake, "paths", {"r": Calibration(1e-6, 0.3, 15, 20_000, 5e-6, 1.3, 2), "s": Calibration(0.0, 2.3, 4)})
    stored = commit.calibrated_costs(lake, "paths")
    assert stored["r"] == TwoPathCost(LinearCost(1e-6, 0.3), LinearCost(5e-6, 1.3), 20_000) and stored["s"] == LinearCost(0.0, 2.3)


def test_max_pending_age_forces_a_batching_table_in(lake, spark):
    lake.create_table("r", spark.createDataFrame([(0, 1)], "a int, x int"))
    lake.create_table("s", spark.createDataFrame([(0, 0)], "a int, g int"))
    aged = spec_from_dict({"name": "aged", "sql": VIEW.sql, "deadline": 60, "kind": "first_order", "fit_costs": False,
                           "cost_prior": VIEW.options["cost_prior"], "max_pending_age": "1ms"})
    run_view(lake, aged)
    sql(lake, "INSERT INTO {t} VALUES (0, 5)", "r")
    row = run_view(lake, aged, mode="tick")  # the backlog fits the deadline, but r's commit is too old to wait
    assert row.applied == ("r",) and "max pending age exceeded for r" in row.plan
    assert audit(lake, aged).ok
