"""The maintainer protocol and the context every maintainer is handed.

How a run uses them: ``docs/design/run.md#kinds-and-their-maintainers``.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from lakeivm.store.lake import Lake
from lakeivm.sources.changes import source
from lakeivm.spec import ViewSpec

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from lakeivm.sql import Query


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
    progress: Callable[[str], None] = field(default=lambda message: None)  # the run's progress lines (``run_view``'s)
    lease: Any = None  # the run's commit.Lease: its last row is appended through it, fenced
    bases: dict[str, int] = field(default_factory=dict)  # state table versions after recovery (the run writes above them)
    why_full: str | None = None  # the full kind: why the view is not maintained incrementally (registry.Choice)
    auto: bool = False  # refresh_policy auto: a run may recompute in full instead of maintaining (planning.auto)
    delta_rows: dict[str, int] = field(default_factory=dict)  # netted change rows of each table this run applies
    table_ids: dict[str, str] = field(default_factory=dict)  # the base tables' Delta ids at the pins (changes.identities)
    chain: Any = None  # a run after its chain's views: when the chain started and its prediction (``run.chains.ChainRun``)
    spark_reads_result: bool = False  # the audit: the stored result read by Spark's Delta reader, as a Spark user reads it
    _snapshots: set[str] = field(default_factory=set, repr=False)  # the temp views ``snapshot`` registered in this run
    located: dict[tuple[str, int], Any] = field(default_factory=dict, repr=False)  # views' stored rows found this run (``upstream.stored_rows``)
    read_by_key: dict[tuple, list] = field(default_factory=dict, repr=False)  # rows read by key this run (``by_key.rows_with_keys``)

    @property
    def spark(self) -> SparkSession:
        return self.lake.spark

    @property
    def view(self) -> str:
        return self.spec.name

    def snapshot(self, table: str, version: int, oracle: bool = False) -> str:
        """Register ``table`` as of ``version`` as a temp view, once per run; returns the view's name.

        Once: a Delta read at a version other than the table's newest reconstructs that snapshot's
        file list (a Spark job), and the delta rule reads each relation at its watermark once per
        changed table. The source reads it (``changes.Source.snapshot``): a view by its run's seq, a
        small table by delta-rs; the ``oracle`` (the audit's recompute) through Spark's Delta reader."""
        name = f"lakeivm_{self.view}_{table}_v{version}{'_oracle' if oracle else ''}"
        if name in self._snapshots:
            return name
        source(self.lake, table).snapshot(version, oracle).createOrReplaceTempView(name)
        self._snapshots.add(name)  # only once registered: a read that failed is tried again
        return name

    def release(self) -> None:
        """Drop the temp views ``snapshot`` registered. A session outlives a run (a Connect server's
        lasts an hour per view), and it kept every version's snapshot view -- a small table's with its
        rows, handed over as local data: a 15-minute soak of one session grew the server's heap by
        ~2.4 MB per run, 2.1 M rows of partsupp snapshots after 512 runs."""
        names, self._snapshots = sorted(self._snapshots), set()
        try:
            for name in names:
                self.spark.catalog.dropTempView(name)
        except Exception:  # noqa: BLE001 -- a session that is gone took its views along; the run's own error stands
            pass


class Maintainer(Protocol):
    """One kind of view maintenance. State lives in Delta tables named by ``state_tables``."""

    kind: str  # its kind's name, set by ``lakeivm.views.kinds.maintainer_for``

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


def bag(df) -> Counter:
    """The rows of ``df`` as a bag (collected), values ``normalize``d: how an audit compares a view with its SQL."""
    return Counter(tuple(normalize(v) for v in row) for row in df.collect())


def normalize(value: object) -> object:
    """Numbers compared to 12 significant digits (SUM/AVG of the state may differ in the last digit);
    NaN equal to NaN, as Spark compares them."""
    from decimal import Decimal

    if isinstance(value, (float, Decimal)) and not isinstance(value, bool):
        value = float(value)
        return "NaN" if value != value else float(f"{value:.12g}")
    return value
