"""The full kind and refresh policies: any query over lake tables, recomputed on the pinned snapshots.

Registration (no Spark): which policy gives which kind, and the construct named as the reason.
On Spark: outer joins, window functions, CTEs with DISTINCT and UNION ALL, each equal to its SQL
after random insert/update/delete streams; a crash mid-run; a view moved between an incremental kind
and full by editing its policy; auto's per-run choice between them (planning.auto) and its probe.
"""
from __future__ import annotations

import random

import pytest

from lakeivm.run.audit import audit
from lakeivm.run.engine import InjectedFailure, run_view
from lakeivm.errors import UnsupportedQuery
from lakeivm.fingerprint import fingerprint
from lakeivm.planning.auto import PROBE, Mode
from lakeivm.catalog.registry import choose, spec_from_dict
from tests.helpers import random_batch, sql

SCHEMAS = {"r": {"a": "int", "x": "int"}, "s": {"a": "int", "g": "int"}}


def spec(name: str, sql: str, **options) -> object:
    return spec_from_dict({"name": name, "deadline": 60, "sql": sql, **options}, source=f"{name}.yaml")


def test_auto_recomputes_what_is_not_incremental_and_names_the_construct():
    left = spec("outer_rows", "SELECT r.a, s.g FROM r FULL OUTER JOIN s ON r.a <=> s.a")
    choice = choose(left, SCHEMAS)
    assert (choice.kind, choice.mode) == ("full", "full")
    assert "FULL JOIN s: its ON has no equality" in choice.why_full and choice.query.tables == ("r", "s")
    assert choose(spec("sums", "SELECT a, SUM(x) AS sx FROM r GROUP BY a"), SCHEMAS).mode == "incremental"
    windowed = choose(spec("ranked", "SELECT a, RANK() OVER (ORDER BY x) AS rk FROM r"), SCHEMAS)
    assert windowed.kind == "full" and "RANK() OVER (ORDER BY x): recomputing a window over the whole table" in windowed.why_full


def test_incremental_policy_refuses_naming_the_construct_file_and_line():
    strict = spec("strict", "SELECT a,\n  SUM(x) AS sx\nFROM r GROUP BY a\nHAVING a > 1", refresh_policy="incremental")
    with pytest.raises(UnsupportedQuery, match=r"strict\.yaml: line 4: HAVING is not supported"):  # over no aggregate: a WHERE
        choose(strict, SCHEMAS)


def test_full_policy_recomputes_even_incremental_sql_and_refuses_kind_options():
    assert choose(spec("sums", "SELECT a, SUM(x) AS sx FROM r GROUP BY a", refresh_policy="full"), SCHEMAS).kind == "full"
    with pytest.raises(UnsupportedQuery, match="epsilon does not apply"):
        choose(spec("tri", "SELECT COUNT(*) AS n FROM r", refresh_policy="full", epsilon=0.5), SCHEMAS)


def test_a_view_that_asked_for_a_kind_is_not_recomputed_instead():
    with pytest.raises(UnsupportedQuery, match="FULL JOIN s: its ON has no equality"):
        choose(spec("asked", "SELECT r.a, COUNT(*) AS n FROM r FULL OUTER JOIN s ON r.a <=> s.a GROUP BY r.a", kind="first_order"), SCHEMAS)
    with pytest.raises(UnsupportedQuery, match="LEFT JOIN s is maintained by kind first_order"):  # a sample's options ask for join_sample
        choose(spec("sampled", "SELECT r.a, s.g FROM r LEFT JOIN s ON r.a = s.a", sample_size=5), SCHEMAS)


@pytest.mark.parametrize("sql, problem", [
    ("SELECT r.a, s.a FROM r JOIN s ON r.a = s.a", "result column 'a' is named twice"),
    ("SELECT a FROM t", "unknown table 't'"),
    ("SELECT a FROM r; DROP TABLE s", "several statements"),
    ("SELECT nope FROM r", "'nope' could not be resolved"),
    ("SELECT a, x FROM r LIMIT 3", "LIMIT without ORDER BY keeps arbitrary rows"),
])
def test_what_no_view_may_hold_is_refused_under_auto_too(sql, problem):
    with pytest.raises(UnsupportedQuery, match=problem):
        choose(spec("bad", sql), SCHEMAS)


def test_an_unnamed_result_column_is_named_by_its_position_as_the_incremental_kinds_name_it():
    recomputed = choose(spec("unnamed", "SELECT a, COUNT(*) FROM r GROUP BY a UNION ALL SELECT a, 0 AS n FROM r"), SCHEMAS)
    assert recomputed.kind == "full" and [o.name for o in recomputed.query.outputs] == ["a", "_col_1"]
    maintained = choose(spec("unnamed", "SELECT a, COUNT(*), SUM(x) + 1 FROM r GROUP BY a"), SCHEMAS)
    assert maintained.kind != "full" and [o.name for o in maintained.query.outputs] == ["a", "_col_1", "_col_2"]


def test_the_fingerprint_records_a_full_policy_only():
    sql = "SELECT a, SUM(x) AS sx FROM r GROUP BY a"
    assert fingerprint(spec("v", sql)) == fingerprint(spec("v", sql, refresh_policy="incremental"))
    assert fingerprint(spec("v", sql)) != fingerprint(spec("v", sql, refresh_policy="full"))


FULL_VIEWS = [
    spec("outer_rows", "SELECT COALESCE(r.a, s.a) AS a, r.x, COALESCE(s.g, -1) AS g FROM r FULL OUTER JOIN s ON r.a <=> s.a"),
    spec("ranked", "SELECT a, x, RANK() OVER (ORDER BY x) AS rk FROM r"),  # with a PARTITION BY: kind window
    spec("values_seen", "WITH gs AS (SELECT DISTINCT g FROM s) SELECT g AS v FROM gs UNION ALL SELECT DISTINCT x AS v FROM r"),
]


def test_full_views_equal_their_sql_after_random_streams(lake, spark):
    rng = random.Random(18)
    lake.create_table("r", spark.createDataFrame([(0, 1), (1, None), (2, 5), (2, 5), (2, 7)], "a int, x int"))
    lake.create_table("s", spark.createDataFrame([(0, 0), (1, 1), (3, None)], "a int, g int"))
    for view in FULL_VIEWS:
        assert run_view(lake, view).kind == "full"
    for _ in range(2):
        for table in ("r", "s"):
            random_batch(lake, rng, table, "a", "x" if table == "r" else "g")
        for view in FULL_VIEWS:
            row = run_view(lake, view)
            assert row.kind == "full" and ": recomputed in full: " in row.plan and row.consistent
            report = audit(lake, view)
            assert report.ok, str(report)
    assert run_view(lake, FULL_VIEWS[0]) is None  # nothing changed: no recomputation


def test_a_crash_mid_recomputation_then_a_rerun_equals_the_sql(lake, spark):
    lake.create_table("r", spark.createDataFrame([(0, 1), (2, 5)], "a int, x int"))
    lake.create_table("s", spark.createDataFrame([(0, 0)], "a int, g int"))
    view = FULL_VIEWS[0]
    run_view(lake, view)
    spark.sql(f"INSERT INTO delta.`{lake.table_path('s')}` VALUES (2, 9), (4, 4)")
    with pytest.raises(InjectedFailure):
        run_view(lake, view, fail_at="bootstrap:result")  # the result was overwritten, the log row not written
    row = run_view(lake, view)
    assert row.watermarks == {"r": 0, "s": 1}
    assert audit(lake, view).ok


def test_editing_the_policy_moves_the_view_between_kinds(lake, spark):
    lake.create_table("r", spark.createDataFrame([(0, 1), (0, 2), (2, 5)], "a int, x int"))
    sql = "SELECT a, SUM(x) AS sx FROM r GROUP BY a"
    assert run_view(lake, spec("sums", sql)).kind == "fivm"
    full = run_view(lake, spec("sums", sql, refresh_policy="full"))
    assert full.kind == "full" and full.mode == "rebuild" and "definition changed" in full.plan
    assert audit(lake, spec("sums", sql, refresh_policy="full")).ok
    spark.sql(f"INSERT INTO delta.`{lake.table_path('r')}` VALUES (0, 3), (7, 7)")
    back = run_view(lake, spec("sums", sql))
    assert back.kind == "fivm" and back.mode == "rebuild"
    assert audit(lake, spec("sums", sql)).ok


def test_auto_recomputes_a_run_in_full_when_its_log_predicts_that_cheaper_and_comes_back(lake, spark, monkeypatch):
    """Per run, auto compares the planner's incremental prediction with a recompute's (planning.auto).
    A cost prior of 100 s per change row (fit_costs off) makes incremental runs look expensive."""
    lake.create_table("r", spark.createDataFrame([(0, 1), (0, 2), (2, 5)], "a int, x int"))
    lake.create_table("s", spark.createDataFrame([(0, 10), (2, 20)], "a int, g int"))
    sql = "SELECT s.g, SUM(r.x) AS sx, COUNT(*) AS n FROM r JOIN s ON r.a = s.a GROUP BY s.g"
    dear = {"fit_costs": False, "cost_prior": {t: {"per_row": 100.0, "fixed": 0.0} for t in ("r", "s")}}
    view = spec("joined", sql, **dear)
    rng = random.Random(3)
    assert run_view(lake, view).kind == "fivm"  # the build
    insert = lambda: spark.sql(f"INSERT INTO delta.`{lake.table_path('r')}` VALUES ({rng.choice([0, 2, 4])}, {rng.randint(0, 9)})")  # noqa: E731
    insert()
    first = run_view(lake, view)
    assert first.kind == "fivm" and "no incremental run measured yet" in first.plan
    with monkeypatch.context() as forced:  # a probe: maintained incrementally, a recompute timed, not written
        forced.setattr("lakeivm.planning.auto.choose_mode", lambda history, kind, seconds, in_full: Mode(False, "probe (forced)", probe=True))
        insert()
        probed = run_view(lake, view)
    assert probed.kind == "fivm" and probed.table_seconds[PROBE] > 0 and audit(lake, view).ok
    for _ in range(2):  # 100 s predicted per row against the build's seconds: full, then full again
        insert()
        row = run_view(lake, view)
        assert row.kind == "full" and "auto: full, predicted" in row.plan and row.consistent, row.plan
        assert "a probe" in row.plan or "full recomputes" in row.plan  # learned, not the build's bound
        assert audit(lake, view).ok
        assert sorted(lake.spark.read.format("delta").load(lake.view_path("joined")).columns) == ["g", "n", "sx"]
    # Back to incremental: the decision itself is tested in tests/planning/test_auto.py; here, that the
    # engine rebuilds the state a full run left behind (recovery removed it) and maintains it again.
    monkeypatch.setattr("lakeivm.planning.auto.choose_mode", lambda history, kind, seconds, in_full: Mode(False, "auto: back (forced)"))
    insert()
    back = run_view(lake, view)
    assert back.kind == "fivm" and back.mode == "rebuild" and "auto: back (forced)" in back.plan, back.plan
    assert audit(lake, view).ok
    insert()
    again = run_view(lake, view)
    assert again.kind == "fivm" and again.mode == "refresh" and again.applied == ("r",)
    assert audit(lake, view).ok


UNNAMED = {  # unnamed result columns, each kind; and a view reading one by its name (issue 52, item 6)
    "nested": "SELECT COUNT(*) FROM bids b WHERE 0.5 * (SELECT SUM(b1.volume) FROM bids b1) > "
              "(SELECT SUM(b2.volume) FROM bids b2 WHERE b2.price > b.price)",
    "fivm": "SELECT a, COUNT(*), SUM(x) + 1 FROM r GROUP BY a",
    "first_order": "SELECT a, MIN(x), COUNT(*) FROM r GROUP BY a",
    "triangle": "SELECT COUNT(*) FROM r e1 JOIN r e2 ON e1.x = e2.a JOIN r e3 ON e2.x = e3.a AND e3.x = e1.a",
}


@pytest.mark.heavy(240)
@pytest.mark.parametrize("after_back", [0, pytest.param(1, marks=pytest.mark.slow)])
def test_auto_falls_back_to_full_and_back_for_every_kind_with_unnamed_columns(lake, spark, monkeypatch, after_back):
    """Unnamed columns are ``_col_<i>`` in every kind auto may switch (join_sample's options ask for it:
    never) and in a full recompute, so auto's switch writes names Delta takes (Spark's own name,
    ``count(1)``, it refuses), and a view over one reads the same column whichever way the upstream ran.
    (-m slow: one more incremental batch after the way back.)"""
    from lakeivm.catalog.registry import link_upstreams

    lake.create_table("r", spark.createDataFrame([(0, 1), (0, 2), (2, 5)], "a int, x int"))
    lake.create_table("bids", spark.createDataFrame([], "price decimal(10,2), volume decimal(10,2)"))
    sql(lake, "INSERT INTO {t} VALUES (1.00, 3.00), (2.00, 1.00), (3.00, 4.00)", "bids")
    specs, _ = link_upstreams({**{f"unnamed_{kind}": spec(f"unnamed_{kind}", query) for kind, query in UNNAMED.items()},
                               "over": spec("over", "SELECT SUM(_col_1) AS rows_, MAX(_col_2) AS top FROM unnamed_fivm")})
    views = list(specs.values())
    assert [run_view(lake, view).kind for view in views] == ["nested", "fivm", "first_order", "triangle", "first_order"]
    rng = random.Random(6)

    def change_and_audit(choice: Mode) -> list:
        monkeypatch.setattr("lakeivm.planning.auto.choose_mode", lambda history, kind, seconds, in_full: choice)
        random_batch(lake, rng, "r", "a", "x")
        sql(lake, f"INSERT INTO {{t}} VALUES ({rng.randint(0, 3)}, {rng.randint(0, 9)})", "r")  # each view has a change
        sql(lake, f"INSERT INTO {{t}} VALUES ({rng.randint(0, 5)}.00, {rng.randint(0, 5)}.00)", "bids")
        rows = [run_view(lake, view) for view in views]
        for view in views:
            assert audit(lake, view).ok, view.name
        return rows

    for row in change_and_audit(Mode(True, "auto: full (forced)")):
        assert row.kind == "full", (row.view, row.plan)
    stored = {view.name: lake.spark.read.format("delta").load(lake.view_path(view.name)).columns for view in views}
    assert stored == {"unnamed_nested": ["_col_0"], "unnamed_fivm": ["a", "_col_1", "_col_2"],
                      "unnamed_first_order": ["a", "_col_1", "_col_2"], "unnamed_triangle": ["_col_0"], "over": ["rows_", "top"]}
    back = change_and_audit(Mode(False, "auto: back (forced)"))
    assert [row.kind for row in back] == ["nested", "fivm", "first_order", "triangle", "first_order"]
    for _ in range(after_back):
        change_and_audit(Mode(False, "auto: incremental (forced)"))


def test_a_stopped_probe_is_logged_as_a_lower_bound_and_probed_again_not_switched_on(lake, spark, monkeypatch):
    """A probe stopped at its limit is logged under ``PROBE_STOPPED``; when the next run's prediction
    outgrows it, auto probes again (to its end here) instead of recomputing on the bound, and
    switches only on the complete probe. A cost prior of 100 s per change row makes every
    incremental prediction far larger than the bound."""
    from lakeivm.planning.auto import PROBE_STOPPED

    lake.create_table("r", spark.createDataFrame([(0, 1), (0, 2), (2, 5)], "a int, x int"))
    lake.create_table("s", spark.createDataFrame([(0, 10), (2, 20)], "a int, g int"))
    sql_ = "SELECT s.g, SUM(r.x) AS sx, COUNT(*) AS n FROM r JOIN s ON r.a = s.a GROUP BY s.g"
    view = spec("bounded", sql_, fit_costs=False, cost_prior={t: {"per_row": 100.0, "fixed": 0.0} for t in ("r", "s")})
    rng = random.Random(5)
    insert = lambda: spark.sql(f"INSERT INTO delta.`{lake.table_path('r')}` VALUES ({rng.choice([0, 2])}, {rng.randint(0, 9)})")  # noqa: E731
    run_view(lake, view)
    insert()
    run_view(lake, view)  # an incremental run measured
    with monkeypatch.context() as forced:  # a probe stopped at its limit (its seconds a lower bound)
        forced.setattr("lakeivm.planning.auto.choose_mode", lambda history, kind, seconds, in_full: Mode(False, "probe (forced)", probe=True))
        forced.setattr("lakeivm.run.engine._probe", lambda ctx, limit, progress, whole=None: (0.4, True))
        insert()
        stopped = run_view(lake, view)
    assert stopped.table_seconds[PROBE_STOPPED] == 0.4 and PROBE not in stopped.table_seconds
    insert()
    again = run_view(lake, view)  # 100 s predicted: the bound says nothing, so probed again, to its end
    assert again.kind == "fivm" and "probed again" in again.plan and PROBE in again.table_seconds, again.plan
    insert()
    switched = run_view(lake, view)
    assert switched.kind == "full" and "a probe: its SQL" in switched.plan, switched.plan
    assert audit(lake, view).ok


def test_a_probe_stops_at_its_limit_and_reports_a_lower_bound(lake, spark, capfd):
    """auto's probe of a recompute is interrupted once it costs more than the incremental prediction,
    and its killed tasks print nothing on the console (Spark logs their aborts at ERROR)."""
    from types import SimpleNamespace

    from lakeivm.run.engine import _probe, prepare
    from lakeivm.sources import changes

    lake.create_table("r", spark.range(1500).selectExpr("CAST(id AS INT) AS a", "CAST(id AS INT) AS x"))
    slow = spec("slow", "SELECT COUNT(*) AS n FROM r r1 JOIN r r2 ON r1.a < r2.a JOIN r r3 ON r2.a < r3.a")  # 5.6e8 triples
    ctx, _ = prepare(lake, slow)
    ctx.pins, ctx.lease = changes.pin(lake, ctx.query.tables), SimpleNamespace(run_id="probe-test")
    for limit in (0.01, 1.0):  # 0.01 s: the limit passes before the job starts (the cancel must reach it)
        said = []
        seconds, stopped = _probe(ctx, limit, said.append)
        assert limit <= seconds < 60 and stopped and "stopped probing" in said[0], (limit, said)
        assert spark.range(3).count() == 3  # the session works on after the interrupt
    printed = capfd.readouterr()
    assert "ERROR" not in printed.err + printed.out, printed.err[-2000:]


def test_a_delta_write_cancelled_at_its_limit_prints_nothing(lake, spark, capfd):
    """A probe cancelled while Spark writes its rows (a result too large for delta-rs) is no error
    to show: Delta's writer logs its aborted job at ERROR with a stack trace (log4j2.properties)."""
    from lakeivm.spark import cancelled, interrupted_after

    with pytest.raises(Exception) as raised:
        with interrupted_after(spark, 1.0, "lakeivm-test-cancelled-write"):
            spark.range(200_000_000).selectExpr("id", "id * 2 AS twice").write.format("delta").save(f"{lake.root}/_system/probe/w")
    assert cancelled(raised.value), raised.value
    printed = capfd.readouterr()
    assert "ERROR" not in printed.err + printed.out, printed.err[-2000:]


def test_a_probe_writes_the_rows_a_recompute_writes_and_leaves_nothing(lake, spark, monkeypatch):
    """A probe times the write of the view's rows too (a recompute pays it), to a scratch table it deletes."""
    import os
    from types import SimpleNamespace

    from lakeivm.run.engine import _probe, prepare
    from lakeivm.sources import changes
    from lakeivm.views import state

    lake.create_table("r", spark.range(50).selectExpr("CAST(id AS INT) AS a", "CAST(id % 7 AS INT) AS x"))
    ctx, _ = prepare(lake, spec("probed", "SELECT x, SUM(a) AS sa FROM r GROUP BY x"))
    ctx.pins, ctx.lease = changes.pin(lake, ctx.query.tables), SimpleNamespace(run_id="probe-test")
    written, overwrite = [], state.overwrite
    monkeypatch.setattr(state, "overwrite", lambda lake_, rows, path, **kw: written.append((path, overwrite(lake_, rows, path, **kw))))
    said = []
    seconds, stopped = _probe(ctx, 60.0, said.append)
    assert seconds > 0 and not stopped and "probed a full recompute" in said[0]
    [(path, rows)] = written
    assert path.startswith(f"{lake.root}/_system/probe/") and rows == 7 and not os.path.exists(path)


def test_a_probe_that_fails_on_its_own_raises_instead_of_reporting_a_lower_bound(lake, spark):
    """A probe that fails (a data file it cannot read) raises: an error the user must see, not a
    recompute slower than the incremental run -- also once past its limit, when it was interrupted
    but fails on its own (only a cancellation counts)."""
    import glob
    import os
    from types import SimpleNamespace

    from lakeivm.run.engine import _probe, prepare
    from lakeivm.sources import changes
    from lakeivm.spark import cancelled

    lake.create_table("r", spark.range(50).selectExpr("CAST(id AS INT) AS a", "CAST(id AS INT) AS x"))
    ctx, _ = prepare(lake, spec("damaged", "SELECT a, SUM(x) AS sx FROM r GROUP BY a"))
    ctx.pins, ctx.lease = changes.pin(lake, ctx.query.tables), SimpleNamespace(run_id="probe-test")
    for data in glob.glob(f"{lake.table_path('r')}/*.parquet"):
        os.remove(data)
    for limit in (60.0, 0.01):  # 0.01 s: interrupted, then failed on its own or cancelled (a race)
        said = []
        try:
            _probe(ctx, limit, said.append)
        except Exception as err:  # noqa: BLE001
            assert "FILE" in str(err) and not cancelled(err), err  # FAILED_READ_FILE / file not found
        else:
            assert limit < 1 and "stopped probing" in said[0], said  # the cancel came first


TYPED = {  # decimal sums and averages, each kind auto may switch: the SQL's types whichever way a run went
    "first_order": "SELECT k, SUM(q * p) AS v, MIN(p) AS lo, AVG(p) AS mean, COUNT(*) AS n FROM d GROUP BY k",
    "fivm": "SELECT k, SUM(q * p) AS v, COUNT(*) AS n FROM d GROUP BY k",
    "window": "SELECT k, q, SUM(p) OVER (PARTITION BY k ORDER BY q, p ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS run FROM d",
    "nested": "SELECT SUM(b.p * b.q) AS vwap FROM d b WHERE 0.5 * (SELECT SUM(b1.p) FROM d b1) > "
              "(SELECT SUM(b2.p) FROM d b2 WHERE b2.q > b.q)",
}


@pytest.mark.heavy(120)
def test_a_views_stored_types_are_its_sqls_whichever_way_auto_runs_it(lake, spark, monkeypatch):
    """A view's result has the column types Spark gives its SQL, built, maintained or recomputed:
    a sum kept wider (DECIMAL(38, s)) and then recomputed changes the table users read, and makes
    every view reading it rebuild ("column changed between its runs")."""
    lake.create_table("d", spark.createDataFrame([(0, 1, 1.5), (0, 2, 2.25), (1, 3, 4.0)], "k int, q int, p double")
                      .selectExpr("k", "q", "CAST(p AS DECIMAL(8, 2)) AS p"))
    views = [spec(f"typed_{kind}", query) for kind, query in TYPED.items()]
    rng = random.Random(5)

    def types_of(view) -> dict:  # (nested stores a series: its version column besides the SQL's)
        stored = {f.name: f.dataType.simpleString() for f in spark.read.format("delta").load(lake.view_path(view.name)).schema.fields}
        return {name: stored.get(name) for name in wanted[view.name]}

    spark.read.format("delta").load(lake.table_path("d")).createOrReplaceTempView("d")
    wanted = {view.name: {f.name: f.dataType.simpleString() for f in spark.sql(view.sql).schema.fields} for view in views}
    spark.catalog.dropTempView("d")
    assert [run_view(lake, view).kind for view in views] == list(TYPED)
    for choice in (Mode(False, "incremental (forced)"), Mode(True, "auto: full (forced)"), Mode(False, "back (forced)")):
        monkeypatch.setattr("lakeivm.planning.auto.choose_mode", lambda history, kind, seconds, in_full: choice)
        q, k = rng.randint(0, 9), rng.randint(0, 2)
        sql(lake, f"INSERT INTO {{t}} VALUES ({k}, {q}, {q}.75), ({k}, {q + 1}, 0.05)", "d")
        for view in views:
            run_view(lake, view)
            assert types_of(view) == wanted[view.name], (view.name, choice.reason)
            assert audit(lake, view).ok, view.name
