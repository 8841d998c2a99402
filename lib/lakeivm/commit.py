"""The commit protocol (ARCHITECTURE §4.1, §4.5): lease, maintenance log, recovery.

A run writes its state tables first and appends its log row last: the committed log row -- new
watermarks and the version of every state table -- is the commit point. Recovery restores every
state table to the version the last committed row names, so a run that crashed after any write
leaves the view as if it had not run, and the rerun gives the crash-free result.
"""
from __future__ import annotations

import json
import os
import socket
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from lakeivm import storage, system_tables
from lakeivm.errors import LeaseHeld, StateError
from lakeivm.processes import alive
from lakeivm.lake import Lake

LEASE_SECONDS = 3600.0


@dataclass(frozen=True)
class LogRow:
    """One maintenance run, as appended to ``_system/log``."""

    view: str
    seq: int
    status: str
    mode: str
    kind: str
    pins: Mapping[str, int]
    watermarks: Mapping[str, int]
    state_versions: Mapping[str, int]
    consistent: bool
    started_at: datetime = field(default_factory=lambda: datetime.now(timezone.utc))
    finished_at: datetime = field(default_factory=lambda: datetime.now(timezone.utc))
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    applied: tuple[str, ...] = ()
    delta_rows: Mapping[str, int] = field(default_factory=dict)
    table_seconds: Mapping[str, float] = field(default_factory=dict)
    pending_rows: Mapping[str, int] = field(default_factory=dict)
    result_rows: int | None = None
    seconds: float = 0.0
    predicted_seconds: float | None = None
    deadline_s: float | None = None
    deadline_met: bool | None = None
    plan: str = ""
    message: str = ""
    fingerprint: str | None = None  # the view definition's (lakeivm.fingerprint); None in rows of older lakes
    deployment: str | None = None  # where the run ran: connect, local or cluster (cost models are per deployment)


def append_log(lake: Lake, row: LogRow) -> None:
    """Append ``row`` to ``_system/log`` (a blind append: concurrent appends never conflict)."""
    key = ("log", row.view)
    if key in lake.cache:
        _view_log(lake, row.view)  # bring the cached rows up to the log's head first
    head = system_tables.append(lake.log_path, "log.json", [row.__dict__])
    cached = lake.cache.get(key)
    if cached and head == cached[0] + 1:  # ours is the only commit since: extend the cached rows
        lake.cache[key] = (head, [*cached[1], _as_read(row)])


def log_rows(lake: Lake, view: str, status: str | None = "committed") -> list[LogRow]:
    """The view's log rows in run order (only committed ones by default)."""
    return [r for r in _view_log(lake, view) if not status or r.status == status]


def _view_log(lake: Lake, view: str) -> list[LogRow]:
    """All of ``view``'s log rows, oldest first: read once per Lake, then kept current.

    The cached rows stay valid at a newer log version when every commit in between only appended
    rows of other views (read off the commit files' column statistics); a run's own append extends
    them (``append_log``). Anything else -- a missing file, no statistics, an OPTIMIZE -- re-reads.
    """
    key, head = ("log", view), lake.head_version(lake.log_path)
    cached = lake.cache.get(key)
    if cached and cached[0] < head and _only_other_views(lake, view, cached[0], head):
        cached = lake.cache[key] = (head, cached[1])
    if not cached or cached[0] != head:
        rows = sorted(system_tables.read(lake.log_path, [("view", "=", view)]), key=lambda r: r["seq"])
        cached = lake.cache[key] = (head, [_to_row(r) for r in rows])
    return cached[1]


def _only_other_views(lake: Lake, view: str, after: int, upto: int) -> bool:
    """Whether log commits ``after``+1..``upto`` are blind appends of files holding no row of ``view``."""
    for version in range(after + 1, upto + 1):
        actions = storage.commit_actions(lake.log_path, version)
        if actions is None:
            return False
        for action in actions:
            if "commitInfo" in action:
                continue
            stats = json.loads(action["add"].get("stats") or "{}") if set(action) == {"add"} else {}
            low, high = stats.get("minValues", {}).get("view"), stats.get("maxValues", {}).get("view")
            if low is None or high is None or low <= view <= high:
                return False
    return True


def _as_read(row: LogRow) -> LogRow:
    """``row`` as reading it back from the log gives it (timestamps naive, in local time)."""
    naive = {k: datetime.fromtimestamp(getattr(row, k).timestamp()) for k in ("started_at", "finished_at")}
    return _to_row({**row.__dict__, **naive})


def record_costs(lake: Lake, view: str, models: Mapping[str, tuple[float, float, int]]) -> None:
    """Append calibrated cost models {table: (a, b, samples)} to ``_system/costs``."""
    now = datetime.now(timezone.utc)
    system_tables.append(lake.costs_path, "costs.json", [
        {"view": view, "table": table, "a": float(a), "b": float(b), "samples": int(n), "updated_at": now}
        for table, (a, b, n) in models.items()])


def calibrated_costs(lake: Lake, view: str) -> dict[str, Any]:
    """{table: LinearCost} of the newest calibration of ``view`` in ``_system/costs``."""
    from lakeivm.planning.costs import LinearCost

    key = ("costs", view, lake.head_version(lake.costs_path))
    if key not in lake.cache:
        rows = sorted(system_tables.read(lake.costs_path, [("view", "=", view)]), key=lambda r: r["updated_at"])
        lake.cache[key] = {r["table"]: LinearCost(r["a"], r["b"]) for r in rows}
    return lake.cache[key]


def last_committed(lake: Lake, view: str, consistent: bool = False) -> LogRow | None:
    """The newest committed run (optionally: whose sources were all brought to one pin)."""
    rows = [r for r in log_rows(lake, view) if r.consistent or not consistent]
    return rows[-1] if rows else None


def next_seq(rows: list[LogRow]) -> int:
    """The sequence number of the run after ``rows`` (all of a view's rows, failed ones too)."""
    return max((r.seq for r in rows), default=0) + 1


def last_of(rows: list[LogRow]) -> LogRow | None:
    """The newest committed row of ``rows``."""
    committed = [r for r in rows if r.status == "committed"]
    return committed[-1] if committed else None


def recover(lake: Lake, last: LogRow | None, state_paths: Mapping[str, str]) -> list[str]:
    """Restore every state table written after ``last`` committed to the version ``last`` names.

    Returns what was restored (for the log). With no committed run, partial state is deleted.
    """
    restored = []
    for name, path in state_paths.items():
        if not lake.is_delta(path):
            continue
        if last is None or name not in last.state_versions:
            lake.delete(path)
            restored.append(f"{name}: removed uncommitted state")
            continue
        logged, head = last.state_versions[name], lake.head_version(path)
        if head < logged:
            raise StateError(
                f"state table {path} is at version {head}, behind the log's {logged}: it was modified "
                "outside lakeivm. Rebuild the view (lakeivm refresh --rebuild)."
            )
        if head > logged:
            lake.spark.sql(f"RESTORE TABLE delta.`{path}` TO VERSION AS OF {logged}")
            restored.append(f"{name}: restored {head} -> {logged}")
    return restored


@contextmanager
def lease(lake: Lake, view: str, seconds: float = LEASE_SECONDS) -> Iterator[dict[str, Any]]:
    """Hold the view's lease for the duration of a run: one run per view at a time.

    The lease is a file created atomically (create-if-absent) under ``_system/leases``. A lease
    whose holder died on this host, or that expired, is taken over.
    """
    path = lake.lease_path(view)
    me = {"host": socket.gethostname(), "pid": os.getpid(), "token": uuid.uuid4().hex,
          "acquired": time.time(), "expires": time.time() + seconds}
    if not storage.create_exclusive(path, json.dumps(me)):
        holder = _read(path)
        if holder and not _stale(holder):
            raise LeaseHeld(
                f"view {view!r} is being maintained by another run (host {holder.get('host')}, pid "
                f"{holder.get('pid')}, since {datetime.fromtimestamp(holder.get('acquired', 0), timezone.utc):%Y-%m-%d %H:%M:%S} UTC). "
                "Wait for it to finish; if it died elsewhere, delete "
                f"{lake.lease_path(view)} after it expires."
            )
        storage.delete_file(path)
        if not storage.create_exclusive(path, json.dumps(me)):
            raise LeaseHeld(f"view {view!r}: another run took the lease first; try again.")
    try:
        yield me
    finally:
        holder = _read(path)
        if holder and holder.get("token") == me["token"]:
            storage.delete_file(path)


def _read(path: str) -> dict[str, Any] | None:
    text = storage.read_text(path)
    if text is None:
        return None
    try:
        return json.loads(text or "{}")
    except ValueError:
        return {}


def _stale(holder: Mapping[str, Any]) -> bool:
    if holder.get("expires", 0) < time.time():
        return True
    if holder.get("host") == socket.gethostname() and holder.get("pid") != os.getpid():
        return not alive(int(holder.get("pid", 0)))
    return False


def _to_row(d: dict[str, Any]) -> LogRow:
    d = dict(d)
    d["applied"] = tuple(d.get("applied") or ())
    for key in ("pins", "watermarks", "state_versions", "delta_rows", "table_seconds", "pending_rows"):
        d[key] = dict(d.get(key) or {})
    return LogRow(**d)
