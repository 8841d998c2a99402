"""The lakeivm command, in-process: refresh, status, read, audit, and errors with exit code 2."""
from __future__ import annotations

import json

import pytest

from lakeivm.store import commit
from lakeivm.cli import main
from tests.helpers import sql

VIEW = "name: by_g\nsql: SELECT g, SUM(x) AS sx FROM r JOIN s ON r.a = s.a GROUP BY g\ndeadline: 60s\n"
BROKEN = "name: broken\nsql: [\ndeadline: 60s\n"  # malformed YAML: it must not stop by_g


@pytest.fixture
def views(tmp_path):
    folder = tmp_path / "views"
    folder.mkdir()
    (folder / "by_g.yaml").write_text(VIEW)
    (folder / "broken.yaml").write_text(BROKEN)
    return str(folder)


def test_refresh_status_read_audit(lake, spark, views, capsys):
    lake.create_table("r", spark.createDataFrame([(0, 1), (1, 2)], "a int, x int"))
    lake.create_table("s", spark.createDataFrame([(0, 0), (1, 1)], "a int, g int"))
    common = ["--lake", lake.root, "--views", views]
    assert main([*common, "refresh", "by_g"]) == 0
    out, err = capsys.readouterr()
    assert "run #1 bootstrap" in out
    warning = f"lakeivm: warning: skipped a view spec that does not load: {views}/broken.yaml: line 2: malformed YAML"
    assert err.startswith(warning) and err.count("\n") == 1  # one line, naming file and line
    sql(lake, "INSERT INTO {t} VALUES (1, 40)", "r")
    assert main([*common, "status"]) == 0
    out, err = capsys.readouterr()
    assert f"{views}/broken.yaml: line 2: malformed YAML" in err
    assert main([*common, "status", "--json"]) == 0
    entries = {entry["view"]: entry for entry in json.loads(capsys.readouterr().out)}
    assert set(entries) == {"by_g", "broken"} and entries["broken"]["source"] == f"{views}/broken.yaml"
    assert "by_g  [fivm]  deadline 60s" in out and "r            watermark    0  head    1  pending rows 1" in out
    assert "refresh now: predicted" in out and "within the deadline 60s" in out and "deadline record: 0/0" in out
    with commit.lease(lake, "by_g", "refresh") as claim:  # a run in progress is shown, with who runs it and its heartbeat
        assert main([*common, "status"]) == 0
        assert f"  running: #2 refresh on {claim.holder} (run {claim.run_id[:8]}) since " in capsys.readouterr().out
        assert main([*common, "status", "--json"]) == 0
        held = next(e for e in json.loads(capsys.readouterr().out) if e["view"] == "by_g")
        assert (held["holder"], held["run_id"], held["lease_s"], held["claim_lapsed"]) == (claim.holder, claim.run_id, 120, False)
        assert 0 <= held["heartbeat_age_s"] < 30  # it beats every 30 s
    assert main([*common, "refresh", "by_g"]) == 0
    assert "applied ['r']" in capsys.readouterr().out
    assert main([*common, "read", "by_g"]) == 0
    assert "42" in capsys.readouterr().out
    assert main([*common, "audit", "by_g"]) == 0
    assert "no difference" in capsys.readouterr().out
    sql(lake, "INSERT INTO {t} VALUES (0, 5)", "r")
    assert main([*common, "refresh", "--all"]) == 0  # every view that loads
    out = capsys.readouterr().out
    assert out.count("by_g: run #") == 1 and " refresh, applied ['r']" in out, out
    assert main([*common, "refresh"]) == 2 and "name one view, or --all" in capsys.readouterr().err


def test_unknown_view_is_a_clear_error(lake, views, capsys):
    assert main(["--lake", lake.root, "--views", views, "refresh", "nope"]) == 2
    assert f"unknown view 'nope'; registered views: by_g; spec files that do not load: {views}/broken.yaml" in capsys.readouterr().err


def test_refreshing_a_view_whose_spec_does_not_load_names_the_file_and_fix(tmp_path, views, capsys):
    assert main(["--lake", str(tmp_path / "lake"), "--views", views, "refresh", "broken"]) == 2  # before any Spark
    err = capsys.readouterr().err
    assert f"lakeivm: error: view 'broken' cannot run: its spec does not load:\n{views}/broken.yaml: line 2: malformed YAML" in err
    assert "write SQL as a block (`sql: |`" in err and f"Fix {views}/broken.yaml" in err


def test_datagen_graph_writes_a_power_law_edges_table(lake, capsys):
    assert main(["--lake", lake.root, "datagen", "graph", "--edges", "300", "--log2-vertices", "6"]) == 0
    assert "wrote 300 R-MAT edges over 2^6 vertices" in capsys.readouterr().out
    edges = lake.read(lake.table_path("edges"))
    assert edges.count() == 300 and edges.distinct().count() == 300


def test_repair_moves_a_damaged_newest_log_commit_aside(tmp_path, capsys):
    from pathlib import Path

    from lakeivm.store import commit
    from lakeivm.store.lake import Lake

    lake = Lake(None, str(tmp_path / "lake"))  # type: ignore[arg-type] -- the repair reads files only
    assert main(["--lake", lake.root, "repair"]) == 2 and "no lake at" in capsys.readouterr().err
    lake.ensure_system_tables()
    commit.append_log(lake, commit.LogRow(view="v", seq=1, status="committed", mode="refresh", kind="x", pins={},
                                          watermarks={}, state_versions={}, consistent=True))
    assert main(["--lake", lake.root, "repair"]) == 0 and "all readable" in capsys.readouterr().out
    newest = Path(lake.log_path) / "_delta_log" / f"{1:020d}.json"
    newest.write_text("")  # as a crash mid-write of the commit file leaves it
    assert main(["--lake", lake.root, "repair"]) == 0
    out = capsys.readouterr().out
    assert "newest commit file (00000000000000000001.json) was damaged (empty)" in out and not newest.exists()
    assert commit.log_rows(Lake(None, lake.root), "v") == []  # type: ignore[arg-type]  # the table reads again


def test_a_known_spark_failure_is_one_line(tmp_path, capsys, monkeypatch):
    from lakeivm.run import engine
    from lakeivm.errors import known_failure

    assert known_failure(RuntimeError("[FAILED_READ_FILE.NO_HINT] Error while reading file")).startswith("a file the run needed could not be read")
    assert "(FAILED_READ_FILE file:/lake/t/part-0.snappy.parquet);" in known_failure(
        RuntimeError("[FAILED_READ_FILE.NO_HINT] Error while reading file file:/lake/t/part-0.snappy.parquet. SQLSTATE: KD001"))
    assert known_failure(ValueError("a bug of ours")) is None

    def concurrent(*args, **kwargs):
        raise RuntimeError("[DELTA_CONCURRENT_APPEND] ConcurrentAppendException: Files were added ... (JVM trace)")

    monkeypatch.setattr(engine, "run_view", concurrent)
    monkeypatch.setattr("lakeivm.cli._lake", lambda settings: None)
    views = tmp_path / "views"
    views.mkdir()
    (views / "by_g.yaml").write_text(VIEW)
    monkeypatch.setenv("LAKEIVM_HOME", str(tmp_path / "home"))
    assert main(["--lake", str(tmp_path), "--views", str(views), "refresh", "by_g"]) == 2
    kept = next((tmp_path / "home" / "errors").glob("*.txt"))
    assert "(JVM trace)" in kept.read_text()  # the whole trace, kept for a bug report
    assert capsys.readouterr().err == (
        "lakeivm: error: view 'by_g': another writer committed to a table this run read or wrote "
        f"(ConcurrentAppendException); nothing was committed: refresh again (the whole trace: {kept})\n")
    monkeypatch.setenv("LAKEIVM_TRACE", "1")
    with pytest.raises(RuntimeError, match="DELTA_CONCURRENT_APPEND"):
        main(["--lake", str(tmp_path), "--views", str(views), "refresh", "by_g"])


def test_a_lake_path_that_does_not_exist_is_refused_not_created(tmp_path, views, capsys):
    missing = tmp_path / "typo"
    assert main(["--lake", str(missing), "--views", views, "refresh", "by_g"]) == 2
    assert f"no lake at {missing} (no tables/ folder there)" in capsys.readouterr().err
    assert not missing.exists()  # no _system folder grown at a mistyped path


def test_an_unknown_tpch_table_is_refused_before_any_lake_is_made(tmp_path, capsys):
    lake = tmp_path / "lake"
    assert main(["--lake", str(lake), "datagen", "tpch", "--tpch-tables", "nation, bogus"]) == 2
    assert "unknown TPC-H tables ['bogus']; choose from region, nation," in capsys.readouterr().err
    assert not lake.exists()


def test_explain_and_status_say_why_a_view_is_recomputed_in_full(lake, spark, tmp_path, capsys):
    lake.create_table("r", spark.createDataFrame([(0, 1), (1, 2)], "a int, x int"))
    lake.create_table("s", spark.createDataFrame([(0, 0)], "a int, g int"))
    folder = tmp_path / "full_views"
    folder.mkdir()
    (folder / "left_rows.yaml").write_text("name: left_rows\nsql: |\n  SELECT r.a, s.g\n  FROM r JOIN r AS r2 ON r2.a = r.a FULL OUTER JOIN s ON r.a = s.a\ndeadline: 60s\n")
    (folder / "by_g.yaml").write_text(VIEW)
    common = ["--lake", lake.root, "--views", str(folder)]
    assert main([*common, "explain", "left_rows"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "left_rows: refresh policy auto: full, kind full",
        "not incremental: line 2: FULL OUTER JOIN is not supported; inner equi-joins, LEFT JOIN, a RIGHT JOIN that is the "
        "query's only join, and a FULL JOIN that is its first, followed by inner joins only, are maintained incrementally."]
    assert main([*common, "explain", "by_g"]) == 0
    assert capsys.readouterr().out.startswith("by_g: refresh policy auto: incremental, kind fivm\n")
    (folder / "ranked.yaml").write_text("name: ranked\nsql: SELECT SUM(r.x) AS v FROM r WHERE (SELECT COUNT(*) FROM r AS r2 "
                                        "WHERE r2.x <= r.x) > 1\ndeadline: 60s\n")
    assert main([*common, "explain", "ranked"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [out[0], out[-1]] == [
        "ranked: refresh policy auto: incremental, kind nested",
        "nested, the general algorithm (RPAI §4.2): r's rows summed per (x), 2 sums besides the count; subquery 1: "
        "x <= outer x. Per commit: r's passing rows are one range of x, found in an ordered index (§4.3, O(log n))"]
    assert main([*common, "refresh", "left_rows"]) == 0
    capsys.readouterr()
    assert main([*common, "status"]) == 0
    out = capsys.readouterr().out
    assert "left_rows  [full]" in out and "  recomputed in full: line 2: FULL OUTER JOIN is not supported" in out


def test_the_command_exits_with_mains_code_and_its_output_flushed(tmp_path):
    """``lakeivm`` ends with os._exit (``cli.run``): the code and every line still reach the caller."""
    import subprocess
    import sys

    command = [sys.executable, "-m", "lakeivm.cli", "--lake", str(tmp_path), "--views", str(tmp_path)]
    helped = subprocess.run([*command, "--help"], capture_output=True, text=True)
    assert helped.returncode == 0 and "refresh" in helped.stdout
    failed = subprocess.run([*command, "refresh", "nosuchview"], capture_output=True, text=True)
    assert failed.returncode == 2 and failed.stderr.startswith("lakeivm: error:"), failed.stderr
    wrong = subprocess.run([*command, "nosuchcommand"], capture_output=True, text=True)
    assert wrong.returncode == 2 and "invalid choice" in wrong.stderr


def test_unlock_with_no_claim_says_so_and_a_bad_lease_setting_is_one_line(tmp_path, capsys, monkeypatch):
    from lakeivm.store.lake import Lake

    lake = Lake(None, str(tmp_path / "lake"))  # type: ignore[arg-type] -- unlock reads and appends the log only
    assert main(["--lake", lake.root, "unlock", "v"]) == 2 and "no lake at" in capsys.readouterr().err
    lake.ensure_system_tables()
    assert main(["--lake", lake.root, "unlock", "v"]) == 0
    assert capsys.readouterr().out == "lakeivm: view 'v' is not claimed by any run: nothing to unlock\n"
    monkeypatch.setenv("LAKEIVM_LEASE_SECONDS", "soon")
    assert main(["--lake", lake.root, "unlock", "v"]) == 2
    assert capsys.readouterr().err == ("lakeivm: error: lease_seconds (LAKEIVM_LEASE_SECONDS or lakeivm.toml) must be a "
                                       "positive number of seconds, got 'soon'\n")
