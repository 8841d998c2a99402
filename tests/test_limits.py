"""The local-vs-Spark limits: one settings object, from lakeivm.toml's [limits] and LAKEIVM_LIMIT_*, read by a run."""
from __future__ import annotations

import pytest

from lakeivm.config import Settings, load_settings
from lakeivm.limits import Limits
from tests.helpers import sql


def test_toml_limits_are_overridden_by_the_environment(tmp_path, monkeypatch):
    (tmp_path / "lakeivm.toml").write_text("[limits]\nsmall_delta_rows = 0\nmerge_rows = 5\n")
    monkeypatch.setenv("LAKEIVM_LIMIT_MERGE_ROWS", "70_000")
    limits = load_settings(tmp_path / "lakeivm.toml").limits
    assert limits == Limits(small_delta_rows=0, merge_rows=70_000)
    assert load_settings(tmp_path / "absent.toml").limits == Limits(merge_rows=70_000)
    assert Limits.everything_on_spark() == Limits(**{name: 0 for name in Limits.__dataclass_fields__})
    with pytest.raises(ValueError, match="limit driver_rows must be a whole number of rows, 0 or more, got '9'"):
        Limits(driver_rows="9")  # type: ignore[arg-type]


@pytest.mark.parametrize("toml, env, message", [
    ("[limits]\nsmall_delta_row = 0\n", {}, r"lakeivm.toml: unknown limit\(s\) \['small_delta_row'\] in \[limits\]; known: \['small_delta_rows'"),
    ("[limits]\nmerge_rows = 1.5\n", {}, r"\[limits\] merge_rows in .*lakeivm.toml must be a whole number of rows, 0 or more, got 1.5"),
    ("limits = 3\n", {}, r"limits in .*lakeivm.toml must be a table"),
    ("[limits]\nscan_rows = -1\n", {}, r"\[limits\] scan_rows in .*lakeivm.toml must be a whole number of rows, 0 or more, got -1"),
    ("", {"LAKEIVM_LIMIT_SCAN_ROWS": "many"}, r"LAKEIVM_LIMIT_SCAN_ROWS must be a whole number of rows, 0 or more, got 'many'"),
    ("", {"LAKEIVM_LIMIT_SCAN_ROW": "1"}, r"unknown limit variable\(s\) \['LAKEIVM_LIMIT_SCAN_ROW'\]; known: \['LAKEIVM_LIMIT_SMALL_DELTA_ROWS'"),
])
def test_a_bad_limit_is_named(tmp_path, monkeypatch, toml, env, message):
    (tmp_path / "lakeivm.toml").write_text(toml)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    with pytest.raises(ValueError, match=message):
        load_settings(tmp_path / "lakeivm.toml")


@pytest.mark.parametrize("env, reader", [(None, "spark"), ("100000", "arrow")])
def test_limits_from_lakeivm_toml_and_the_environment_reach_a_run(spark, tmp_path, monkeypatch, env, reader):
    """lakeivm.toml sets small_delta_rows = 0: a refresh's change range is read by Spark. The
    environment's LAKEIVM_LIMIT_SMALL_DELTA_ROWS wins over it: read by delta-rs in this process."""
    import lakeivm
    from lakeivm.sources import changes

    (tmp_path / "views").mkdir()
    (tmp_path / "views" / "sums.yaml").write_text(
        "name: sums\nrefresh_policy: incremental\ndeadline: 60s\nsql: SELECT a, SUM(x) AS s FROM r GROUP BY a\n")
    (tmp_path / "lakeivm.toml").write_text(f'lake = "{tmp_path / "lake"}"\nviews = "{tmp_path / "views"}"\n\n'
                                           "[limits]\nsmall_delta_rows = 0\n")
    if env is not None:
        monkeypatch.setenv("LAKEIVM_LIMIT_SMALL_DELTA_ROWS", env)
    views = lakeivm.Views.open(spark, settings=load_settings(tmp_path / "lakeivm.toml"))
    assert views.lake.limits.small_delta_rows == (0 if env is None else 100_000)
    views.lake.create_table("r", spark.createDataFrame([(1, 10), (2, 20)], "a int, x int"))
    views["sums"].refresh()
    small = changes.TableSource._read_small
    used = []
    monkeypatch.setattr(changes.TableSource, "_read_small", lambda *args: used.append(small(*args)) or used[-1])
    sql(views.lake, "INSERT INTO {t} VALUES (1, 5), (3, 30)", "r")
    views["sums"].refresh()
    assert [frame is not None for frame in used] == [reader == "arrow"]
    assert sorted(tuple(row) for row in views["sums"].read().collect()) == [(1, 15), (2, 20), (3, 30)]


def test_settings_limits_reach_the_lake_a_view_runs_on(tmp_path):
    """``Settings(limits=...)`` given to ``Views.open`` is what the lake's runs read."""
    import lakeivm

    views = lakeivm.Views.open(settings=Settings(lake=str(tmp_path / "lake"), limits=Limits.everything_on_spark()))
    assert views.lake.limits == Limits.everything_on_spark()
