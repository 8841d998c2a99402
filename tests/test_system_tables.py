"""System tables through delta-rs: concurrent first runs create them once, rows round-trip, a
view's log rows come back in order. No Spark: these run in milliseconds."""
from __future__ import annotations

import threading
from datetime import datetime, timezone

from lakeivm.store import storage, system_tables
from lakeivm.store.commit import LogRow, to_row
from lakeivm.store.lake import Lake


def test_concurrent_first_runs_create_the_system_tables_once(tmp_path):
    for trial in range(5):
        lake = Lake(None, str(tmp_path / f"lake{trial}"))  # type: ignore[arg-type]  # no Spark needed
        errors: list[BaseException] = []

        def create() -> None:
            try:
                lake.ensure_system_tables()
            except BaseException as err:  # noqa: BLE001 -- collected for the assertion
                errors.append(err)

        threads = [threading.Thread(target=create) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not errors, errors
        for path in (lake.log_path, lake.costs_path):  # one creation; a loser's commit (if any) adds nothing
            commits = [storage.commit_actions(path, v) for v in range(storage.head_version(path) + 1)]
            assert sum(any("metaData" in a for a in actions) for actions in commits) == 1
            assert not any("add" in a for actions in commits for a in actions)
        assert system_tables.read(lake.log_path) == []


def test_log_rows_round_trip(tmp_path):
    lake = Lake(None, str(tmp_path / "lake"))  # type: ignore[arg-type]
    lake.ensure_system_tables()
    rows = [LogRow(view=view, seq=seq, status="committed", mode="refresh", kind="fivm", pins={"t": seq},
                   watermarks={"t": seq}, state_versions={"result": seq}, consistent=True, applied=("t",),
                   delta_rows={"t": 3}, table_seconds={"t": 0.5}, seconds=1.5, fingerprint="ab", deployment="connect",
                   started_at=datetime(2026, 1, 1, tzinfo=timezone.utc))
            for seq, view in ((1, "a"), (1, "b"), (2, "a"))]
    for row in rows:
        system_tables.append(lake.log_path, "log.json", [row.__dict__])
    back = sorted((to_row(r) for r in system_tables.read(lake.log_path, [("view", "=", "a")])), key=lambda r: r.seq)
    assert [(r.view, r.seq) for r in back] == [("a", 1), ("a", 2)]
    first = back[0]
    assert first.pins == {"t": 1} and first.applied == ("t",) and first.table_seconds == {"t": 0.5}
    assert first.fingerprint == "ab" and first.deployment == "connect" and first.consistent
    assert first.started_at.timestamp() == rows[0].started_at.timestamp()
    newer = to_row({**rows[0].__dict__, "written_by_a_newer_lakeivm": 1})  # a shared lake, workers upgraded one by one
    assert newer.seq == 1 and not hasattr(newer, "written_by_a_newer_lakeivm")


def test_appends_are_compacted_now_and_then_and_read_the_same(tmp_path):
    """One file per append would pile up (each fresh process reads them all); every COMPACT_EVERY-th
    commit rewrites the small files as one, fenced appends still land after it, no row is lost."""
    from deltalake import DeltaTable

    lake = Lake(None, str(tmp_path / "lake"))  # type: ignore[arg-type]
    lake.ensure_system_tables()
    appended = []
    for i in range(2 * system_tables.COMPACT_EVERY + 5):
        row = {"view": f"v{i % 3}", "seq": i, "status": "committed"}
        if i % 2:
            assert system_tables.append(lake.log_path, "log.json", [row]) is not None
        else:  # fenced at the head, as a run's lease appends
            head = storage.head_version(lake.log_path)
            assert system_tables.append(lake.log_path, "log.json", [row], after=head) is not None
        appended.append((row["view"], row["seq"]))
    files = DeltaTable(lake.log_path).file_uris()
    assert len(files) <= system_tables.COMPACT_EVERY, len(files)
    assert sorted((r["view"], r["seq"]) for r in system_tables.read(lake.log_path)) == sorted(appended)
    assert sorted(r["seq"] for r in system_tables.read(lake.log_path, [("view", "=", "v1")])) == [s for v, s in sorted(appended) if v == "v1"]


def test_the_files_read_one_by_one_give_what_delta_rs_scans_give(tmp_path):
    """``read`` reads a local table's parquet files itself (no pyarrow.dataset, no pandas): the same
    rows as delta-rs's scan, timestamps and maps included, and null for a column an older file lacks."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    lake = Lake(None, str(tmp_path / "lake"))  # type: ignore[arg-type]
    lake.ensure_system_tables()
    schema = system_tables.arrow_schema("log.json")
    older = pa.schema([f for f in schema if f.name not in ("fingerprint", "lease_expires")])
    write_deltalake(lake.log_path, pa.Table.from_pylist([{"view": "a", "seq": 1, "status": "committed", "pins": [("t", 1)],
                                                         "started_at": datetime(2026, 1, 1, 12, 30, 1, 250, tzinfo=timezone.utc)}],
                                                       schema=older), mode="append", schema_mode="merge")
    system_tables.append(lake.log_path, "log.json", [{"view": "a", "seq": 2, "status": "running", "fingerprint": "f",
                                                      "lease_expires": datetime(2026, 1, 1, tzinfo=timezone.utc)},
                                                     {"view": "b", "seq": 1, "status": "committed"}])
    for where in ([], [("view", "=", "a")], [("view", "=", "a"), ("seq", "=", 2)]):
        scanned = DeltaTable(lake.log_path).to_pyarrow_table(filters=where or None).to_pylist()
        expected = sorted((system_tables.from_arrow(r) for r in scanned), key=str)
        got = system_tables._local_rows(DeltaTable(lake.log_path), where)
        assert got is not None and sorted(got, key=str) == expected and len(got) == len(scanned)
    first = next(r for r in system_tables.read(lake.log_path, [("view", "=", "a")]) if r["seq"] == 1)
    assert first["fingerprint"] is None and first["pins"] == {"t": 1}
    assert first["started_at"] == datetime.fromtimestamp(datetime(2026, 1, 1, 12, 30, 1, 250, tzinfo=timezone.utc).timestamp())


def test_a_views_cached_log_outlives_other_views_appends_and_compactions(tmp_path, monkeypatch):
    """``commit.view_log`` reads a view's rows once: other views' appends and the log's compactions
    (files rewritten, rows unchanged: ``dataChange: false``) keep them, the view's own appends extend
    them, and they equal a fresh read at every step."""
    from lakeivm.store import commit

    lake = Lake(None, str(tmp_path / "lake"))  # type: ignore[arg-type]
    lake.ensure_system_tables()
    reads, read = [], system_tables.read
    monkeypatch.setattr(system_tables, "read", lambda *args, **kw: reads.append(args) or read(*args, **kw))
    row = lambda view, seq: LogRow(view=view, seq=seq, status="committed", mode="refresh", kind="fivm", pins={},
                                   watermarks={}, state_versions={}, consistent=True)  # noqa: E731
    commit.append_log(lake, row("a", 1))
    assert [r.seq for r in commit.view_log(lake, "a")] == [1] and len(reads) == 1
    for i in range(2 * system_tables.COMPACT_EVERY):
        commit.append_log(lake, row("b", i) if i % 3 else row("a", 2 + i))
        assert [r.seq for r in commit.view_log(lake, "a")] == [r.seq for r in commit.view_log(Lake(None, lake.root), "a")]
    compactions = [v for v in range(storage.head_version(lake.log_path) + 1)
                   if any(a.get("commitInfo", {}).get("operation") == "OPTIMIZE" for a in storage.commit_actions(lake.log_path, v))]
    assert len(compactions) >= 2, compactions
    assert sum(1 for args in reads if args[1] == [("view", "=", "a")]) == 1 + 2 * system_tables.COMPACT_EVERY  # the fresh reads only


def test_the_head_version_follows_new_commits_and_a_table_written_anew(tmp_path):
    """``storage.head_version`` probes on from the head it last saw: it gives what a listing of the
    log gives as commits land, and after the table is deleted and written anew with a shorter or a
    longer history."""
    import shutil

    import pyarrow as pa
    from deltalake import write_deltalake

    path = str(tmp_path / "t")
    listed = lambda: max(v for v in map(storage.version_of, storage.list_names(f"{path}/_delta_log", False)) if v is not None)  # noqa: E731
    rows = pa.table({"k": [1]})
    for history in (5, 2, 7):  # written anew each time: a longer history, a shorter, a longer again
        shutil.rmtree(path, ignore_errors=True)
        for _ in range(history):
            write_deltalake(path, rows, mode="append")
            assert storage.head_version(path) == listed()
        assert storage.head_version(path) == history - 1
