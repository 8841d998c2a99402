"""Every threshold that decides whether work runs in the calling process or on Spark, in one place.

Below each limit a run reads, nets, merges or rewrites in its own process (delta-rs, Arrow, DuckDB:
``docs/design/local-fast-paths.md``), above it Spark does; a table the gate refuses
(``lakeivm.fastpath``) goes through Spark whatever its size. Each module that applies a limit
imports its name from here.
"""
from __future__ import annotations

SMALL_DELTA_ROWS = 20_000  # a change range of at most this many change-feed rows is read and netted locally (changes)
SNAPSHOT_ROWS = 20_000  # a base table this small is read by delta-rs for a run (views.base.Context.snapshot)
REWRITE_ROWS = 20_000  # a result this small is rewritten whole rather than MERGEd (views.state)
MERGE_ROWS = 200_000  # a MERGE source this small is merged by delta-rs in the run's process (Lake.merge_small)
LOCAL_STATE_ROWS = 1_000_000  # state a kind reads and changes on the driver (nested indexes, triangle relations): read and rewritten whole locally
SCAN_ROWS = 50_000_000  # a larger table read by its keys is scanned by delta-rs with a key filter, up to this size
DRIVER_ROWS = 1_000_000  # changed keys per relation a triangle batch applies as SQL on the driver; more: a Spark rebuild
BROADCAST_ROWS = 2_000_000  # a batch side shipped to every Spark task (views.state.small_side)
PANDAS_ROWS = 100_000  # a stored view this small is validated by Great Expectations' pandas engine (quality)
