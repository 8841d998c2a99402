"""lakeivm: incremental materialized views over Delta Lake tables.

The Python API (``lakeivm.api``)::

    import lakeivm

    views = lakeivm.Views.open(spark)              # the configured lake and views folder
    views["revenue_by_nation"].refresh()           # apply every pending change now
    df = views["revenue_by_nation"].read()         # the last consistent snapshot
    lakeivm.read(spark, "revenue_by_nation")       # the same read in one call
"""
from __future__ import annotations

from typing import TYPE_CHECKING

__version__ = "0.1.0"
__all__ = ["View", "ViewStatus", "Views", "read", "__version__"]

if TYPE_CHECKING:
    from lakeivm.api import View, ViewStatus, Views


def read(spark, view: str, latest: bool = False, **kwargs):
    """Return a maintained view as a Spark DataFrame (last consistent snapshot by default).

    Example::

        df = lakeivm.read(spark, "revenue_by_nation")
    """
    from lakeivm.run.reading import read_view

    return read_view(spark, view, latest=latest, **kwargs)


def __getattr__(name: str):
    """``Views``, ``View`` and ``ViewStatus`` from ``lakeivm.api``, imported on first use: importing
    lakeivm (a DAG file does) imports no Spark."""
    if name in ("Views", "View", "ViewStatus"):
        from lakeivm import api

        return getattr(api, name)
    raise AttributeError(f"module 'lakeivm' has no attribute {name!r}")
