"""Spark Declarative Pipelines (``lakeivm.catalog.pipeline``): the example pipeline ``schemas/views-sdp``
read through pyspark's own spec loader and definition registration; its SQL materialized views are
lakeivm views with the spec's deadline, the rest is named as not taken, and the views follow a TPC-H
change batch equal to their SQL."""
from __future__ import annotations

import pytest

from lakeivm.catalog.registry import load_specs
from lakeivm.config import SCHEMAS

PIPELINE = SCHEMAS / "views-sdp"


def test_a_pipelines_sql_views_load_and_the_rest_is_named():
    specs = load_specs(PIPELINE)
    assert sorted(specs) == ["leading_nations", "revenue_by_nation"] and not specs.broken
    assert specs["revenue_by_nation"].deadline_s == 300.0  # the spec's configuration: lakeivm.deadline 5m
    assert specs["leading_nations"].deadline_s == 60.0  # its own `-- lakeivm: deadline=1m` line wins
    assert list(specs["leading_nations"].upstreams) == ["revenue_by_nation"]
    assert sorted(specs) == sorted(load_specs(PIPELINE / "spark-pipeline.yml"))  # the folder or the spec file
    python, streaming = specs.not_taken
    assert python.startswith("transformations/big_orders.py: a .py definition file")
    assert streaming.startswith("transformations/revenue.sql: line 4: CREATE STREAMING TABLE lineitem_stream")


def test_a_spec_spark_pipelines_refuses_is_broken_with_its_reason(tmp_path):
    (tmp_path / "spark-pipeline.yml").write_text("name: p\nlibraries: [{glob: {include: sql/**}}]\n")  # no storage
    specs = load_specs(tmp_path)
    assert not specs and "PIPELINE_SPEC_MISSING_REQUIRED_FIELD" in specs.broken[0].problem
    (tmp_path / "spark-pipeline.yml").write_text("name: p\nstorage: /tmp/s\nlibraries: [{glob: {include: sql/**}}]\n")
    (tmp_path / "sql").mkdir()
    (tmp_path / "sql" / "v.sql").write_text("CREATE MATERIALIZED VIEW v AS SELECT a, COUNT(*) AS n FROM t GROUP BY a;")
    (problem,) = [entry.problem for entry in load_specs(tmp_path).broken]
    assert "sql/v.sql: line 1: view v: no deadline" in problem  # neither the statement nor the spec gives one


def test_the_pipelines_views_follow_a_tpch_batch_equal_to_their_sql(spark, tmp_path):
    from lakeivm.api import Views
    from lakeivm.config import Settings
    from lakeivm.datagen.tpch import TpchChangeStream, generate_tpch

    root = str(tmp_path / "lake")
    views = Views.open(spark, lake=root, settings=Settings(lake=root), specs=load_specs(PIPELINE).values())
    generate_tpch(views.lake, 0.002, tables=("nation", "customer", "orders", "lineitem"), progress=lambda line: None)
    assert views["leading_nations"].refresh().kind != "full"  # its upstream first
    stream = TpchChangeStream(views.lake, seed=2)
    stream.rf1(5), stream.rf2(5)  # RF1 inserts orders with their lineitems, RF2 deletes some
    for name in ("revenue_by_nation", "leading_nations"):
        row = views[name].refresh()
        assert row is not None and row.kind != "full" and views[name].audit().ok, name
