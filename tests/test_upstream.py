"""Views over views (``lakeivm.sources.upstream``): a view's FROM names another view; it reads the upstream's
committed results, at the upstream's log seqs, and equals its SQL over them."""
from __future__ import annotations

import random
from dataclasses import replace

import pytest

from lakeivm.store import commit
from lakeivm.run.audit import audit
from lakeivm.run.engine import run_view
from lakeivm.run.status import status
from lakeivm.errors import UnsupportedQuery
from lakeivm.limits import Limits
from lakeivm.catalog.registry import choose, link_upstreams, load_specs, spec_from_dict
from tests.helpers import claim_from_elsewhere, random_batch, sql


def spec(name: str, sql: str, **more) -> object:
    return spec_from_dict({"name": name, "deadline": 60, "sql": sql, **more})


def test_specs_are_linked_to_the_views_they_read_and_cycles_are_refused(tmp_path):
    for name, sql in {"a": "SELECT g, SUM(x) AS s FROM t GROUP BY g", "b": "SELECT COUNT(*) AS n FROM a",
                      "c": "SELECT SUM(n) AS n FROM b JOIN a ON TRUE", "d": "SELECT COUNT(*) AS n FROM e",
                      "e": "SELECT COUNT(*) AS n FROM d", "f": "SELECT COUNT(*) AS n FROM f"}.items():
        (tmp_path / f"{name}.yaml").write_text(f"name: {name}\ndeadline: 30s\nsql: {sql}\n")
    specs = load_specs(tmp_path)
    assert set(specs) == {"a", "b", "c"}
    assert set(specs["c"].upstreams) == {"a", "b"} and set(specs["c"].upstreams["b"].upstreams) == {"a"}
    assert specs["a"].upstreams == {}
    problems = {entry.names[0]: entry.problem for entry in specs.broken}
    assert set(problems) == {"d", "e", "f"}
    assert "cycle" in problems["d"] and "d -> e -> d" in problems["d"] or "e -> d -> e" in problems["d"], problems
    assert "f -> f" in problems["f"]
    linked, broken = link_upstreams({"b": spec("b", "SELECT COUNT(*) AS n FROM a")})
    assert linked["b"].upstreams == {} and not broken  # a name no spec declares is a table


@pytest.mark.heavy(89)
def test_a_chain_of_views_over_views_follows_random_streams(lake, spark):
    """totals (over r) <- by_label (totals JOIN s) <- best (MAX over by_label): on-demand refreshes
    refresh the upstreams first; an asymmetric tick; the upstream switched to refresh_policy full
    midway (a new definition: the view reading it rebuilds once, then reads differences again)."""
    rng = random.Random(11)
    lake.create_table("r", spark.createDataFrame([(0, 1), (1, 4), (2, 5), (2, None)], "g int, x int"))
    lake.create_table("s", spark.createDataFrame([(0, 1), (1, 1), (2, 2), (3, 3)], "g int, label int"))
    totals = spec("totals", "SELECT g, SUM(x) AS sx, COUNT(*) AS n FROM r GROUP BY g", refresh_policy="incremental")
    by_label = spec("by_label", "SELECT s.label, SUM(t.sx) AS total, SUM(t.n) AS rows_ FROM totals t JOIN s ON t.g = s.g "
                    "GROUP BY s.label", refresh_policy="incremental")
    best = spec("best", "SELECT MAX(total) AS top, COUNT(*) AS labels FROM by_label", refresh_policy="incremental")
    specs, broken = link_upstreams({"totals": totals, "by_label": by_label, "best": best})
    assert not broken
    views = [specs["totals"], specs["by_label"], specs["best"]]
    assert run_view(lake, views[2], mode="tick").mode == "bootstrap"  # a first tick: nothing upstream to read yet
    assert [r.mode for r in commit.log_rows(lake, "totals")] == ["bootstrap"]  # so built first, by the same call
    for round_ in range(2):
        for table, value in (("r", "x"), ("s", "label"), ("r", "x")):
            random_batch(lake, rng, table, "g", value)
        if round_ == 1:  # the upstream recomputed in full from now on: a rebuild between two of its runs
            specs, _ = link_upstreams({**specs, "totals": replace(totals, refresh_policy="full")})
            views = [specs["totals"], specs["by_label"], specs["best"]]
        row = run_view(lake, views[2])
        assert row is None or row.consistent and row.kind in ("first_order", "fivm"), row
        if round_ == 1:  # the difference of runs of two definitions is not read: by_label rebuilt from the new result
            assert "redefined" in commit.last_committed(lake, "by_label").plan
        for view in views:
            report = audit(lake, view)
            assert report.ok, str(report)
        middle = commit.last_committed(lake, "by_label")
        assert middle.watermarks["totals"] == commit.last_committed(lake, "totals").seq  # the upstream seq it read
    assert commit.last_committed(lake, "totals").kind == "full"
    random_batch(lake, rng, "s", "g", "label")
    random_batch(lake, rng, "r", "g", "x")
    run_view(lake, views[0])
    asym = run_view(lake, views[1], mode="tick", tables=["s"])  # only s: totals stays at the seq it had
    assert asym.applied == ("s",) and not asym.consistent
    assert audit(lake, views[1]).ok
    assert run_view(lake, views[1]).applied == ("totals",)
    assert audit(lake, views[1]).ok


def test_a_view_over_a_merged_result_reads_its_change_data_feed(lake, spark, monkeypatch):
    """Upstream results larger than ``limits.rewrite_rows`` (here 2) are MERGEd: a view over one reads the
    result's change data feed between the versions the two runs logged -- a projection's rows weighed
    by their counts, a HAVING's groups as they pass it, netted by DuckDB in this process -- and the
    difference of two results where the range holds a recovery's RESTORE (no change data). Both equal
    the SQL after random streams."""
    from lakeivm.sources import upstream

    monkeypatch.setattr(lake, "limits", Limits(rewrite_rows=2))
    fed, feed = [], upstream._from_change_feed  # (upstream, read from its feed) of every read of an upstream's changes
    monkeypatch.setattr(upstream, "_from_change_feed", lambda *args: fed.append((args[1].name, feed(*args))) or fed[-1][1])
    netted, seen_locally = [], upstream._seen_locally
    monkeypatch.setattr(upstream, "_seen_locally", lambda *args, **sides: netted.extend(sides) or seen_locally(*args, **sides))
    rng = random.Random(5)
    lake.create_table("r", spark.createDataFrame([(g % 4, 3 + g % 2) for g in range(12)], "g int, x int"))  # rows 3 times
    lake.create_table("s", spark.createDataFrame([(0, 1), (1, 1), (2, 2), (3, 3)], "g int, label int"))
    specs, _ = link_upstreams({
        "kept": spec("kept", "SELECT r.g, r.x, s.label FROM r JOIN s ON r.g = s.g WHERE r.x > 2", refresh_policy="incremental"),
        "busy": spec("busy", "SELECT g, SUM(x) AS sx FROM r GROUP BY g HAVING COUNT(*) > 2", refresh_policy="incremental"),
        "per_label": spec("per_label", "SELECT label, COUNT(*) AS n, SUM(x) AS sx FROM kept GROUP BY label",
                          refresh_policy="incremental"),
        "overall": spec("overall", "SELECT COUNT(*) AS groups, SUM(sx) AS total FROM busy", refresh_policy="incremental")})
    downstream, feeds = [specs["per_label"], specs["overall"]], []
    for view in downstream:
        run_view(lake, view)
    for round_ in range(3):
        for table, value in (("r", "x"), ("s", "label"), ("r", "x")):
            random_batch(lake, rng, table, "g", value)
        if round_ == 2:  # "kept" crashes after writing its result: its next run restores it first
            with pytest.raises(Exception, match="before_log"):
                run_view(lake, specs["kept"], fail_at="before_log")
        fed.clear()
        for view in downstream:
            run_view(lake, view)
            assert audit(lake, view).ok, str(audit(lake, view))
        read = {name: frame is not None for name, frame in fed}
        assert read["kept"] == (round_ < 2), (round_, read)
        feeds.append(read["busy"])  # "busy" is rewritten whole when it has at most 2 rows: then the difference
    sql(lake, "INSERT INTO {t} VALUES (7, 7)", "r")  # changes of r that net to nothing: a run of "kept" that keeps its result
    sql(lake, "DELETE FROM {t} WHERE g = 7", "r")
    kept = commit.last_committed(lake, "kept").state_versions["result"]
    ran = run_view(lake, specs["kept"])
    assert ran.applied == ("r",) and ran.state_versions["result"] == kept
    before = commit.last_committed(lake, "per_label").watermarks["kept"]
    fed.clear()
    run_view(lake, specs["per_label"])
    assert commit.last_committed(lake, "per_label").watermarks["kept"] == ran.seq > before
    assert [(name, frame.count()) for name, frame in fed] == [("kept", 0)]  # the feed of no versions: nothing, no difference read
    assert audit(lake, specs["per_label"]).ok
    assert any(feeds), feeds
    assert "netted" in netted  # a feed's changes taken as the reader sees them in this process
    assert {commit.last_committed(lake, name).kind for name in ("kept", "busy")} <= {"first_order", "fivm"}


def test_a_view_logs_its_own_seconds_not_its_upstreams(lake, spark):
    """An on-demand refresh runs the views it reads first; each run's logged seconds are its own (they
    feed its cost models, auto's choice and its deadline check), not the chain's."""
    import time

    from lakeivm.run.engine import run_view

    lake.create_table("r", spark.createDataFrame([(0, 1), (1, 2)], "g int, x int"))
    specs, _ = link_upstreams({"totals": spec("totals", "SELECT g, SUM(x) AS sx FROM r GROUP BY g"),
                               "top": spec("top", "SELECT MAX(sx) AS m FROM totals")})

    said = []

    def slow_upstream(line: str) -> None:  # each progress line of the upstream's run costs it 3 s
        said.append(line)
        if line.startswith("totals:"):
            time.sleep(3.0)

    run_view(lake, specs["top"], progress=slow_upstream)
    (up,), (down,) = commit.log_rows(lake, "totals"), commit.log_rows(lake, "top")
    assert up.seconds >= 3.0 and down.seconds < up.seconds, (up.seconds, down.seconds)
    chain = float(said[-1].split(": ")[-1].removesuffix(" s in all"))  # the chain's seconds, said last
    assert said[-1].startswith("top: with the 1 view(s) it reads refreshed first") and chain >= up.seconds + down.seconds


def test_a_view_two_views_read_is_refreshed_once_on_the_way(lake, spark):
    """A diamond (``top`` over ``low`` and ``high``, both over ``totals``): an on-demand refresh of
    ``top`` refreshes ``totals`` once, not once per view that reads it, and every view equals its SQL."""
    lake.create_table("r", spark.createDataFrame([(0, 1), (1, 2), (2, 5)], "g int, x int"))
    specs, _ = link_upstreams({"totals": spec("totals", "SELECT g, SUM(x) AS sx FROM r GROUP BY g"),
                               "low": spec("low", "SELECT COUNT(*) AS n FROM totals WHERE sx < 3"),
                               "high": spec("high", "SELECT COUNT(*) AS n FROM totals WHERE sx >= 3"),
                               "top": spec("top", "SELECT SUM(low.n + high.n) AS n FROM low, high")})
    for batch in ("INSERT INTO {t} VALUES (3, 4)", "UPDATE {t} SET x = x + 3 WHERE g = 0"):
        sql(lake, batch, "r")
        said = []
        run_view(lake, specs["top"], progress=said.append)
        assert sum(line.startswith("totals:") for line in said) == 1, said
        for name in specs:
            assert audit(lake, specs[name]).ok, name


def test_status_on_a_fresh_lake_says_which_views_wait_for_the_views_they_read(lake, spark):
    """Issue 52 item 7: before any run, a view over a view is not an error but waits for it."""
    from lakeivm.api import ViewStatus
    from lakeivm.run.status import status

    lake.create_table("r", spark.createDataFrame([(0, 1)], "g int, x int"))
    specs, _ = link_upstreams({"totals": spec("totals", "SELECT g, SUM(x) AS sx FROM r GROUP BY g"),
                               "top": spec("top", "SELECT MAX(sx) AS m FROM totals")})
    totals, top = (ViewStatus.of(entry) for entry in status(lake, specs))
    assert totals.error is None and totals.last_run is None and totals.kind
    assert top.error is None and top.waiting_for == ("totals",) and top.upstreams == ("totals",) and top.kind


def test_a_view_over_views_is_classified_before_its_upstreams_have_run(lake, spark):
    """Before any run, an upstream's columns are those its SQL declares (analysed by Spark, not run),
    through a chain: ``explain`` and registration checks need no refresh first."""
    from lakeivm.run.engine import schemas_for

    lake.create_table("r", spark.createDataFrame([(0, 1)], "g int, x int"))
    lake.create_table("s", spark.createDataFrame([(0, 1)], "g int, label string"))
    specs, _ = link_upstreams({
        "totals": spec("totals", "SELECT g, SUM(x) AS sx, AVG(x) AS mean FROM r GROUP BY g"),
        "by_label": spec("by_label", "SELECT s.label, SUM(t.sx) AS total FROM totals t JOIN s ON t.g = s.g GROUP BY s.label"),
        "best": spec("best", "SELECT MAX(total) AS top FROM by_label")})
    schemas = schemas_for(lake, specs["best"])
    assert schemas["by_label"] == {"label": "string", "total": "bigint"}
    assert schemas_for(lake, specs["by_label"])["totals"] == {"g": "int", "sx": "bigint", "mean": "double"}
    assert choose(specs["by_label"], schemas_for(lake, specs["by_label"])).kind in ("first_order", "fivm")
    assert not commit.log_rows(lake, "totals")
    declared = ("best_by_label", "by_label_totals", "by_label_s", "totals_r")  # the temp views it analysed over: dropped
    assert not any(spark.catalog.tableExists(f"lakeivm_declared_{name}") for name in declared)


def test_an_upstreams_columns_are_read_from_its_log_as_spark_reads_its_rows(lake, spark, monkeypatch):
    """Once an upstream has run, the columns a reader's SQL is checked against come from its stored
    table's Delta schema (delta-rs): the same as Spark's read of its rows, for each kind whose readers
    see its stored columns, with no Spark read; a top-k's from Spark's read of its rows."""
    from lakeivm.sources import upstream

    lake.create_table("r", spark.sql("SELECT id % 3 AS g, CAST(id AS DECIMAL(9, 2)) AS x, TIMESTAMP'2026-01-01' + "
                                     "make_interval(0, 0, 0, id) AS at, named_struct('a', id, 'b', 'x') AS s "
                                     "FROM range(6)"))
    specs, _ = link_upstreams({
        "grouped": spec("grouped", "SELECT g, AVG(x) AS mean, MAX(at) AS last FROM r GROUP BY g HAVING COUNT(*) > 1",
                        refresh_policy="incremental"),
        "distinct_rows": spec("distinct_rows", "SELECT DISTINCT g, s FROM r", refresh_policy="incremental"),
        "numbered": spec("numbered", "SELECT g, at, ROW_NUMBER() OVER (PARTITION BY g ORDER BY at) AS n FROM r",
                         refresh_policy="incremental"),
        "whole": spec("whole", "SELECT g, x, s FROM r", refresh_policy="full"),
        "top": spec("top", "SELECT g, SUM(x) AS total FROM r GROUP BY g ORDER BY total DESC LIMIT 2",
                    refresh_policy="incremental")})
    for one in specs.values():
        run_view(lake, one)
    derived, snapshot = [], upstream.snapshot
    monkeypatch.setattr(upstream, "snapshot", lambda lake_, one, seq: derived.append(one.name) or snapshot(lake_, one, seq))
    monkeypatch.setattr(lake, "limits", Limits(rewrite_rows=0))  # the stored rows read by Spark's Delta reader
    for name, one in specs.items():
        lake.cache.clear()
        seen = upstream.schema(lake, one)
        assert seen == dict(upstream._types(snapshot(lake, one, upstream.pin(lake, one)))), name
    assert derived == ["top"]


def test_a_fivm_view_over_a_view_types_its_exact_sums_from_the_upstreams_log(lake, spark, monkeypatch):
    """F-IVM keeps sums as doubles and casts a DECIMAL or integer SUM back to SQL's type: over a view,
    those types come from the upstream's stored schema (its log, ``upstream.types_at``), not from a
    Spark read of its rows each run; a DECIMAL AVG still rounds as SQL does."""
    from lakeivm.sources import upstream

    monkeypatch.setattr(lake, "limits", Limits(rewrite_rows=0))  # results MERGEd: the reader takes the upstream's feed
    rng = random.Random(3)
    lake.create_table("r", spark.sql("SELECT id % 3 AS g, CAST(id * 1.25 AS DECIMAL(9, 2)) AS x FROM range(9)"))
    specs, _ = link_upstreams({
        "kept": spec("kept", "SELECT g, x FROM r WHERE x > 1", refresh_policy="incremental"),
        "sums": spec("sums", "SELECT g, SUM(x) AS sx, AVG(x) AS ax, COUNT(*) AS n FROM kept GROUP BY g",
                     refresh_policy="incremental")})
    assert run_view(lake, specs["sums"]).kind == "fivm"
    read, snapshot = [], upstream.snapshot
    monkeypatch.setattr(upstream, "snapshot", lambda lake_, one, seq: read.append(one.name) or snapshot(lake_, one, seq))
    for _ in range(2):
        random_batch(lake, rng, "r", "g", "x")
        run_view(lake, specs["kept"])
        lake.cache.clear()
        read.clear()
        assert run_view(lake, specs["sums"]).mode == "refresh"
        assert read == [], read
        assert audit(lake, specs["sums"]).ok, str(audit(lake, specs["sums"]))


def test_a_view_over_views_outside_first_order_and_fivm_is_recomputed_under_auto():
    upstream = spec("edges_v", "SELECT src, dst FROM e")
    triangles = spec("tri", "SELECT COUNT(*) AS n FROM edges_v a JOIN edges_v b ON a.dst = b.src "
                     "JOIN edges_v c ON b.dst = c.src AND c.dst = a.src", kind="triangle")
    linked, _ = link_upstreams({"edges_v": upstream, "tri": triangles})
    schemas = {"edges_v": {"src": "int", "dst": "int"}}
    with pytest.raises(UnsupportedQuery, match="view over views"):
        choose(linked["tri"], schemas)
    auto = replace(linked["tri"], kind=None)
    assert choose(auto, schemas).kind in ("full",)


def test_the_dag_of_a_view_over_views_runs_on_its_tick_and_on_the_upstreams_assets(tmp_path):
    from lakeivm.config import Settings
    from lakeivm.infra.scheduling import build_dag

    linked, _ = link_upstreams({"a": spec("a", "SELECT g, SUM(x) AS s FROM t GROUP BY g", tick="2m"),
                                "b": spec("b", "SELECT COUNT(*) AS n FROM a", tick="5m")})
    settings = Settings(lake=str(tmp_path))
    dag = build_dag(linked["b"], settings, deadline_alert=False)
    schedule = dag.timetable
    assert type(schedule).__name__ == "AssetOrTimeSchedule" and schedule.timetable.delta.total_seconds() == 300
    assert [asset.uri for asset in schedule.asset_condition.objects] == [f"file://{tmp_path}/views/a/result"]
    assert build_dag(linked["a"], settings, deadline_alert=False).timetable.delta.total_seconds() == 120


def _chain(planner: str) -> list:
    """totals (over r) <- by_label (totals JOIN s), by_label's deadline of 35 s the chain's; declared
    costs (no fitting) make the plan independent of this machine's speed: r costs totals 1 s a row,
    totals' rows cost by_label 0.1 s each."""
    totals = spec("totals", "SELECT g, SUM(x) AS sx, COUNT(*) AS n FROM r GROUP BY g", refresh_policy="incremental",
                  cost_prior={"r": {"per_row": 1.0}}, fit_costs=False)
    by_label = spec("by_label", "SELECT s.label, SUM(t.sx) AS total FROM totals t JOIN s ON t.g = s.g GROUP BY s.label",
                    refresh_policy="incremental", deadline=35, chain_planner=planner,
                    cost_prior={"totals": {"per_row": 0.1}, "s": {"per_row": 0.1}}, fit_costs=False)
    specs, broken = link_upstreams({"totals": totals, "by_label": by_label})
    assert not broken
    return [specs["totals"], specs["by_label"]]


@pytest.mark.heavy(30)
@pytest.mark.parametrize("planner", ["joint", "alone"])
def test_a_tick_of_a_view_over_a_view_plans_its_chain_under_its_deadline(lake, spark, planner):
    """20 new rows of r (and 20 expected before the next tick): refreshing the chain would take ~46 s
    by the declared costs, over by_label's 35 s deadline. Planned jointly, by_label's tick makes totals
    apply r (after it, a refresh takes ~26 s) and leaves totals' result pending for itself; planned
    alone, totals (deadline 60 s) is not touched. Either way the views equal their SQL, and an
    on-demand refresh logs the chain's seconds and prediction on by_label's row."""
    lake.create_table("r", spark.createDataFrame([(g, g) for g in range(4)], "g int, x int"))
    lake.create_table("s", spark.createDataFrame([(g, g % 2) for g in range(4)], "g int, label int"))
    totals, by_label = _chain(planner)
    run_view(lake, by_label)
    sql(lake, "INSERT INTO {t} SELECT id % 4, id FROM range(20)", "r")
    seqs = len(commit.log_rows(lake, "totals"))
    tick = run_view(lake, by_label, mode="tick")
    ran = commit.log_rows(lake, "totals")[seqs:]
    if planner == "joint":
        assert [(r.mode, r.applied) for r in ran] == [("tick", ("r",))], ran
        assert "the chain of by_label" in ran[0].plan and ran[0].predicted_seconds >= 20.0
        assert tick.applied == () and "chain applies totals: r" in tick.plan and "minimal set {r->totals}" in tick.plan, tick.plan
        assert tick.chain_predicted_seconds == pytest.approx(ran[0].predicted_seconds) and tick.chain_seconds >= tick.seconds
        assert tick.pending_rows["totals"] > 0  # totals' new result: by_label's to apply later
    else:
        assert ran == [] and tick is None  # by_label's own inputs have nothing pending; totals plans alone
    for view in (totals, by_label):
        assert audit(lake, view).ok
    refreshed = run_view(lake, by_label)
    assert refreshed.applied == ("totals",) and refreshed.consistent
    assert refreshed.chain_seconds >= refreshed.seconds and refreshed.chain_deadline_met is True
    assert refreshed.chain_predicted_seconds > 0 if planner == "joint" else refreshed.chain_predicted_seconds > 20
    assert audit(lake, by_label).ok
    (shown,) = status(lake, {"by_label": by_label})  # the chain's record against by_label's deadline
    assert shown["chain_deadline_record"]["refreshes"] == shown["chain_deadline_record"]["met"] == 1
    assert shown["chain_predicted_refresh_s"] == 0.0  # nothing pending anywhere in the chain
    if planner == "joint":  # totals held by another run (its own DAG's tick): the chain's tick leaves it to that run
        sql(lake, "INSERT INTO {t} SELECT id % 4, id FROM range(40)", "r")
        claim_from_elsewhere(lake, "totals")
        seqs = len(commit.log_rows(lake, "totals"))
        assert run_view(lake, by_label, mode="tick") is None and len(commit.log_rows(lake, "totals")) == seqs
        commit.unlock(lake, "totals", force=True)


@pytest.mark.heavy(45)
def test_views_run_together_read_each_change_once(lake, spark, monkeypatch):
    """Views run together (``run_views``, ``lakeivm refresh --all``) and a refresh of a view over views
    read a table's change range once for all the views that read it, on the Spark path too
    (``changes.sharing``); each view equals its SQL. Run one by one, each view reads it again."""
    from lakeivm.run.engine import run_views
    from lakeivm.sources import changes

    monkeypatch.setattr(lake, "limits", Limits.everything_on_spark())
    reads, read = [], changes.TableSource._read_feed  # every Spark read of a change range of r
    monkeypatch.setattr(changes.TableSource, "_read_feed",
                        lambda self, *args: (reads.append(args[:2]) if self.path == lake.table_path("r") else None) or read(self, *args))
    rng = random.Random(11)
    lake.create_table("r", spark.createDataFrame([(g % 3, g) for g in range(9)], "g int, x int"))
    specs, _ = link_upstreams({
        "sums": spec("sums", "SELECT g, SUM(x) AS sx FROM r GROUP BY g", refresh_policy="incremental"),
        "counts": spec("counts", "SELECT g, COUNT(*) AS n FROM r GROUP BY g", refresh_policy="incremental"),
        "both": spec("both", "SELECT s.g, s.sx, c.n FROM sums s JOIN counts c ON s.g = c.g")})
    built = run_views(lake, [specs["both"]])  # the views it reads first, each once
    assert list(built) == ["sums", "counts", "both"] and all(row.mode == "bootstrap" for row in built.values()), built
    for round_ in range(2):
        sql(lake, f"INSERT INTO {{t}} VALUES ({round_}, {round_ * 10})", "r")
        random_batch(lake, rng, "r", "g", "x", keys=3)
        reads.clear()
        if round_ % 2:
            run_view(lake, specs["both"])  # an on-demand refresh of its chain
        else:
            run_views(lake, specs.values())
        assert len(reads) == 1, (round_, reads)  # sums and counts read the same range: once
        assert not lake.shared and "spark feeds" not in lake.cache  # kept only while they run
        for one in specs.values():
            assert audit(lake, one).ok, str(audit(lake, one))
    sql(lake, "INSERT INTO {t} VALUES (1, 1)", "r")
    reads.clear()
    for name in ("sums", "counts"):
        run_view(lake, specs[name])
    assert len(reads) == 2  # one by one: each reads it


def test_a_view_over_a_rewritten_result_reads_the_difference_netted_in_process(lake, spark, monkeypatch):
    """An upstream result written whole (a recompute, a small result's rewrite) has no change feed to
    read: delta-rs reads its stored rows at both runs and DuckDB nets them (``_from_stored_difference``),
    for a full view on the reader's columns and for a first_order result through its kind. Checked
    against Spark's difference of the two results over NULLs, NaN, -0.0, decimals, dates, timestamps and
    booleans, after random inserts, updates and deletes; the views reading them equal their SQL."""
    import math
    from collections import Counter

    from lakeivm.sources import upstream

    local, netted = [], upstream._from_stored_difference
    monkeypatch.setattr(upstream, "_from_stored_difference", lambda *args: local.append(args[1].name) or netted(*args))
    rng = random.Random(8)
    kinds = "k int, d decimal(12,2), s string, day date, ts timestamp, f double, b boolean"

    def row() -> str:
        f = rng.choice(["NULL", "CAST('NaN' AS DOUBLE)", "-0.0D", "0.0D", f"{rng.randint(-9, 9)}.5D"])
        return (f"({rng.randint(0, 5)}, {rng.choice(['NULL', f'{rng.randint(-99, 99)}.25'])}, {rng.choice(['NULL', repr(rng.choice('ab'))])}, "
                f"DATE'2026-01-0{rng.randint(1, 9)}', TIMESTAMP'2026-01-01 0{rng.randint(0, 9)}:30:00', {f}, {rng.choice(['true', 'false', 'NULL'])})")

    lake.create_table("t", spark.createDataFrame([], kinds))
    sql(lake, "INSERT INTO {t} VALUES " + ", ".join(row() for _ in range(12)), "t")
    specs, _ = link_upstreams({
        "whole": spec("whole", "SELECT k, d, s, day, ts, f, b FROM t WHERE k < 5", refresh_policy="full"),
        "grouped": spec("grouped", "SELECT k, s, SUM(d) AS sd, MIN(f) AS lo, COUNT(*) AS n FROM t GROUP BY k, s", refresh_policy="incremental"),
        "over_whole": spec("over_whole", "SELECT s, COUNT(*) AS n, SUM(d) AS sd, MAX(ts) AS last, MIN(day) AS first, MAX(f) AS hi, "
                                         "MIN(b) AS b FROM whole GROUP BY s", refresh_policy="incremental"),
        "over_grouped": spec("over_grouped", "SELECT k, SUM(sd) AS total, SUM(n) AS rows_ FROM grouped GROUP BY k", refresh_policy="incremental")})
    readers = [specs["over_whole"], specs["over_grouped"]]
    for view in readers:
        run_view(lake, view)

    def rows(frame) -> Counter:
        return Counter(tuple("NaN" if isinstance(v, float) and math.isnan(v) else v for v in r) for r in frame.collect())

    for round_ in range(4):
        sql(lake, "INSERT INTO {t} VALUES " + ", ".join(row() for _ in range(rng.randint(1, 4))), "t")
        sql(lake, f"DELETE FROM {{t}} WHERE k = {rng.randint(0, 5)}", "t")
        sql(lake, f"UPDATE {{t}} SET f = -0.0D, d = d + 1 WHERE k = {rng.randint(0, 5)}", "t")
        for up in ("whole", "grouped"):
            before = commit.last_committed(lake, up).seq
            run_view(lake, specs[up])
            after = commit.last_committed(lake, up).seq
            columns = ["s", "d", "ts", "day", "f", "b"] if up == "whole" else ["k", "sd", "n"]
            ours = netted(lake, specs[up], before, after, columns)
            assert ours is not None, (round_, up)
            with monkeypatch.context() as spark_only:
                spark_only.setattr(upstream, "READ_FEED", False)
                spark_only.setattr(upstream, "_from_stored_difference", lambda *args: None)
                theirs = upstream.read_delta(lake, specs[up], before, after, columns)
            assert rows(ours) == rows(theirs), (round_, up)
            assert [f.dataType for f in ours.schema.fields] == [f.dataType for f in theirs.schema.fields]
        local.clear()
        for view in readers:
            run_view(lake, view)
            assert audit(lake, view).ok, str(audit(lake, view))
        assert sorted(local) == ["grouped", "whole"], local


def test_a_view_over_an_upstream_auto_switches_reads_the_difference_in_process(lake, spark, monkeypatch):
    """auto switching an upstream between its kind and a full recompute leaves the other kind's stored
    rows beside the new ones (a first_order projection stores a row once with its count and keeps
    its HAVING's failing groups; a recompute stores the rows as read): the reader's change is still
    netted in this process (``_from_stored_difference``, each side taken as its run's kind has readers
    see it) and equals Spark's difference of the two results, for window, first_order and fivm
    upstreams forced to switch back and forth under random changes; the readers equal their SQL."""
    from collections import Counter

    from lakeivm.planning.auto import Mode
    from lakeivm.sources import upstream

    local, netted = [], upstream._from_stored_difference

    def recorded(*args):
        out = netted(*args)
        if out is not None:
            local.append(args[1].name)
        return out

    monkeypatch.setattr(upstream, "_from_stored_difference", recorded)
    full = {"now": False}
    monkeypatch.setattr("lakeivm.planning.auto.choose_mode", lambda *args: Mode(full["now"], "auto: forced"))
    rng = random.Random(13)
    lake.create_table("t", spark.createDataFrame([(k % 4, k % 3, k) for k in range(24)], "k int, g int, v int"))
    specs, _ = link_upstreams({
        "ranked": spec("ranked", "SELECT k, v, RANK() OVER (PARTITION BY k ORDER BY v) AS rn FROM t", refresh_policy="auto"),
        "pairs": spec("pairs", "SELECT k, g FROM t WHERE v > 2", refresh_policy="auto"),
        "busy": spec("busy", "SELECT k, COUNT(*) AS n, MAX(v) AS top FROM t GROUP BY k HAVING COUNT(*) > 5", refresh_policy="auto"),
        "sums": spec("sums", "SELECT g, SUM(v) AS sv, COUNT(*) AS n FROM t GROUP BY g", refresh_policy="auto"),
        "over": spec("over", "SELECT r.k, COUNT(*) AS n, SUM(r.rn) AS rn FROM ranked r JOIN pairs p ON r.k = p.k GROUP BY r.k",
                     refresh_policy="incremental"),
        "over_grouped": spec("over_grouped", "SELECT b.k, b.n, b.top, s.sv FROM busy b JOIN sums s ON b.k = s.g",
                             refresh_policy="incremental")})
    readers, ups = [specs["over"], specs["over_grouped"]], ["ranked", "pairs", "busy", "sums"]
    for view in readers:
        run_view(lake, view)
    built = {name: commit.last_committed(lake, name).kind for name in ups}
    assert built == {"ranked": "window", "pairs": "first_order", "busy": "first_order", "sums": "fivm"}, built
    columns = {"ranked": ["k", "rn"], "pairs": ["k", "g"], "busy": ["k", "n", "top"], "sums": ["g", "sv"]}
    for round_ in range(5):
        full["now"] = round_ % 2 == 0  # full, back to the kind (a rebuild), full, ...
        random_batch(lake, rng, "t", "k", "v", keys=5)
        for up in ups:
            before = commit.last_committed(lake, up).seq
            run_view(lake, specs[up])
            after = commit.last_committed(lake, up)
            assert (after.kind == "full") == full["now"], (round_, up, after.kind)
            ours = netted(lake, specs[up], before, after.seq, columns[up])
            assert ours is not None, (round_, up)
            with monkeypatch.context() as spark_only:
                spark_only.setattr(upstream, "READ_FEED", False)
                spark_only.setattr(upstream, "_from_stored_difference", lambda *args: None)
                theirs = upstream.read_delta(lake, specs[up], before, after.seq, columns[up])
            assert Counter(ours.collect()) == Counter(theirs.collect()), (round_, up)
        local.clear()
        for view in readers:
            run_view(lake, view)
            assert audit(lake, view).ok, str(audit(lake, view))
        assert set(local) == set(ups), (round_, local)
