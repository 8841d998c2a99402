"""Every threshold that decides whether work runs in the calling process or on Spark: ``Limits``.

Below each limit a run reads, nets, merges or rewrites in its own process (delta-rs, Arrow, DuckDB:
``docs/design/local-fast-paths.md``), above it Spark does; a table the gate refuses
(``lakeivm.store.fastpath``) goes through Spark whatever its size. A lake's limits are its settings'
(``[limits]`` in lakeivm.toml, ``LAKEIVM_LIMIT_<NAME>``: ``lakeivm.config``), read as
``lake.limits`` when a path is chosen. Example::

    >>> Limits().small_delta_rows
    200000
    >>> Limits.everything_on_spark().merge_rows
    0
    >>> limits_from({"merge_rows": 5}, {"LAKEIVM_LIMIT_MERGE_ROWS": "7"}, "lakeivm.toml").merge_rows
    7
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

ENV_PREFIX = "LAKEIVM_LIMIT_"  # + the field's name upper-cased: LAKEIVM_LIMIT_SMALL_DELTA_ROWS


@dataclass(frozen=True)
class Limits:
    """Row counts up to which a step runs in the calling process; a larger input goes to Spark.

    Each is "at most this many rows", 0 or more: 0 leaves only empty inputs local."""

    small_delta_rows: int = 200_000  # a change range of at most this many change-feed rows is read and netted locally (changes)
    snapshot_rows: int = 20_000  # a base table this small is read by delta-rs for a run (views.base.Context.snapshot)
    rewrite_rows: int = 20_000  # a result or state table this small is rewritten whole by delta-rs rather than MERGEd (views.state)
    merge_rows: int = 200_000  # a MERGE source this small is merged, a recomputed result this small written, by delta-rs in the run's process
    local_merge_rows: int = 1_000_000  # a larger state table a small delta changes is MERGEd by delta-rs in the run's process up to this size (such a table gets no deletion vectors, which delta-rs cannot write)
    local_state_rows: int = 1_000_000  # state a kind keeps on the driver (nested indexes, triangle relations) is read and rewritten whole locally
    difference_rows: int = 1_000_000  # a view's result this small at both runs a reader compares is diffed in the reader's process (sources.upstream)
    reduced_rows: int = 1_000_000  # a delta term's relation reduced to the rows that can join a change this small is brought here (first_order)
    scan_rows: int = 50_000_000  # a larger table read by its keys is scanned by delta-rs with a key filter, up to this size
    driver_rows: int = 1_000_000  # changed keys per relation a triangle batch applies as SQL on the driver; more: a Spark rebuild
    broadcast_rows: int = 2_000_000  # a batch side this small is shipped to every Spark task (views.state.small_side)
    pandas_rows: int = 100_000  # a stored view this small is validated by Great Expectations' pandas engine (quality)

    def __post_init__(self) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"limit {item.name} must be a whole number of rows, 0 or more, got {value!r}")

    @classmethod
    def everything_on_spark(cls) -> Limits:
        """Every limit 0: each step with rows to work on runs on Spark, the paths a large lake takes."""
        return cls(**{item.name: 0 for item in fields(cls)})


def limits_from(table: Mapping[str, object], environ: Mapping[str, str], source: str) -> Limits:
    """The limits of a ``[limits]`` table of ``source`` (a lakeivm.toml) overridden by ``LAKEIVM_LIMIT_*``
    variables of ``environ``; an unknown name or a value that is no whole number is a ValueError naming it."""
    if not isinstance(table, Mapping):
        raise ValueError(f"limits in {source} must be a table ([limits], one row count per line), got {table!r}")
    known = [item.name for item in fields(Limits)]
    unknown = sorted(set(table) - set(known))
    if unknown:
        raise ValueError(f"{source}: unknown limit(s) {unknown} in [limits]; known: {known}")
    unknown = sorted(var for var in environ if var.startswith(ENV_PREFIX) and var[len(ENV_PREFIX):].lower() not in known)
    if unknown:
        raise ValueError(f"unknown limit variable(s) {unknown}; known: {[ENV_PREFIX + name.upper() for name in known]}")
    values = {name: (f"[limits] {name} in {source}", table[name]) for name in table}
    values.update({var[len(ENV_PREFIX):].lower(): (var, environ[var]) for var in environ if var.startswith(ENV_PREFIX) and environ[var]})
    return Limits(**{name: _rows(where, value) for name, (where, value) in values.items()})


def _rows(where: str, value: object) -> int:
    """A limit's value as a whole number of rows (from the environment it is a string: "20000", "20_000")."""
    rows = value if isinstance(value, int) and not isinstance(value, bool) else None
    if isinstance(value, str):
        try:
            rows = int(value)
        except ValueError:
            pass
    if rows is None or rows < 0:
        raise ValueError(f"{where} must be a whole number of rows, 0 or more, got {value!r}")
    return rows
