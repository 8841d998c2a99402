"""Chains of CTEs split into views of their own (``lakeivm.sql.derived_views``, issue 52 item 1): an
aggregating or windowed CTE that reads earlier CTEs is split off as ``<view>__<cte>`` carrying the
CTEs it reads, and it, the view and every view over it equal their SQL after random batches. A query
Spark cannot analyse fails naming the view and its spec file, not with Spark's plan."""
from __future__ import annotations

import random
from pathlib import Path

import pytest

from lakeivm.run.audit import audit
from lakeivm.run.engine import run_view
from lakeivm.errors import UnsupportedQuery
from lakeivm.run.explain import explain
from lakeivm.catalog.registry import load_specs
from lakeivm.sql import derived_views
from tests.helpers import random_batch

BANDED = ("WITH s1 AS (SELECT k, v FROM t WHERE v > 0), s2 AS (SELECT k, MAX(v) AS mv FROM s1 GROUP BY k) "
          "SELECT k, mv, CASE WHEN mv > 5 THEN 'hi' ELSE 'lo' END AS band FROM s2")


def write(folder, name: str, sql: str) -> None:
    (folder / f"{name}.yaml").write_text(f"name: {name}\ndeadline: 60s\nsql: |\n  {sql}\n")


def test_a_split_cte_carries_the_ctes_it_reads_and_the_query_drops_those_it_no_longer_reads():
    name = lambda alias: f"v__{alias}"  # noqa: E731
    sql, views = derived_views(BANDED, name)
    assert sql == "SELECT k, mv, CASE WHEN mv > 5 THEN 'hi' ELSE 'lo' END AS band FROM v__s2 AS s2"
    assert views == {"v__s2": "WITH s1 AS (SELECT k, v FROM t WHERE v > 0) SELECT k, MAX(v) AS mv FROM s1 GROUP BY k"}
    chain = ("WITH a AS (SELECT k, v FROM t), b AS (SELECT k, v FROM a WHERE v > 1), c AS (SELECT k, SUM(v) AS s FROM b GROUP BY k), "
             "d AS (SELECT k, s, ROW_NUMBER() OVER (ORDER BY s) AS rn FROM c) SELECT d.k, d.s FROM d JOIN a ON a.k = d.k WHERE rn < 3")
    sql, views = derived_views(chain, name)
    assert sql == "WITH a AS (SELECT k, v FROM t) SELECT d.k, d.s FROM v__d AS d JOIN a ON a.k = d.k WHERE rn < 3"
    assert views == {"v__c": "WITH a AS (SELECT k, v FROM t), b AS (SELECT k, v FROM a WHERE v > 1) SELECT k, SUM(v) AS s FROM b GROUP BY k",
                     "v__d": "SELECT k, s, ROW_NUMBER() OVER (ORDER BY s) AS rn FROM v__c AS c"}  # a window splits off too


@pytest.mark.heavy(170)
def test_chained_ctes_and_the_views_over_them_follow_random_batches(lake, spark, tmp_path):
    rng = random.Random(52)
    lake.create_table("t", spark.createDataFrame([(0, 1), (1, 4), (2, 6), (2, None), (3, 7)], "k int, v int"))
    lake.create_table("u", spark.createDataFrame([(0, 2), (1, 3), (3, 9)], "k int, v int"))
    write(tmp_path, "banded", BANDED)
    write(tmp_path, "ranked", "WITH a AS (SELECT k, v FROM t), b AS (SELECT a.k, a.v, u.v AS w FROM a JOIN u ON a.k = u.k), "
                              "c AS (SELECT k, SUM(v) AS s, COUNT(w) AS n FROM b GROUP BY k), "
                              "d AS (SELECT k, s, n, ROW_NUMBER() OVER (ORDER BY s DESC, k) AS rn FROM c) "
                              "SELECT k, s, n FROM d WHERE rn <= 3")
    write(tmp_path, "per_band", "SELECT band, COUNT(*) AS n, SUM(mv) AS total FROM banded GROUP BY band")
    specs = load_specs(tmp_path)
    assert not specs.broken, [b.summary for b in specs.broken]
    assert {s.name for s in specs["banded"].split_off} == {"banded__s2"}
    assert {name: spec.derived_from for name, spec in specs.items() if spec.derived_from} == {
        "banded__s2": "banded", "ranked__c": "ranked", "ranked__d": "ranked"}
    every = list(specs.values())
    for spec in every:
        lines = explain(lake, spec)  # Spark analyses each split view's SQL: s1 is carried along
        assert f"{spec.name}: refresh policy auto:" in lines
    assert "incremental" in explain(lake, specs["banded"]).splitlines()[0]
    for round_ in range(1):  # CI budget: one batch of three commits (tests/views/window and test_upstream stream more)
        for table in ("t", "u", "t"):
            random_batch(lake, rng, table, "k", "v")
        for spec in (specs["per_band"], specs["ranked"]):
            run_view(lake, spec)  # refreshes the views it reads first
        for spec in every:
            report = audit(lake, spec)
            assert report.ok, f"round {round_}: {report}; missing {report.missing[:5]}, unexpected {report.unexpected[:5]}"


def test_a_query_spark_cannot_analyse_is_named_with_its_view_and_file(lake, spark, tmp_path):
    import lakeivm

    lake.create_table("t", spark.createDataFrame([(0, 1), (1, 4)], "k int, v int"))
    folder = tmp_path / "views"
    folder.mkdir()
    write(folder, "bad", "SELECT k, COUNT(*) AS n FROM t GROUP BY k HAVING v > 1")  # v is not grouped: Spark refuses it
    write(folder, "over", "SELECT SUM(n) AS total FROM bad")
    views = lakeivm.Views.open(spark, lake=lake.root, views=str(folder))
    for call in (views["over"].explain, views["over"].refresh, views["bad"].refresh):
        with pytest.raises(UnsupportedQuery) as err:
            call()
        message = str(err.value)
        assert message.startswith(f"{folder}/bad.yaml: view bad: Spark cannot analyse its SQL: [UNRESOLVED_COLUMN"), message
        assert "\n" not in message and len(message) < 400, message


@pytest.mark.heavy(90)
@pytest.mark.parametrize("source", ["t", "t_view"])
def test_auto_recomputes_a_split_view_whole_and_comes_back_equal_to_its_sql(lake, spark, tmp_path, monkeypatch, source):
    """auto weighs a split view and the views split off it as one (``planning.auto.choose_whole``, forced
    here): a whole run recomputes the view as declared on the base tables and leaves the split view
    alone; back, the view is rebuilt over its split view caught up. Every run of it, and of a view over
    it, audits equal to its SQL. Over a view (``t_view``), read only by the CTE split off, a whole run
    reads that view."""
    from lakeivm.planning.auto import Mode
    from lakeivm.run import chains
    from lakeivm.run.status import status
    from lakeivm.store import commit

    rng = random.Random(13)
    lake.create_table("t", spark.createDataFrame([(0, 1), (1, 4), (2, 6), (2, None), (3, 7)], "k int, v int"))
    declared = BANDED.replace("FROM t ", f"FROM {source} ")
    write(tmp_path, "banded", declared)
    write(tmp_path, "per_band", "SELECT band, COUNT(*) AS n, SUM(mv) AS total FROM banded GROUP BY band")
    if source == "t_view":
        write(tmp_path, "t_view", "SELECT k, v FROM t WHERE k >= 0")
    specs = load_specs(tmp_path)
    banded, per_band = specs["banded"], specs["per_band"]
    assert banded.whole.sql.strip() == declared and per_band.whole is None
    assert list(banded.whole.upstreams) == ([] if source == "t" else ["t_view"])
    run_view(lake, per_band)  # builds banded__s2, banded, per_band
    steps = [False, True, True, False, False, True, False] if source == "t" else [True, False, True]
    for step, whole in enumerate(steps):
        monkeypatch.setattr("lakeivm.planning.auto.choose_whole", lambda *args, whole=whole: Mode(whole, f"auto: step {step} (forced)"))
        random_batch(lake, rng, "t", "k", "v")
        split_runs = len(commit.log_rows(lake, "banded__s2"))
        run_view(lake, per_band)  # banded first, whole or split
        last = commit.log_rows(lake, "banded")[-1]
        assert f"step {step} (forced)" in last.plan, (step, last.plan)
        if whole:
            assert last.kind == "full" and last.mode == "refresh" and set(last.watermarks) == {source}, (step, last)
            assert len(commit.log_rows(lake, "banded__s2")) == split_runs  # the split view is left behind
            (shown,) = status(lake, {"banded": banded})
            assert shown["last_mode"] == "whole" and set(shown["pending_rows"]) == {source} and "error" not in shown, shown
            views = chains.planned(lake, per_band).specs  # a tick of per_band plans banded as its whole run
            assert [v.name for v in views] == [n for n in ("t_view", "banded", "per_band") if n != "t_view" or source == "t_view"]
            assert views[-2].refresh_policy == "full" and views[-2].sql == banded.whole.sql
        else:
            assert set(last.watermarks) == {"banded__s2"}, (step, last)  # maintained, or recomputed over its split view
        for spec in (banded, per_band):
            report = audit(lake, spec)
            assert report.ok, f"step {step}: {report}; missing {report.missing[:5]}, unexpected {report.unexpected[:5]}"
    assert audit(lake, specs["banded__s2"]).ok


def test_auto_probes_a_split_views_query_as_declared_before_running_it_whole(lake, spark, tmp_path, monkeypatch):
    """Before a split view's first whole run, auto times its query as declared in a split run
    (``choose_whole``'s probe: written to a scratch table, stopped at its limit): logged under
    ``(whole)``, it is the whole run's estimate the next choice weighs; the view stays split and equal
    to its SQL, its own runs' seconds count without the probe."""
    from lakeivm.planning.auto import WHOLE_PROBE, Mode, choose_whole, maintaining_seconds, whole_probed
    from lakeivm.store import commit

    rng = random.Random(17)
    lake.create_table("t", spark.createDataFrame([(0, 1), (1, 4), (2, 6), (2, None), (3, 7)], "k int, v int"))
    write(tmp_path, "banded", BANDED)
    banded = load_specs(tmp_path)["banded"]
    run_view(lake, banded)
    asked = []
    monkeypatch.setattr("lakeivm.planning.auto.choose_whole",
                        lambda *args: asked.append(args) or Mode(False, "auto: probe (forced)", probe=True, limit=60.0))
    random_batch(lake, rng, "t", "k", "v")
    run_view(lake, banded)
    probed = commit.log_rows(lake, "banded")[-1]
    assert WHOLE_PROBE in probed.table_seconds and probed.kind != "full" and set(probed.watermarks) == {"banded__s2"}
    assert maintaining_seconds([probed]) == [pytest.approx(probed.seconds - probed.table_seconds[WHOLE_PROBE])]
    assert asked[-1][4] is None  # no probe before this one
    monkeypatch.setattr("lakeivm.planning.auto.choose_whole",
                        lambda *args: asked.append(args) or choose_whole(*args))
    random_batch(lake, rng, "t", "k", "v")
    run_view(lake, banded)
    assert asked[-1][4] == whole_probed([probed]) and asked[-1][4].seconds >= probed.table_seconds[WHOLE_PROBE]
    assert "a probe of the query as declared" in commit.log_rows(lake, "banded")[-1].plan
    assert not list(Path(lake.root).glob("_system/probe/*"))  # the scratch table is gone
    for spec in (banded, load_specs(tmp_path)["banded__s2"]):
        assert audit(lake, spec).ok
