"""lakeivm's Python API: the views of a lake, each refreshed, read, explained and audited.

Small on purpose, the way Delta's ``DeltaTable`` is: the CLI, the Airflow tasks, the spark-submit
job and the demo call these and nothing below them. Example::

    import lakeivm

    views = lakeivm.Views.open(spark, lake="s3a://bucket/lake", views="views/")
    views["revenue_by_nation"].refresh()            # on demand: every pending change applied
    df = views["revenue_by_nation"].read()          # the last consistent snapshot, a Spark DataFrame
    print(views["revenue_by_nation"].status().predicted_refresh_s)
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lakeivm.config import Settings, load_settings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from lakeivm.store.commit import LogRow
    from lakeivm.run.audit import Audit
    from lakeivm.store.lake import Lake
    from lakeivm.spec import Specs, ViewSpec

MODES = ("refresh", "tick", "rebuild")  # refresh: apply everything now (the default); tick: the planner decides; rebuild: from snapshots


@dataclass(frozen=True)
class ViewStatus:
    """A view's freshness: its last run, each source's watermark against its head and pending change
    rows, the predicted seconds of a refresh now against the deadline, and a run holding it."""

    view: str
    deadline_s: float
    tick_s: float
    kind: str | None = None
    refresh_policy: str | None = None
    error: str | None = None  # the view cannot be classified or read (its SQL, a table gone, ...)
    why_full: str | None = None  # why it is recomputed in full rather than maintained
    last_run: str | None = None  # "#seq mode at time (seconds)"; None: never run
    last_mode: str | None = None  # refresh policy auto: the last run's choice, incremental or full
    heads: Mapping[str, int] = field(default_factory=dict)
    watermarks: Mapping[str, int] = field(default_factory=dict)
    pending_rows: Mapping[str, int | None] = field(default_factory=dict)
    upstreams: tuple[str, ...] = ()  # the views it reads: their heads and watermarks are log seqs
    waiting_for: tuple[str, ...] = ()  # the views it reads that have no run yet (a refresh of it builds them first)
    consistent: bool | None = None
    predicted_refresh_s: float | None = None
    refresh_prediction: str | None = None
    last_plan: str | None = None
    deadline_record: Mapping[str, Any] = field(default_factory=dict)
    chain_predicted_refresh_s: float | None = None  # a view over views: a refresh of it and of the views it reads, now
    chain_deadline_record: Mapping[str, Any] = field(default_factory=dict)  # those chains' refreshes against its deadline
    running: str | None = None  # the run holding the view, as a line
    holder: str | None = None  # its host:pid
    run_id: str | None = None
    heartbeat_age_s: float | None = None  # by the observer's clock against the log commit of its last heartbeat
    lease_s: float | None = None
    claim_lapsed: bool | None = None

    @property
    def within_deadline(self) -> bool | None:
        """Whether a refresh now is predicted to finish within the deadline (None: never run)."""
        return None if self.predicted_refresh_s is None else self.predicted_refresh_s <= self.deadline_s

    @classmethod
    def of(cls, entry: Mapping[str, Any]) -> ViewStatus:
        """From ``lakeivm.run.status.status``'s entry of one view."""
        known = {k: v for k, v in entry.items() if k in cls.__dataclass_fields__}
        for key in ("upstreams", "waiting_for"):
            if key in known:
                known[key] = tuple(known[key])
        return cls(**known)


class View:
    """One view of a lake: ``refresh``, ``read``, ``status``, ``explain``, ``audit``."""

    def __init__(self, views: Views, spec: ViewSpec) -> None:
        self._views, self.spec = views, spec

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def lake(self) -> Lake:
        return self._views.lake

    def __repr__(self) -> str:
        return f"View({self.name!r})"

    def refresh(self, mode: str = "refresh", progress: Callable[[str], None] = lambda line: None) -> LogRow | None:
        """One maintenance run; its committed log row, or None when there was nothing to apply.

        ``mode``: ``refresh`` (default: every pending change applied now, the views it reads first),
        ``tick`` (a scheduled run: the planner batches or applies, to keep a refresh within the
        deadline) or ``rebuild`` (from snapshots). ``progress`` gets the run's progress lines."""
        from lakeivm.run.engine import run_view

        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        return run_view(self._views.lake, self.spec, mode=mode, progress=progress)

    def read(self, latest: bool = False) -> DataFrame:
        """The view's rows as of its last consistent run (``latest``: its newest, possibly asymmetric, run)."""
        from lakeivm.run.reading import view_snapshot

        return view_snapshot(self._views.lake, self.spec, latest)

    def status(self) -> ViewStatus:
        """The view's freshness (``ViewStatus``)."""
        return self._views.status([self.name])[0]

    def explain(self) -> str:
        """How the view is maintained: incremental or full and why, its kind, and the kind's plan."""
        from lakeivm.run.explain import explain

        return explain(self._views.lake, self.spec)

    def audit(self) -> Audit:
        """The view (its newest committed run) against its SQL recomputed by Spark at that run's watermarks."""
        from lakeivm.run.audit import audit

        return audit(self._views.lake, self.spec)


class Views(Mapping[str, View]):
    """The views of a lake (their specs from a folder), by name. Open with ``Views.open``."""

    def __init__(self, lake: Lake, specs: Specs, settings: Settings) -> None:
        self.lake, self.specs, self.settings = lake, specs, settings

    @classmethod
    def open(cls, spark: SparkSession | None = None, *, lake: str | None = None, views: str | None = None,
             settings: Settings | None = None, specs: Iterable[ViewSpec] | None = None) -> Views:
        """The lake at ``lake`` and the view specs in the folder ``views`` (each default from the
        settings: LAKEIVM_LAKE, LAKEIVM_VIEWS, ``lakeivm.toml``). ``spark``: the session to run on;
        without one the settings' session (a Spark Connect server, or local Spark) is made when a
        run first needs it -- a refresh with nothing to apply makes none. A spec file that does not
        load is left out and listed in ``broken``. ``specs``: the views as ``ViewSpec`` records
        (``lakeivm.catalog.registry.spec_from_dict``) instead of a folder's, e.g. a benchmark's variants."""
        from lakeivm.store.lake import open_lake
        from lakeivm.spec import Specs
        from lakeivm.catalog.spec_cache import cached_specs

        if specs is not None and views is not None:
            raise ValueError("Views.open: give a views folder or specs, not both")
        settings = settings or load_settings()
        settings = settings.with_(**{k: v for k, v in (("lake", lake), ("views", views)) if v is not None})
        chosen = Specs({spec.name: spec for spec in specs}) if specs is not None else cached_specs(settings.views, settings.lake)
        return cls(open_lake(spark, settings), chosen, settings)

    def __getitem__(self, name: str) -> View:
        from lakeivm.spec import find_spec

        return View(self, find_spec(self.specs, name))

    def __iter__(self) -> Iterator[str]:
        return iter(self.specs)

    def __len__(self) -> int:
        return len(self.specs)

    @property
    def broken(self) -> tuple:
        """The spec files that do not load (each with its path and problem)."""
        return tuple(getattr(self.specs, "broken", ()))

    def refresh(self, names: list[str] | None = None, mode: str = "refresh",
                progress: Callable[[str], None] = lambda line: None) -> dict[str, LogRow | None]:
        """One run of each view (of ``names``, default all) and of the views they read, each once,
        upstreams first, in this process: a change several of them read is read once. {view: its
        committed log row, None when it had nothing to apply}; ``mode`` as ``View.refresh``'s."""
        from lakeivm.run.engine import run_views
        from lakeivm.spec import find_spec

        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        chosen = [find_spec(self.specs, name) for name in (names if names is not None else list(self.specs))]
        return run_views(self.lake, chosen, mode=mode, progress=progress)

    def status(self, names: list[str] | None = None) -> list[ViewStatus]:
        """Each view's freshness (of ``names``, default all), in the folder's order."""
        from lakeivm.run.status import status
        from lakeivm.spec import find_spec

        chosen = {name: find_spec(self.specs, name) for name in (names if names is not None else list(self.specs))}
        return [ViewStatus.of(entry) for entry in status(self.lake, chosen, self.settings.lease_seconds)]
