"""The driver-side merge of small state tables (``lakeivm.views.state.add_rows``) against brute force."""
from __future__ import annotations

from collections import defaultdict
from decimal import Decimal

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from lakeivm.views.state import add_rows, keys_in

SCHEMA = pa.schema([("k", pa.int32()), ("g", pa.string()), ("n", pa.int64()), ("s", pa.decimal128(38, 2))])
key = st.tuples(st.one_of(st.none(), st.integers(0, 3)), st.sampled_from([None, "a", "b"]))
row = st.tuples(key, st.integers(-3, 3), st.one_of(st.none(), st.integers(-500, 500).map(lambda c: Decimal(c) / 100)))


def table(rows) -> pa.Table:
    return pa.table({"k": [r[0][0] for r in rows], "g": [r[0][1] for r in rows], "n": [r[1] for r in rows],
                     "s": [r[2] for r in rows]}, schema=SCHEMA)


def brute(rows, alive):
    sums = defaultdict(lambda: [None, None])
    for k, n, s in rows:
        old = sums[k]
        sums[k] = [n if old[0] is None else old[0] + n, old[1] if s is None else s if old[1] is None else old[1] + s]
    judged = (0,) if alive else (0, 1)
    return sorted(((k, *v) for k, v in sums.items() if any(v[j] not in (0, None) for j in judged)), key=repr)


@settings(max_examples=150, deadline=None)
@given(stored=st.lists(row, max_size=12, unique_by=lambda r: r[0]), change=st.lists(row, max_size=12), alive=st.booleans())
def test_add_rows_sums_per_key_with_nulls_as_keys_and_drops_dead_keys(stored, change, alive):
    out = add_rows(table(stored), table(change), ("k", "g"), ("n", "s"), "n" if alive else None)
    assert out.schema == SCHEMA
    got = sorted((((r["k"], r["g"]), r["n"], r["s"]) for r in out.to_pylist()), key=repr)
    assert got == brute([*stored, *change], alive)


def test_keys_compare_nan_and_null_as_spark_null_safe_equality_does():
    t = pa.table({"x": [float("nan"), None, 0.0, -0.0], "y": [1, None, 2, 2]})
    keys = keys_in(t, ("x", "y"))
    assert keys[0] == keys_in(pa.table({"x": [float("nan")], "y": [1]}), ("x", "y"))[0]
    assert keys[1] == (None, None) and keys[2] == keys[3]


def test_compaction_counts_rows_appended_since_the_last_rewrite_by_either_writer(tmp_path):
    """Spark names a write's rows numOutputRows, delta-rs num_added_rows: a table rewritten by
    delta-rs (a small state table) is compacted after a quarter of the rows it wrote, not 250."""
    from deltalake import write_deltalake

    from lakeivm.views.state import _needs_compaction

    path = str(tmp_path / "t")
    write_deltalake(path, pa.table({"k": list(range(4000))}), mode="overwrite")
    write_deltalake(path, pa.table({"k": list(range(900))}), mode="append")
    assert not _needs_compaction(path)  # 900 of 4000 rows appended
    write_deltalake(path, pa.table({"k": list(range(200))}), mode="append")
    assert _needs_compaction(path)  # 1100 > a quarter of 4000
