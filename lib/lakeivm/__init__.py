"""lakeivm: incremental materialized views over Delta Lake tables."""
from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["read", "__version__"]


def read(spark, view: str, latest: bool = False, **kwargs):
    """Return a maintained view as a Spark DataFrame (last consistent snapshot by default).

    Example::

        df = lakeivm.read(spark, "revenue_by_nation")
    """
    from lakeivm.engine import read_view

    return read_view(spark, view, latest=latest, **kwargs)
