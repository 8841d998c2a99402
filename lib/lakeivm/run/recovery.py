"""Recovery: a run's state tables back where its view's last committed run left them.

A run writes its state tables first and its log row last (``lakeivm.store.commit``). Before a run does
anything, ``recover`` restores every state table written after the last committed row to the version
that row names (or rolls a committed row whose log commit was lost forward); before it commits,
``late_write`` checks no other writer -- a killed run whose Spark operation went on -- wrote a state
table meanwhile.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from lakeivm.store import commit, storage, system_tables
from lakeivm.store.commit import Lease, LogRow
from lakeivm.errors import StateError
from lakeivm.store.lake import Lake

if TYPE_CHECKING:
    from lakeivm.views.base import Context, Maintainer


def recover(lake: Lake, last: LogRow | None, state_paths: Mapping[str, str],
            claim: Lease | None = None) -> tuple[list[str], LogRow | None]:
    """Restore every state table written after ``last`` committed to the version ``last`` names.

    Returns what was done (for the log) and the committed row recovery ended at. With no
    committed run, partial state is deleted. Before rolling anything back, a committed row the log
    lost (its commit file deleted or moved aside by ``lakeivm repair``, its data file still there)
    is rolled forward instead: re-appended through the run's ``claim``, so what a committed row
    names is never undone (``lost_commit``).
    """
    heads = {name: lake.head_version(path) for name, path in state_paths.items() if lake.is_delta(path)}
    done: list[str] = []
    ahead = any(last is None or last.state_versions.get(name) != head for name, head in heads.items())
    lost = lost_commit(lake, claim.view, last, heads) if ahead and claim is not None else None
    if lost is not None:
        claim.append(lost)
        done.append(f"rolled forward run #{lost.seq} (its log commit was lost; its row was read back from its data file)")
        last = lost
    for name, head in heads.items():
        path = state_paths[name]
        if last is None or name not in last.state_versions:
            lake.delete(path)
            done.append(f"{name}: removed uncommitted state")
            continue
        logged = last.state_versions[name]
        if head < logged:
            raise StateError(
                f"state table {path} is at version {head}, behind the log's {logged}: it was modified "
                f"outside lakeivm. Rebuild the view (lakeivm refresh {last.view} --rebuild)."
            )
        if head > logged:
            lake.restore(path, logged)
            done.append(f"{name}: restored {head} -> {logged}")
    return done, last


def lost_commit(lake: Lake, view: str, last: LogRow | None, heads: Mapping[str, int]) -> LogRow | None:
    """The newest committed row of ``view`` newer than ``last`` that sits in a data file of
    ``_system/log`` no commit references -- a commit file lost after its data file was written --
    and whose state versions all still exist (``heads``: the state tables' versions); None if there
    is none (the usual case: a crash).

    A data file no commit references is also left by an append that lost its race for a version
    (it was retried) or was compacted away: their rows are in the log, and are skipped by run id.
    """
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    known = {r.run_id for r in commit.view_log(lake, view) if r.status != commit.RUNNING}
    table = DeltaTable(lake.log_path)
    since = _committed_at(lake, last)
    referenced = {os.path.basename(uri) for uri in table.file_uris()} | _added_since(lake, since, table.version())
    found = []
    for name, written in storage.files_modified(lake.log_path).items():
        if not name.endswith(".parquet") or name in referenced or written < since:
            continue
        try:
            rows = pq.read_table(f"{lake.log_path}/{name}", filters=[("view", "=", view), ("status", "=", "committed")]).to_pylist()
        except Exception:  # a partly written file of a crashed append: nothing committed in it
            continue
        found += [commit.to_row(system_tables.from_arrow(row)) for row in rows if row["run_id"] not in known]
    newer = [row for row in found if last is None or row.seq > last.seq]
    survivors = [row for row in newer if all(heads.get(name, -1) >= v for name, v in row.state_versions.items())]
    return max(survivors, key=lambda row: row.seq, default=None)


def _added_since(lake: Lake, since: float, head: int) -> set[str]:
    """The data files of ``_system/log`` added by its commits written at ``since`` or later (their
    names; newest first, down to the first older commit): a compaction may since have removed them,
    but a commit wrote them, so none holds a lost commit's rows -- without this, each run read
    every file the log's last compaction left unreferenced (58 files, 0.4 s a run, in a 43-view
    pipeline). A data file is written before its commit file, so these are all the committed files
    written at ``since`` or later."""
    added = set()
    for version in range(head, -1, -1):
        written = storage.modified_at(f"{lake.log_path}/_delta_log/{version:020d}.json")
        if written is None:  # a lost commit file: its data file is what the caller looks for
            continue
        if written < since:
            break
        actions = storage.commit_actions(lake.log_path, version) or []
        added.update(os.path.basename(a["add"]["path"]) for a in actions if "add" in a)
    return added


MTIME_SLACK = 2.0  # seconds: a store's modification times may be rounded (to the second, or two on some filesystems)


def _committed_at(lake: Lake, last: LogRow | None) -> float:
    """When the log commit of ``last`` was written, by the store's clock (less ``MTIME_SLACK``): a
    newer run's data file was written after it -- that run claimed the view with a later commit --
    so the log's older files (e.g. the many a compaction left unreferenced) need not be read.
    0 (read them all) when the row names no commit or its commit file is gone."""
    if last is None or last.log_version is None:
        return 0.0
    written = storage.modified_at(f"{lake.log_path}/_delta_log/{last.log_version:020d}.json")
    return 0.0 if written is None else written - MTIME_SLACK


def writer_tag(claim: commit.Lease) -> str:
    """What a run's Delta commits carry as ``userMetadata`` (``_commit`` checks its state tables had no other writer)."""
    return f"lakeivm:{claim.view}:{claim.run_id}"


def state_heads(ctx: Context, maintainer: Maintainer) -> dict[str, int]:
    """Each state table's newest version (-1: not written yet)."""
    return {name: ctx.lake.head_version(path) if ctx.lake.is_delta(path) else -1 for name, path in maintainer.state_tables(ctx).items()}


def missing_state(ctx: Context, maintainer: Maintainer, last: commit.LogRow) -> StateError | None:
    """The error naming a state table that ``last`` (the committed run an incremental run goes on
    from) names but that is gone -- its folder deleted by hand -- or None: the changes would have
    nothing to be applied to. A rebuild makes every state table again from the snapshots."""
    paths = maintainer.state_tables(ctx)
    gone = [name for name in last.state_versions if ctx.bases.get(name) == -1]
    if not gone:
        return None
    name = gone[0]
    return StateError(f"view {ctx.view!r}: its state table {paths[name]} is gone (not a Delta table any more; run #{last.seq} "
                      f"committed its version {last.state_versions[name]}): it was deleted outside lakeivm. Rebuild the "
                      f"view: lakeivm refresh {ctx.view} --rebuild")


def late_write(ctx: Context, maintainer: Maintainer, versions: Mapping[str, int] | None = None) -> StateError | None:
    """The error naming a state table's first commit since the run's recovery that the run did not
    make (up to ``versions``, default the heads), or None: the late write of a run that was killed
    (its Spark Connect operation went on without it) or paused past its claim, which the next run's
    recovery undoes. The run must not commit over it; it may also have broken the run before its
    commit (a write into the folder of an uncommitted table the recovery removed names files that
    are gone)."""
    mine, heads = writer_tag(ctx.lease), versions if versions is not None else state_heads(ctx, maintainer)
    for name, path in maintainer.state_tables(ctx).items():
        head = heads[name]
        base = ctx.bases.get(name, -1)  # a table the run re-created (bootstrap) is checked from its first version
        foreign = [info for info in storage.history(path, base if head >= base else -1, head) if info["userMetadata"] != mine]
        if foreign:
            info = foreign[0]
            return StateError(
                f"view {ctx.view!r}: {path} version {info['version']} was written by {info['userMetadata'] or 'a writer outside lakeivm'} "
                f"({info['operation']}) while this run held the view -- the late write of a killed or paused run. "
                "This run commits nothing; refresh again (recovery undoes that write).")
    return None
