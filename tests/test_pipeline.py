"""The TPC-DI-style pipeline (``schemas/views-tpcdi``) over ``lakeivm.datagen.tpcdi``'s brokerage:
its 42 SQL views load, chain bronze -> silver -> gold, and after each batch every view equals its own
SQL recomputed by Spark (the whole stream under -m slow; ``lakeivm bench pipeline`` times it)."""
from __future__ import annotations

import pytest

from lakeivm.bench.pipeline import VIEWS, topological
from lakeivm.catalog.registry import load_specs
from lakeivm.datagen.tpcdi import generate_tpcdi
from lakeivm.store.lake import Lake


def test_the_pipelines_views_load_and_chain(tmp_path):
    lake = Lake(lambda: None, str(tmp_path / "lake"))  # delta-rs writes the tables; loading reads their columns
    generate_tpcdi(lake, customers=20, progress=lambda line: None)
    specs = load_specs(VIEWS, lake.root)
    assert not specs.broken, [b.summary for b in specs.broken]
    order = topological(specs)
    declared = [name for name in order if specs[name].derived_from is None]
    assert len(declared) == 42 and set(order) == set(specs)  # and the CTEs split off as views of their own
    depth = {}
    for name in order:
        depth[name] = 1 + max((depth[up] for up in specs[name].upstreams), default=0)
    assert max(depth.values()) >= 5, depth  # views over views, five deep at least
    assert all(order.index(up) < order.index(name) for name in order for up in specs[name].upstreams)


@pytest.mark.slow
def test_every_view_follows_the_batches_and_equals_its_sql(spark, tmp_path):
    from lakeivm.api import Views
    from lakeivm.config import Settings
    from lakeivm.store import commit

    root = str(tmp_path / "lake")
    views = Views.open(spark, lake=root, settings=Settings(lake=root), specs=())
    stream = generate_tpcdi(views.lake, customers=40, progress=lambda line: None)
    views = Views.open(spark, lake=root, settings=Settings(lake=root), specs=load_specs(VIEWS, root).values())
    order = topological(views.specs)
    for name in order:
        views[name].refresh()
    kinds = {name: commit.last_committed(views.lake, name).kind for name in order}
    for _ in range(3):
        stream.batch()
        for name in order:
            views[name].refresh()
        differ = {name: str(report) for name in order if not (report := views[name].audit()).ok}
        assert not differ, differ
    print(kinds)
