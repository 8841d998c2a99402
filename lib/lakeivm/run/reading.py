"""Reading a maintained view: its rows at the state versions a committed run names."""
from __future__ import annotations

from typing import TYPE_CHECKING

from lakeivm.store import commit
from lakeivm.config import Settings, load_settings
from lakeivm.errors import analysed_as
from lakeivm.store.lake import Lake, open_lake
from lakeivm.spec import ViewSpec, find_spec
from lakeivm.catalog.spec_cache import cached_specs
from lakeivm.sources.upstream import reader

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def read_view(spark: SparkSession, view: str, latest: bool = False, settings: Settings | None = None) -> DataFrame:
    """The view as of its last consistent run (or, ``latest``, its newest, possibly asymmetric, run)."""
    settings = settings or load_settings()
    lake = open_lake(spark, settings)
    spec = find_spec(cached_specs(settings.views, settings.lake), view)
    return view_snapshot(lake, spec, latest)


def view_snapshot(lake: Lake, spec: ViewSpec, latest: bool = False) -> DataFrame:
    """The view's rows at the state versions its last (consistent) committed log row names."""
    row = commit.required_run(lake, spec.name, consistent=not latest)
    with analysed_as(spec):
        ctx, maintainer = reader(lake, spec, row)
        return maintainer.result(ctx, row.state_versions["result"])
