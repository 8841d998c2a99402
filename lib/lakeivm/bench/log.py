"""``lakeivm bench log``: one view's log rows read by a fresh process after many runs, the system
tables compacted (``system_tables.compact``, every ``COMPACT_EVERY`` commits) or never compacted.

Every Airflow task and every CLI command is a new process that reads the view's rows of
``_system/log`` before it can decide anything, a no-op refresh included. Side by side in one run:
two logs of ``--runs`` single-row appends (rows of 4 views, as runs append them), one with
compaction off; then each is read ``--repeats`` times, each time by a new Python process with its
imports done first (as the warm Airflow executor preloads them), timing the read alone. No Spark.
"""
from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time

from lakeivm.bench import machine, save
from lakeivm.config import Settings

READ = """
import sys, time
import deltalake, pyarrow.dataset
from lakeivm.store import system_tables
t0 = time.perf_counter()
rows = system_tables.read(sys.argv[1], [("view", "=", "v1")])
print(time.perf_counter() - t0, len(rows))
"""


def main(argv: list[str], settings: Settings) -> int:
    """``lakeivm bench log [--runs 1000] [--repeats 3] [--out DIR]``."""
    import argparse

    parser = argparse.ArgumentParser(prog="lakeivm bench log", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000, help="log appends (one per run's row)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="bench-results")
    args = parser.parse_args(argv)
    run(args.runs, args.repeats, args.out)
    return 0


def run(runs: int, repeats: int, out: str) -> dict:
    from deltalake import DeltaTable

    from lakeivm.store import system_tables

    results = {"machine": machine(), "runs": runs, "compact_every": system_tables.COMPACT_EVERY, "logs": {}}
    with tempfile.TemporaryDirectory(prefix="lakeivm-bench-log-") as root:
        for label, every in (("never compacted", sys.maxsize), ("compacted", system_tables.COMPACT_EVERY)):
            path = f"{root}/{label.replace(' ', '_')}"
            system_tables.ensure(path, "log.json")
            default, system_tables.COMPACT_EVERY = system_tables.COMPACT_EVERY, every
            t0 = time.perf_counter()
            try:
                for i in range(runs):
                    system_tables.append(path, "log.json", [{"view": f"v{i % 4}", "seq": i // 4, "status": "committed"}])
            finally:
                system_tables.COMPACT_EVERY = default
            appended = time.perf_counter() - t0
            reads = []
            for _ in range(repeats):
                seconds, rows = subprocess.run([sys.executable, "-c", READ, path], capture_output=True, text=True,
                                               check=True).stdout.split()
                reads.append(float(seconds))
            files = len(DeltaTable(path).file_uris())
            results["logs"][label] = {"append_s": appended, "files": files, "read_s": reads, "rows_read": int(rows)}
            print(f"{label}: {runs} appends in {appended:.1f} s, {files} files; a fresh process reads one view's "
                  f"{rows} rows in {statistics.median(reads):.3f} s (min {min(reads):.3f}, max {max(reads):.3f})", flush=True)
    before, after = (statistics.median(results["logs"][k]["read_s"]) for k in ("never compacted", "compacted"))
    print(f"read: compacted {before / after:.1f}x faster than never compacted")
    save(out, "log", results)
    print(f"wrote {out}/log.json")
    return results
