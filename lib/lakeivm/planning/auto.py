"""``refresh_policy: auto``: per run, the cheaper of incremental maintenance and a full recompute.

What Databricks' REFRESH POLICY AUTO and Snowflake's adaptive dynamic tables do, decided here from
the view's own maintenance log, never from a guess in code:

- **incremental**: the planner's prediction for the run (per-table cost models fitted to the
  view's incremental runs, plus their shared run seconds; ``lakeivm.planning.tick``). No switch is
  considered before one incremental run has been measured.
- **full**: the median seconds of the view's last full recomputes; before the first one, a
  *probe* -- the view's SQL timed on the run's snapshots, its rows written to a scratch table as a
  recompute writes its result, plus the run's own shared seconds less its state's flush -- or, before a probe, the seconds of the view's last build
  from snapshots. A build writes every state table, a recompute only the result, so the build
  over-estimates -- but by less than two runs differ: when it is at most ``BUILD_SWITCH`` of the
  incremental prediction auto switches at once; otherwise, when it is under ``PROBE_RATIO`` times it,
  an incremental run also probes a recompute once, to learn (TPC-H SF 1 Q9: its build took 2.64 s
  against 3.02 s predicted, auto switched, the recompute took 3.35 s and the rebuild back 2.87 s). The
  probe is stopped where a recompute could no longer make auto switch (``probe_limit``), so learning
  costs less than one incremental run's seconds. A stopped probe is logged as what it is, a lower
  bound (``PROBE_STOPPED``): auto never switches on one. The limit was this run's prediction's, and
  the next run's may be larger (more tables pending): the pipeline's customer view was probed under
  a 0.45 s prediction, stopped at 0.63 s, and recomputed the next batch against a 0.99 s prediction
  -- 1.6 s, and a 2.8 s rebuild back. Only where a prediction has grown past twice the bound
  (``PROBE_AGAIN``) does the probe run again: predictions drift by a tenth or two from run to run
  (TPC-H Q21's: 2.74, 3.03, 3.28 s), and a probe at each drift cost Q21 ~2.8 s a batch.

A full run leaves the incremental state behind (recovery removes it at the next run), so going
back costs a rebuild: from full, auto returns to incremental maintenance only if the rebuild plus
``HORIZON`` incremental runs cost less than ``HORIZON + 1`` recomputations. For the same reason it
leaves incremental maintenance only for a recompute predicted ``SWITCH_GAIN`` cheaper or more: a
smaller gain is within the predictions' noise (a probe writes to a new table, not over the result)
and may cost a full run and that rebuild for nothing.
"""
from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from lakeivm.store.commit import LogRow

FULL = "full"
HORIZON = 5  # runs a rebuild is amortized over when auto returns from full to incremental
PROBE = "(full)"  # the table_seconds key of a probe: the view's SQL timed, its rows written to a scratch table
PROBE_STOPPED = "(full, stopped)"  # ... of a probe stopped at its limit: a lower bound of a recompute's seconds
WHOLE_PROBE = "(whole)"  # ... of a split view's probe of its query as declared (``choose_whole``)
WHOLE_STOPPED = "(whole, stopped)"  # ... of such a probe stopped at its limit
PROBES = (PROBE, PROBE_STOPPED, WHOLE_PROBE, WHOLE_STOPPED)
FLUSH = "(flush)"  # ... and, in a probing run, of writing its incremental state: work a recompute does not do
PROBE_RATIO = 4.0  # a build this many times the incremental prediction or more: no probe (a recompute will not win)
BUILD_SWITCH = 0.5  # a build this share of the incremental prediction or less: switch without a probe
RECENT = 5  # full recomputations the full estimate is the median of
SWITCH_GAIN = 0.10  # the least share of the incremental prediction a recompute must save for auto to leave it
PROBE_AGAIN = 0.5  # a stopped probe's bound under this share of the prediction: probed again (a recompute may save half)
BUILDS = ("bootstrap", "rebuild")


class Estimate(NamedTuple):
    """A recompute's predicted seconds, where the figure comes from, and whether it is only a lower
    bound (a probe stopped at its limit)."""

    seconds: float
    source: str
    at_least: bool = False


@dataclass(frozen=True)
class Mode:
    """One run's choice: ``full`` (recompute) or not, and why (for the log row and ``lakeivm status``)."""

    full: bool
    reason: str
    probe: bool = False  # maintain incrementally, and time a recompute too (without writing it)
    limit: float | None = None  # a probe's seconds at most (``probe_limit``), where the caller cannot tell


def probe_limit(incremental_seconds: float) -> float:
    """The seconds a probe may run: past them a recompute would not save ``SWITCH_GAIN`` of the
    incremental prediction, so auto would not switch to it whatever the probe's end said."""
    return (1 - SWITCH_GAIN) * incremental_seconds


def full_seconds(history: Sequence[LogRow], kind: str) -> Estimate | None:
    """The predicted seconds of a full recompute of the view and where the figure comes from."""
    recomputes = [r.seconds for r in history if r.kind == FULL and r.mode not in BUILDS][-RECENT:]
    if recomputes:
        return Estimate(statistics.median(recomputes), f"median of its last {len(recomputes)} full recomputes")
    probes = [r for r in history if PROBE in r.table_seconds or PROBE_STOPPED in r.table_seconds]
    if probes:
        return _probed(probes[-1], PROBE, PROBE_STOPPED)
    builds = [r.seconds for r in history if r.kind in (kind, FULL) and r.mode in BUILDS]
    if builds:
        return Estimate(builds[-1], "its last build from snapshots")
    return None


def _probed(row: LogRow, key: str, stopped: str) -> Estimate:
    """A probe's estimate: its seconds plus the probing run's shared seconds less its state's flush --
    a recompute pays the run's fixed costs, not the MERGE of a large state (counted, it made a 0.6 s
    recompute look like 8 s); a lower bound where the probe was stopped."""
    probe = row.table_seconds.get(key, row.table_seconds.get(stopped, 0.0))
    shared = max(0.0, row.seconds - sum(row.table_seconds.values()))
    if key in row.table_seconds:
        return Estimate(probe + shared, f"a probe: its SQL {probe:.2f} s + a run's shared {shared:.2f} s")
    return Estimate(probe + shared, f"a probe stopped at {probe:.2f} s + a run's shared {shared:.2f} s", at_least=True)


def probe_key(whole: bool, stopped: bool) -> str:
    """The table_seconds key a probe is logged under: of the view's recompute or of its query as
    declared (``whole``), ran to its end or ``stopped`` at its limit."""
    return (WHOLE_STOPPED if stopped else WHOLE_PROBE) if whole else (PROBE_STOPPED if stopped else PROBE)


def probe_seconds(row: LogRow) -> float:
    """The seconds of a run's probes for auto (any of ``PROBES``): not maintenance."""
    return sum(row.table_seconds.get(key, 0.0) for key in PROBES)


def rebuild_seconds(history: Sequence[LogRow], kind: str) -> float | None:
    """The seconds of the view's last build of its incremental state."""
    builds = [r.seconds for r in history if r.kind == kind and r.mode in BUILDS]
    return builds[-1] if builds else None


def measured_incremental(history: Sequence[LogRow], kind: str) -> bool:
    """Whether an incremental run of ``kind`` that applied changes is in the history."""
    return any(r.kind == kind and r.mode not in BUILDS and r.table_seconds for r in history)


def choose_mode(history: Sequence[LogRow], kind: str, incremental_seconds: float | None, in_full: bool) -> Mode:
    """Full or incremental for this run. ``in_full``: the last committed run recomputed in full.

    ``incremental_seconds``: the planner's prediction for maintaining this run's changes incrementally.
    """
    full = full_seconds(history, kind)
    if incremental_seconds is None or full is None or not measured_incremental(history, kind):
        if in_full:
            return Mode(True, "auto: full (no incremental run measured to compare with)")
        return Mode(False, "auto: incremental (no incremental run measured yet)")
    seconds, source, at_least = full
    if not in_full and at_least:  # a probe stopped at its limit: a recompute costs more than that
        if seconds >= PROBE_AGAIN * incremental_seconds:
            return Mode(False, f"auto: incremental, predicted {incremental_seconds:.2f} s; a recompute takes more than "
                               f"{seconds:.2f} s ({source})")
        return Mode(False, f"auto: incremental, predicted {incremental_seconds:.2f} s; a recompute is probed again (the "
                           f"last probe stopped at {seconds:.2f} s, under {PROBE_AGAIN:g}x that)", probe=True)
    if not in_full:
        build = source.startswith("its last build")
        if seconds < (BUILD_SWITCH if build else 1 - SWITCH_GAIN) * incremental_seconds:
            return Mode(True, f"auto: full, predicted {seconds:.2f} s ({source}) < incremental {incremental_seconds:.2f} s")
        if build and seconds < PROBE_RATIO * incremental_seconds:  # an upper bound: learn
            return Mode(False, f"auto: incremental, predicted {incremental_seconds:.2f} s; a recompute is probed (its build "
                               f"took {seconds:.2f} s, under {PROBE_RATIO:g}x that)", probe=True)
        if seconds < incremental_seconds:
            return Mode(False, f"auto: incremental, predicted {incremental_seconds:.2f} s; full {seconds:.2f} s ({source}) "
                               f"saves under {SWITCH_GAIN:.0%}, not worth a switch and a rebuild back")
        return Mode(False, f"auto: incremental, predicted {incremental_seconds:.2f} s <= full {seconds:.2f} s ({source})")
    rebuild = rebuild_seconds(history, kind) or seconds
    back = rebuild + HORIZON * incremental_seconds
    if back < (HORIZON + 1) * seconds:
        return Mode(False, f"auto: back to incremental, a rebuild ({rebuild:.2f} s) + {HORIZON} incremental runs "
                           f"({incremental_seconds:.2f} s each) < {HORIZON + 1} full recomputes ({seconds:.2f} s each, {source})")
    return Mode(True, f"auto: full, predicted {seconds:.2f} s ({source}); incremental {incremental_seconds:.2f} s "
                      f"would not repay a rebuild ({rebuild:.2f} s) within {HORIZON} runs")


def maintaining_seconds(rows: Sequence[LogRow]) -> list[float]:
    """The seconds of a view's runs among ``rows`` that maintained it -- not its builds, not a tick
    that applied nothing -- each less the recompute it probed, if any: what ``choose_whole`` weighs."""
    return [r.seconds - probe_seconds(r) for r in rows if r.mode not in BUILDS and (r.applied or r.kind == FULL)]


def whole_probed(rows: Sequence[LogRow]) -> Estimate | None:
    """The seconds of a whole run of a split view as its last probe of the query as declared says
    (``WHOLE_PROBE``): the query's seconds, its rows written, plus the probing run's shared seconds
    (as ``full_seconds`` counts a probe), a lower bound where it was stopped; None without one."""
    probes = [r for r in rows if WHOLE_PROBE in r.table_seconds or WHOLE_STOPPED in r.table_seconds]
    return _probed(probes[-1], WHOLE_PROBE, WHOLE_STOPPED) if probes else None


def choose_whole(chain: Mapping[str, Sequence[float]], whole: Sequence[float], builds: float | None, in_whole: bool,
                 probed: Estimate | None = None) -> Mode:
    """Recompute a split view as declared, in one query (``full``), or maintain it and the views split
    off it (``with_derived_views``) incrementally -- decided before any of them runs, since the split
    views run first. ``chain``: each view's seconds of its recent runs maintaining the split
    definition (incremental or auto's per-view recompute); ``whole``: seconds of the whole query's
    recent runs; ``builds``: the chain's last builds from snapshots together; ``in_whole``: the last
    run was whole.

    Per view, auto weighs recomputing that view (``choose_mode``); a split-off aggregate recomputed
    alone still writes its result for the view above to read, which the whole query does not (TPC-H
    Q13: 2.4 s + 1.0 s maintained, 3.2 s + 1.7 s recomputed per view, 1.5 s whole). So the chain is
    weighed as one: the sum of its views' median runs against the whole query's median run; the
    first whole run is tried once every view has an incremental run measured and the chain's builds
    cost under ``PROBE_RATIO`` times its runs (a build is a whole recompute and more) -- as a probe
    (``probed``: ``whole_probed``), the query as declared timed in a split run and stopped where it
    could no longer win: a whole run tried for real cost TPC-H Q18 at SF 1 4.96 s against 1.79 s
    split, and a rebuild back. Leaving and
    coming back follow ``choose_mode``'s margins: ``SWITCH_GAIN``, and a return only if a rebuild
    (the chain's builds: the split views catch up a backlog, the view is rebuilt over them) plus
    ``HORIZON`` chain runs cost less than ``HORIZON + 1`` whole runs."""
    medians = [statistics.median(seconds[-RECENT:]) for seconds in chain.values() if seconds]
    if len(medians) < len(chain):
        return Mode(in_whole, "auto: " + ("whole, no run of the split views measured to compare with" if in_whole
                                           else "split, no run of every view split off measured yet"))
    split = sum(medians)
    if not whole and probed is None:
        if builds is not None and builds < PROBE_RATIO * split:
            return Mode(False, f"auto: split, {split:.2f} s a run; the whole query is probed once (the split views' builds "
                               f"cost {builds:.2f} s, under {PROBE_RATIO:g}x that)", probe=True, limit=probe_limit(split))
        return Mode(False, f"auto: split, {split:.2f} s a run; the whole query is not tried (its builds cost {builds or 0:.2f} s)")
    if not whole and probed.at_least and not in_whole:  # a probe stopped at its limit: the whole query costs more
        if probed.seconds >= PROBE_AGAIN * split:
            return Mode(False, f"auto: split, {split:.2f} s a run; the whole query takes more than {probed.seconds:.2f} s "
                               f"(a probe of the query as declared, stopped)")
        return Mode(False, f"auto: split, {split:.2f} s a run; the whole query is probed again (the last probe stopped at "
                           f"{probed.seconds:.2f} s, under {PROBE_AGAIN:g}x that)", probe=True, limit=probe_limit(split))
    one, source = ((statistics.median(whole[-RECENT:]), f"median of {len(whole[-RECENT:])} runs") if whole
                   else (probed.seconds, "a probe of the query as declared"))
    if not in_whole:
        if one < (1 - SWITCH_GAIN) * split:
            return Mode(True, f"auto: whole, {one:.2f} s ({source}) < split views {split:.2f} s")
        return Mode(False, f"auto: split views {split:.2f} s <= whole {one:.2f} s ({source}), or saves under {SWITCH_GAIN:.0%}")
    rebuild = builds or one
    if rebuild + HORIZON * split < (HORIZON + 1) * one:
        return Mode(False, f"auto: back to the split views, a rebuild ({rebuild:.2f} s) + {HORIZON} runs ({split:.2f} s each) "
                           f"< {HORIZON + 1} whole runs ({one:.2f} s each)")
    return Mode(True, f"auto: whole, {one:.2f} s a run; the split views' {split:.2f} s would not repay a rebuild ({rebuild:.2f} s)")
