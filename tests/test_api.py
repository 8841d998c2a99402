"""The Python API (``lakeivm.Views``): what a user imports to refresh, read, check and explain views."""
from __future__ import annotations

import pytest
import yaml

import lakeivm
from lakeivm.errors import UnknownView
from tests.helpers import sql


@pytest.fixture
def views(lake, tmp_path):
    folder = tmp_path / "views"
    folder.mkdir()
    (folder / "by_g.yaml").write_text(yaml.safe_dump({
        "name": "by_g", "deadline": "60s", "sql": "SELECT g, SUM(x) AS sx, COUNT(*) AS c FROM r JOIN s ON r.a = s.a GROUP BY g"}))
    (folder / "broken.yaml").write_text("name: broken\nsql: [")
    spark = lake.spark
    lake.create_table("r", spark.createDataFrame([(0, 1), (1, 2)], "a int, x int"))
    lake.create_table("s", spark.createDataFrame([(0, 0), (1, 1)], "a int, g int"))
    return lakeivm.Views.open(spark, lake=lake.root, views=str(folder))


def test_refresh_read_status_explain_audit(views):
    assert list(views) == ["by_g"] and [b.path.rsplit("/", 1)[-1] for b in views.broken] == ["broken.yaml"]
    view = views["by_g"]
    assert view.status().last_run is None and view.status().within_deadline is None
    first = view.refresh()
    assert first is not None and first.mode == "bootstrap"
    sql(view.lake, "INSERT INTO {t} VALUES (1, 40)", "r")
    status = view.status()
    assert isinstance(status, lakeivm.ViewStatus) and status.pending_rows == {"r": 1, "s": 0} and status.kind == "fivm"
    assert status.within_deadline is True and status.error is None
    row = view.refresh()
    assert row.applied == ("r",) and view.refresh() is None  # then nothing to apply
    assert sorted(tuple(r) for r in view.read().collect()) == [(0, 1, 1), (1, 42, 2)]
    assert "by_g: refresh policy auto: incremental, kind fivm" in view.explain()
    assert view.audit().ok


def test_unknown_view_and_mode_are_clear_errors(views):
    with pytest.raises(UnknownView, match="registered views: by_g"):
        views["nope"]
    with pytest.raises(ValueError, match="mode must be one of refresh, tick, rebuild"):
        views["by_g"].refresh("full")


def test_views_given_as_spec_records(tmp_path):
    """``specs``: views built in code (a benchmark's variants) instead of a folder's; not both."""
    from lakeivm.catalog.registry import spec_from_dict

    spec = spec_from_dict({"name": "by_g", "deadline": 60, "sql": "SELECT g, COUNT(*) AS c FROM s GROUP BY g"})
    views = lakeivm.Views.open(lake=str(tmp_path / "lake"), specs=[spec])
    assert list(views) == ["by_g"] and views["by_g"].spec is spec and views.broken == ()
    with pytest.raises(ValueError, match="a views folder or specs, not both"):
        lakeivm.Views.open(lake=str(tmp_path / "lake"), views=str(tmp_path), specs=[spec])
