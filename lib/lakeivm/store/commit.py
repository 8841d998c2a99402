"""The commit protocol (docs/design/run.md#1-claim, #6-commit): the lease and the maintenance log.

A run writes its state tables first and appends its log row last: the committed log row -- new
watermarks and the version of every state table -- is the commit point. Recovery restores every
state table to the version the last committed row names (``lakeivm.run.recovery``), so a run that
crashed after any write leaves the view as if it had not run, and the rerun gives the crash-free result.
"""
from __future__ import annotations

import json
import math
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

from lakeivm.store import storage, system_tables
from lakeivm.config import LEASE_SECONDS
from lakeivm.errors import LeaseHeld, LeaseLost, StateError
from lakeivm.processes import alive
from lakeivm.store.lake import Lake

RUNNING = "running"  # the status of a claim row
BROKEN = "broken"  # the status of the row ``lakeivm unlock`` ends a claim with (``unlock``)
_HELD: set[str] = set()  # run ids of the claims this process holds now


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
    chain_seconds: float | None = None  # a run after the views it reads ran first: the chain's seconds, its own included
    chain_predicted_seconds: float | None = None  # the chain planner's prediction of them (``run.chains``)
    chain_deadline_met: bool | None = None  # an on-demand refresh: whether the chain finished within the view's deadline
    plan: str = ""
    message: str = ""
    fingerprint: str | None = None  # the view definition's (lakeivm.fingerprint); None in rows of older lakes
    table_ids: Mapping[str, str] = field(default_factory=dict)  # each base table's Delta id at its watermark (storage.table_id)
    deployment: str | None = None  # where the run ran: connect, local or cluster (cost models are per deployment)
    holder: str | None = None  # host:pid of the run (claim rows; see Lease)
    lease_expires: datetime | None = None  # when a claim row's heartbeat lapses, by the claimant's clock (see heartbeat)
    log_version: int | None = None  # the log version a row appended through a Lease is (its commit: see heartbeat)


def append_log(lake: Lake, row: LogRow) -> None:
    """Append ``row`` to ``_system/log`` unfenced (a blind append; runs append through their Lease)."""
    key = ("log", row.view)
    if key in lake.cache:
        view_log(lake, row.view)  # bring the cached rows up to the log's head first
    _append_row(lake, row)


def _append_row(lake: Lake, row: LogRow, after: int | None = None) -> bool:
    """Append ``row`` (fenced at version ``after`` if given: see system_tables.append); whether it was."""
    head = system_tables.append(lake.log_path, "log.json", [row.__dict__], after=after)
    if head is None:
        return False
    key = ("log", row.view)
    cached = lake.cache.get(key)
    if cached and head == cached[0] + 1:  # ours is the only commit since: extend the cached rows
        lake.cache[key] = (head, sorted([*cached[1], _as_read(row)], key=_run_order))
    return True


def log_rows(lake: Lake, view: str, status: str | None = "committed") -> list[LogRow]:
    """The view's log rows in run order (only committed ones by default)."""
    return [r for r in view_log(lake, view) if not status or r.status == status]


def view_log(lake: Lake, view: str, head: int | None = None) -> list[LogRow]:
    """All of ``view``'s log rows, oldest first: read once per Lake, then kept current.

    The cached rows stay valid at a newer log version when every commit in between only appended
    rows of other views (read off the commit files' column statistics) or compacted files (the same
    rows); a run's own append extends them (``append_log``). Anything else -- a missing file, no
    statistics, a delete -- re-reads.
    """
    key, head = ("log", view), lake.head_version(lake.log_path) if head is None else head
    cached = lake.cache.get(key)
    if cached and cached[0] < head and _only_other_views(lake, view, cached[0], head):
        cached = lake.cache[key] = (head, cached[1])
    if not cached or cached[0] != head:
        rows = sorted((to_row(r) for r in system_tables.read(lake.log_path, [("view", "=", view)], version=head)), key=_run_order)
        cached = lake.cache[key] = (head, rows)
    return cached[1]


def _run_order(row: LogRow) -> tuple:
    """Runs by seq; within a run its claim and heartbeats (oldest first: in log order where known), then its last row."""
    return row.seq, row.status != RUNNING, -1 if row.log_version is None else row.log_version, row.lease_expires or datetime.min


def _only_other_views(lake: Lake, view: str, after: int, upto: int) -> bool:
    """Whether log commits ``after``+1..``upto`` are blind appends of files holding no row of ``view``,
    or rewrite files without changing their rows (a compaction: every action ``dataChange: false``)."""
    for version in range(after + 1, upto + 1):
        actions = storage.commit_actions(lake.log_path, version)
        if actions is None:
            return False
        for action in actions:
            if "commitInfo" in action or _rows_unchanged(action):
                continue
            stats = json.loads(action["add"].get("stats") or "{}") if set(action) == {"add"} else {}
            low, high = stats.get("minValues", {}).get("view"), stats.get("maxValues", {}).get("view")
            if low is None or high is None or low <= view <= high:
                return False
    return True


def _rows_unchanged(action: Mapping[str, Any]) -> bool:
    """A file added or removed with ``dataChange: false``: Delta's mark of a rewrite of the same rows."""
    body = action.get("add") or action.get("remove")
    return len(action) == 1 and isinstance(body, Mapping) and body.get("dataChange") is False


def _as_read(row: LogRow) -> LogRow:
    """``row`` as reading it back from the log gives it (timestamps naive, in local time)."""
    naive = {k: datetime.fromtimestamp(getattr(row, k).timestamp()) for k in ("started_at", "finished_at", "lease_expires")
             if getattr(row, k) is not None}
    return to_row({**row.__dict__, **naive})


def record_costs(lake: Lake, view: str, models: Mapping[str, Any]) -> None:
    """Append calibrated cost models {table: ``planning.costs.Calibration``} to ``_system/costs``."""
    now = datetime.now(timezone.utc)
    system_tables.append(lake.costs_path, "costs.json", [
        {"view": view, "table": table, **model._asdict(), "updated_at": now} for table, model in models.items()])


def calibrated_costs(lake: Lake, view: str) -> dict[str, Any]:
    """{table: cost function} of the newest calibration of ``view`` in ``_system/costs`` (a line, or
    a line per read path: ``planning.costs.Calibration.cost``)."""
    from lakeivm.planning.costs import Calibration

    key = ("costs", lake.head_version(lake.costs_path))
    if key not in lake.cache:  # one read for every view (a chain plans several): the table holds a few rows per view
        lake.cache[key] = sorted(system_tables.read(lake.costs_path), key=lambda r: r["updated_at"])
    return {r["table"]: Calibration(**{f: r[f] for f in Calibration._fields if r.get(f) is not None}).cost()
            for r in lake.cache[key] if r["view"] == view}


def last_committed(lake: Lake, view: str, consistent: bool = False) -> LogRow | None:
    """The newest committed run (optionally: whose sources were all brought to one pin)."""
    rows = [r for r in log_rows(lake, view) if r.consistent or not consistent]
    return rows[-1] if rows else None


def required_run(lake: Lake, view: str, consistent: bool = False, purpose: str = "yet") -> LogRow:
    """``last_committed``, or a StateError saying the view has no such run (``purpose``: "to audit", ...)
    and how to make one."""
    row = last_committed(lake, view, consistent)
    if row is None:
        raise StateError(f"view {view!r} has no {'consistent' if consistent else 'committed'} run {purpose}; "
                         f"run `lakeivm refresh {view}`.")
    return row


def next_seq(rows: list[LogRow]) -> int:
    """The sequence number of the run after ``rows`` (all of a view's rows, failed ones too)."""
    return max((r.seq for r in rows), default=0) + 1


def last_of(rows: list[LogRow]) -> LogRow | None:
    """The newest committed row of ``rows``."""
    committed = [r for r in rows if r.status == "committed"]
    return committed[-1] if committed else None


class Lease:
    """A run's claim on its view: one run per view at a time, decided by the log itself.

    A claim is a ``running`` log row with the run's ``seq``; the run's last row (committed, failed or
    released) ends it, or a ``broken`` row that ``lakeivm unlock`` appends (``unlock``). Every row a
    run appends -- claim, heartbeat, commit -- is *fenced*: it is appended as log version v+1 only
    if, at version v, the view's state allows it (no live claim to take; still this run's claim), and
    Delta's put-if-absent of the commit file lets exactly one of two racing appends have v+1
    (``system_tables.append(after=v)``), so exactly one acquirer wins and a run whose claim was taken
    over or broken cannot commit. A heartbeat thread renews the claim every quarter of ``seconds``; a
    claim whose newest heartbeat is older than its lease (``heartbeat``: aged by the store's time of
    its log commit, not by a deadline the claimant's clock wrote), or whose process is gone from this
    host, is taken over (and the taker's recovery restores the state it left).
    """

    def __init__(self, lake: Lake, view: str, mode: str, seconds: float = LEASE_SECONDS) -> None:
        self.lake, self.view, self.mode, self.seconds = lake, view, mode, seconds
        self.run_id = uuid.uuid4().hex
        self.holder = f"{socket.gethostname()}:{os.getpid()}"
        self.seq = 0
        self.started = datetime.now(timezone.utc)
        self.history: list[LogRow] = []  # the view's rows when the claim was made, the claim included
        self.lost = threading.Event()
        self.ended = False
        self._lost_why: LeaseLost | None = None  # what the heartbeat that found the claim gone saw
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._beat: threading.Thread | None = None

    def acquire(self) -> None:
        """Append the claim, or raise LeaseHeld naming the run that holds the view."""
        def free(rows: list[LogRow]) -> LogRow:
            current = holder(rows)
            if current is not None and not stale(self.lake, current, self.seconds):
                age, lapses = heartbeat(self.lake, current, self.seconds)
                raise LeaseHeld(
                    f"view {self.view!r} is being maintained by another run ({describe(current)}, since "
                    f"{current.started_at:%Y-%m-%d %H:%M:%S}; its last heartbeat {ago(age)}). Wait for it to "
                    f"finish: a run that died is taken over once its heartbeat is {lapses:.0f} s old (lease_seconds), "
                    f"or at once on its own host; if it is dead or hung, `lakeivm unlock {self.view} --force` ends its claim now.")
            self.seq = next_seq(rows)
            return self._row(RUNNING)

        _HELD.add(self.run_id)  # before the claim is in the log: a thread of this process must not take it for a dead one
        try:
            rows, claim = self._append(free)
        except BaseException:
            _HELD.discard(self.run_id)
            raise
        self.history = [*rows, _as_read(claim)]
        self._beat = threading.Thread(target=self._heartbeat, name=f"lakeivm-lease-{self.view}", daemon=True)
        self._beat.start()

    def check(self) -> None:
        """Raise LeaseLost if a heartbeat found the claim taken over or broken (cheap: a flag)."""
        if self.lost.is_set():
            raise self._lost_why or self._lost_error([])

    def commit(self, row: LogRow) -> None:
        """Append the run's last row (committed or failed) if the run still holds its claim."""
        self.append(row)
        self.ended = True

    def append(self, row: LogRow) -> None:
        """Append a row on the run's behalf (a rolled-forward commit) while the run holds its claim."""
        self._append(lambda rows: self._held(rows, row))

    def release(self, status: str = "released", message: str = "") -> None:
        """Stop the heartbeat and, unless the run committed or lost its claim, end the claim with a
        ``status`` row (nothing to do, or the run failed)."""
        self.stop()
        if self.ended or self.lost.is_set():
            return
        try:
            self.commit(self._row(status, message))
        except LeaseLost:
            pass

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.seconds / 4):
            try:
                self._append(lambda rows: self._held(rows, self._row(RUNNING)))
            except LeaseLost:
                return
            except Exception:  # a transient storage error: the next beat tries again, well inside the lease
                continue

    def _append(self, decide: Callable[[list[LogRow]], LogRow]) -> tuple[list[LogRow], LogRow]:
        """Append ``decide(rows)`` fenced (``_append_fenced``), one append of this run at a time."""
        with self._lock:
            rows, row = _append_fenced(self.lake, self.view, decide, max(60.0, self.seconds))
        assert row is not None  # a run's decisions append or raise
        return rows, row

    def _held(self, rows: list[LogRow], row: LogRow) -> LogRow:
        current = holder(rows)
        if current is None or current.run_id != self.run_id:
            self._lost_why = self._lost_error(rows)
            self.lost.set()
            raise self._lost_why
        return row

    def _lost_error(self, rows: list[LogRow]) -> LeaseLost:
        """Why the run no longer holds its claim: taken over after it lapsed, or broken (``unlock``)."""
        current, broken = holder(rows), [r for r in rows if r.seq == self.seq and r.status == BROKEN]
        if broken:
            how = f"was broken by {broken[-1].holder} (`lakeivm unlock`)"
        else:
            how = f"lapsed and {describe(current) if current else 'another run'} took the view over"
        return LeaseLost(f"view {self.view!r}: this run's claim (run {self.run_id[:8]}, #{self.seq}) {how}; this run "
                         "commits nothing, and the state it wrote is undone by the next run's recovery. Nothing to "
                         "fix: refresh again if needed.")

    def _row(self, status: str, message: str = "") -> LogRow:
        now = datetime.now(timezone.utc)
        return LogRow(view=self.view, seq=self.seq, status=status, mode=self.mode, kind="", pins={}, watermarks={},
                      state_versions={}, consistent=False, run_id=self.run_id, holder=self.holder, message=message,
                      started_at=self.started, finished_at=now, lease_expires=datetime.fromtimestamp(now.timestamp() + self.seconds, timezone.utc))

    def stop(self) -> None:
        _HELD.discard(self.run_id)
        self._stop.set()
        if self._beat is not None:
            self._beat.join()


@contextmanager
def lease(lake: Lake, view: str, mode: str = "refresh", seconds: float = LEASE_SECONDS) -> Iterator[Lease]:
    """Hold ``view``'s claim for a run (see Lease); the run appends its last row with
    ``Lease.commit``; leaving without one releases the claim (as ``failed`` on an error)."""
    claim = Lease(lake, view, mode, seconds)
    claim.acquire()
    try:
        yield claim
    except BaseException as err:  # a lost claim appends nothing (release knows)
        claim.release("failed", f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:500])
        raise
    claim.release()


def unlock(lake: Lake, view: str, force: bool = False, seconds: float = LEASE_SECONDS) -> tuple[LogRow, float] | None:
    """End ``view``'s claim (``lakeivm unlock``): a ``broken`` row of the claiming run, appended fenced
    like a run's rows, frees the view. The claiming run, if it still runs, finds its claim gone at its
    next heartbeat or commit (LeaseLost) and commits nothing; the next run's recovery undoes the state
    it wrote. Refused (LeaseHeld) while the claim's heartbeat is fresh (``stale``), unless ``force``.
    Returns the claim that was ended and its heartbeat's age in seconds; None if no run held the view.
    """
    me, ended = f"{socket.gethostname()}:{os.getpid()}", []

    def end(rows: list[LogRow]) -> LogRow | None:
        current = holder(rows)
        if current is None:
            return None
        age, lapses = heartbeat(lake, current, seconds)
        if not force and not stale(lake, current, seconds):
            raise LeaseHeld(f"view {view!r} is held by {describe(current)}, whose last heartbeat was {ago(age)} "
                            f"(fresh: its claim lapses at {lapses:.0f} s), so that run is probably alive; wait for it, or "
                            f"end its claim anyway with `lakeivm unlock {view} --force` (that run then commits nothing).")
        ended[:] = [(current, age)]
        return replace(current, status=BROKEN, holder=me, finished_at=datetime.now(timezone.utc), lease_expires=None,
                       message=f"claim broken by {me} (lakeivm unlock{' --force' if force else ''}); its last heartbeat "
                               f"was {ago(age)}")

    _, row = _append_fenced(lake, view, end, max(60.0, seconds))
    return ended[0] if row is not None else None


def holder(rows: list[LogRow]) -> LogRow | None:
    """The newest heartbeat of the run holding the view, or None if the view is free: the run of the
    highest seq, unless it has appended its last row (or its claim was broken)."""
    if not rows:
        return None
    top = max(r.seq for r in rows)
    newest = [r for r in rows if r.seq == top]
    if any(r.status != RUNNING for r in newest):
        return None
    return max(newest, key=_run_order)


def heartbeat(lake: Lake, claim: LogRow, seconds: float = LEASE_SECONDS) -> tuple[float, float]:
    """(age, lapses at): the seconds since ``claim`` (a holder's newest row) was appended, and the age
    past which it lapses.

    The age is the observer's clock against the store's time of the log commit the row is
    (``log_version``: the modification time of its ``_delta_log`` file, as the store reports it),
    never a time the claimant's clock wrote, so a claimant whose clock runs ahead cannot hold the view
    longer; it assumes the observer's clock and the store's agree to well within the lease. A row of
    an older lakeivm (no ``log_version``) is aged by its own ``finished_at``; a commit file that is
    gone (cleaned up long after) makes the age infinite. The claim lapses past the longer of the
    observer's ``seconds`` and the claimant's own lease (``lease_expires - finished_at``: a duration
    read on one clock, which a skew cancels), so differing lease settings never take over a live run.
    """
    if claim.log_version is not None:
        written = storage.modified_at(f"{lake.log_path}/_delta_log/{claim.log_version:020d}.json")
    else:
        written = claim.finished_at.timestamp()
    age = math.inf if written is None else max(0.0, time.time() - written)
    declared = (claim.lease_expires - claim.finished_at).total_seconds() if claim.lease_expires else 0.0
    return age, max(seconds, declared)


def stale(lake: Lake, claim: LogRow, seconds: float = LEASE_SECONDS) -> bool:
    """Whether a claim may be taken over: its heartbeat is older than its lease (``heartbeat``), or its
    process is gone from this host (or is this process, which no longer holds it)."""
    age, lapses = heartbeat(lake, claim, seconds)
    if age > lapses:
        return True
    host, _, pid = (claim.holder or "").rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    return claim.run_id not in _HELD if int(pid) == os.getpid() else not alive(int(pid))


def ago(age: float) -> str:
    """A heartbeat's age (``heartbeat``) as messages say it."""
    return f"{age:.0f} s ago" if math.isfinite(age) else "long ago (its log commit is gone)"


def describe(claim: LogRow) -> str:
    """A claim as messages name it: its run, seq and mode, and its host:pid."""
    return f"run {claim.run_id[:8]} (#{claim.seq} {claim.mode}) on {claim.holder}"


def _append_fenced(lake: Lake, view: str, decide: Callable[[list[LogRow]], LogRow | None],
                   patience: float) -> tuple[list[LogRow], LogRow | None]:
    """Append ``decide(rows)`` as version v+1 of the log (its ``log_version``), rows being the view's
    rows at version v; retried (re-read, re-decided) while other appends take v+1 first. Nothing is
    appended if ``decide`` returns None. Returns the rows decided on and the row appended."""
    deadline = time.monotonic() + patience
    while True:
        version = lake.head_version(lake.log_path)
        rows = view_log(lake, view, version)
        row = decide(rows)
        if row is None:
            return rows, None
        row = replace(row, log_version=version + 1)
        if _append_row(lake, row, after=version):
            return rows, row
        if time.monotonic() > deadline:
            raise StateError(f"{lake.log_path}: could not append to the log for {patience:.0f} s (other "
                             "runs kept committing first); try again.")
        time.sleep(random.uniform(0.002, 0.03))


def to_row(d: dict[str, Any]) -> LogRow:
    """A log row from its columns; a column this version does not know (a newer lakeivm wrote it) is left out."""
    d = {k: v for k, v in d.items() if k in LogRow.__dataclass_fields__}
    d["applied"] = tuple(d.get("applied") or ())
    for key in ("pins", "watermarks", "state_versions", "delta_rows", "table_seconds", "pending_rows", "table_ids"):
        d[key] = dict(d.get(key) or {})
    return LogRow(**d)
