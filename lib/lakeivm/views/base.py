"""The maintainer protocol (ARCHITECTURE §5) and the context every maintainer is handed."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from lakeivm.lake import Lake
from lakeivm.registry import ViewSpec
from lakeivm.sql import Query

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


@dataclass
class Context:
    """What one run hands a maintainer: the lake, the spec and query, pins and watermarks.

    ``watermarks`` advance as tables are applied within the run: a relation other than the one
    being applied is always read as of its own watermark, so asymmetric plans stay exact.
    ``checkpoint(label)`` is called after every state write (fault-injection tests hook it).
    """

    lake: Lake
    spec: ViewSpec
    query: Query
    pins: dict[str, int]
    watermarks: dict[str, int]
    seed: int = 0
    fingerprint: str | None = None  # of the view's definition (lakeivm.fingerprint), recorded in the log row
    checkpoint: Callable[[str], None] = field(default=lambda label: None)
    lease: Any = None  # the run's commit.Lease: its last row is appended through it, fenced
    bases: dict[str, int] = field(default_factory=dict)  # state table versions after recovery (the run writes above them)
    why_full: str | None = None  # the full kind: why the view is not maintained incrementally (registry.Choice)
    auto: bool = False  # refresh_policy auto: a run may recompute in full instead of maintaining (planning.auto)
    delta_rows: dict[str, int] = field(default_factory=dict)  # netted change rows of each table this run applies

    @property
    def spark(self) -> SparkSession:
        return self.lake.spark

    @property
    def view(self) -> str:
        return self.spec.name

    def snapshot(self, table: str, version: int) -> str:
        """Register ``table`` as of ``version`` as a temp view; returns the view's name."""
        name = f"lakeivm_{self.view}_{table}_v{version}"
        if table in self.lake.upstreams:  # a view read as a source: ``version`` is its run's seq
            from lakeivm import upstream

            upstream.snapshot(self.lake, self.lake.upstreams[table], version).createOrReplaceTempView(name)
        else:
            self.lake.read(self.lake.table_path(table), version).createOrReplaceTempView(name)
        return name


class Maintainer(Protocol):
    """One kind of view maintenance. State lives in Delta tables named by ``state_tables``."""

    def bootstrap(self, ctx: Context) -> None:
        """Build all state from the snapshots at ``ctx.pins``."""

    def apply(self, ctx: Context, table: str, delta: DataFrame) -> None:
        """Apply one table's netted signed delta (columns + ``_lakeivm_m``)."""

    def flush(self, ctx: Context) -> None:
        """Write what ``apply`` calls buffered; the engine calls it once, before committing."""

    def result(self, ctx: Context, version: int | None = None) -> DataFrame:
        """The view's rows (at a state version of the result table, or the newest)."""

    def state_tables(self, ctx: Context) -> Mapping[str, str]:
        """{state name: Delta path} of every table the commit must version."""
