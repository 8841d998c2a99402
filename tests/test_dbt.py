"""dbt projects (``lakeivm.catalog.dbt``): a compiled manifest's materialized_view models as lakeivm
views -- refs as views over views, sources as lake tables, models lakeivm does not maintain named --
and the example project ``schemas/dbt-tpch`` compiled by dbt-core + dbt-spark for real, synced, its
views refreshed after a TPC-H batch and audited equal to their SQL."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from lakeivm.catalog.dbt import sync, views_from_manifest
from lakeivm.catalog.registry import load_specs
from lakeivm.config import SCHEMAS

PROJECT = SCHEMAS / "dbt-tpch"


def model(name: str, code: str, materialized: str = "materialized_view", meta: dict | None = None) -> tuple[str, dict]:
    return f"model.p.{name}", {"resource_type": "model", "name": name, "schema": "default", "relation_name": f"`default`.`{name}`",
                               "config": {"materialized": materialized, "meta": meta or {}}, "compiled_code": code,
                               "original_file_path": f"models/{name}.sql"}


def test_a_manifests_models_become_views_over_views_and_lake_tables():
    manifest = {"metadata": {"project_name": "p"}, "nodes": dict([
        model("per_key", "SELECT k, COUNT(*) AS n FROM `default`.`raw_t` AS t GROUP BY k", meta={"lakeivm": {"deadline": "1m"}}),
        model("top", "WITH x AS (SELECT n FROM `default`.`per_key`) SELECT MAX(n) AS m FROM x"),
        model("plain", "SELECT k FROM `default`.`raw_t`", materialized="view"),
        model("over_plain", "SELECT COUNT(*) AS c FROM `default`.`plain`"),
    ]), "sources": {"source.p.s.raw_t": {"name": "raw_t", "identifier": "raw_t", "schema": "default", "relation_name": "`default`.`raw_t`"}}}
    synced = views_from_manifest(manifest, deadline="5m")
    assert sorted(synced.views) == ["per_key", "top"]
    assert "FROM raw_t AS t" in synced.views["per_key"] and "'lakeivm.deadline' = '1m'" in synced.views["per_key"]  # its meta wins
    assert "FROM per_key" in synced.views["top"] and "'lakeivm.deadline' = '5m'" in synced.views["top"]
    (refused,) = synced.not_taken
    assert refused.startswith("models/over_plain.sql: model over_plain reads model plain, which lakeivm does not maintain")
    assert [line for line in views_from_manifest(manifest).not_taken if "no deadline" in line] == [
        "models/top.sql: model top has no deadline: set meta: {lakeivm: {deadline: 5m}} in its config (or `+meta` in "
        "dbt_project.yml), or give `lakeivm dbt sync --deadline`"]


def test_a_views_folder_that_is_a_dbt_project_follows_its_last_compile(tmp_path, monkeypatch):
    from lakeivm.catalog.spec_cache import cached_specs

    monkeypatch.setenv("LAKEIVM_SPEC_CACHE", str(tmp_path / "cache"))
    project = tmp_path / "project"
    project.mkdir()
    (project / "dbt_project.yml").write_text("name: p\n")
    (problem,) = [entry.problem for entry in cached_specs(project).broken]
    assert problem.endswith("run `dbt compile` in " + str(project) + " first")  # not compiled yet
    (project / "target").mkdir()
    sources = {"source.p.s.raw_t": {"name": "raw_t", "identifier": "raw_t", "schema": "default", "relation_name": "`default`.`raw_t`"}}
    per_key = model("per_key", "SELECT k, COUNT(*) AS n FROM `default`.`raw_t` GROUP BY k", meta={"lakeivm": {"deadline": "1m"}})
    manifest = {"metadata": {"project_name": "p"}, "nodes": dict([per_key]), "sources": sources}
    (project / "target" / "manifest.json").write_text(json.dumps(manifest))
    specs = cached_specs(project)
    assert sorted(specs) == ["per_key"] and specs["per_key"].source == str(project / "models" / "per_key.sql")
    manifest["nodes"].update([model("top", "SELECT MAX(n) AS m FROM `default`.`per_key`", meta={"lakeivm": {"deadline": "2m"}})])
    (project / "target" / "manifest.json").write_text(json.dumps(manifest))  # the next `dbt compile`
    specs = cached_specs(project)
    assert sorted(specs) == ["per_key", "top"] and list(specs["top"].upstreams) == ["per_key"] and specs["top"].deadline_s == 120.0


def test_the_example_project_compiled_by_dbt_syncs_and_its_views_follow_a_tpch_batch(spark, tmp_path):
    from lakeivm.api import Views
    from lakeivm.config import Settings
    from lakeivm.datagen.tpch import TpchChangeStream, generate_tpch

    target = tmp_path / "target"
    dbt = Path(sys.executable).parent / "dbt"
    env = {**os.environ, "DBT_SEND_ANONYMOUS_USAGE_STATS": "false"}
    done = subprocess.run([str(dbt), "compile", "--project-dir", str(PROJECT), "--profiles-dir", str(PROJECT),
                           "--target-path", str(target), "--log-path", str(tmp_path / "logs")],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)  # its Spark's files in tmp
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    views = tmp_path / "views"
    synced = sync(PROJECT, views, target=str(target))
    assert sorted(synced.views) == ["order_revenue", "revenue_by_priority"], synced.not_taken
    assert synced.not_taken == []  # customer_keys is a dbt view no synced model reads: dbt's, not lakeivm's
    specs = load_specs(views)
    assert not specs.broken and list(specs["revenue_by_priority"].upstreams) == ["order_revenue"]
    assert specs["revenue_by_priority"].deadline_s == 60.0 and specs["order_revenue"].deadline_s == 300.0

    root = str(tmp_path / "lake")
    lake_views = Views.open(spark, lake=root, settings=Settings(lake=root), specs=specs.values())
    generate_tpch(lake_views.lake, 0.002, tables=("orders", "lineitem"), progress=lambda line: None)
    assert lake_views["revenue_by_priority"].refresh().kind != "full"
    stream = TpchChangeStream(lake_views.lake, seed=4)
    stream.rf1(5), stream.rf2(5)  # RF1 inserts orders with their lineitems, RF2 deletes some
    for name in ("order_revenue", "revenue_by_priority"):
        row = lake_views[name].refresh()
        assert row is not None and row.kind != "full" and lake_views[name].audit().ok, name
