"""The join-sample benchmark's pieces that its numbers rest on: the baseline's enumeration, the loaded join's size
(counted, not enumerated) and the same-inserts comparison; and one tiny warm run end to end."""
from __future__ import annotations

import json
import random

import pytest

from lakeivm.bench import join_sample as bench
from lakeivm.config import load_settings

from .oracles import brute_force_join


@pytest.mark.parametrize("query", sorted(bench.QUERIES))
def test_join_size_and_hash_join_deltas_equal_brute_force(query):
    rng = random.Random(3)
    stream = [(rel, i, (rng.randrange(6), rng.randrange(6))) for i in range(40) for rel in bench.QUERIES[query]]
    rng.shuffle(stream)
    join = bench.SymmetricHashJoin(bench.QUERIES[query])
    enumerated = [ids for rel, rid, row in stream for ids in join.insert(rel, rid, row)]
    assert len(enumerated) == len(set(enumerated)) == len(brute_force(query, stream)) > 0
    for prefix in (stream[:50], stream):
        assert bench._join_size(bench.QUERIES[query], prefix) == len(brute_force(query, prefix))


def brute_force(query: str, stream: list) -> list:
    return brute_force_join(bench.QUERIES[query], {rel: {rid: row for r, rid, row in stream if r == rel} for rel in bench.QUERIES[query]})


def test_seconds_at_interpolates_between_marks():
    run = {"marks": [(10, 1.0), (20, 3.0)], "done": 25, "seconds": 4.0}
    assert [bench._seconds_at(run, n) for n in (0, 5, 10, 15, 20, 25)] == [0.0, 0.5, 1.0, 2.0, 3.0, 4.0]


def test_warm_run_reports_every_method_on_the_timed_tail(tmp_path):
    out = tmp_path / "bench"
    assert bench.main(["--edges", "2000", "--ks", "20", "--queries", "line3", "--budget", "5", "--warm", "0.5",
                       "--max-results", "100000000", "--out", str(out)], load_settings()) == 0
    report = json.loads((out / "join_sample.json").read_text())
    runs = {r["method"]: r for r in report["runs"]}
    assert set(runs) == {"rsjoin", "shj", "resample"} and report["warm"] == 0.5
    assert all(r["loaded"] == r["inserts"] == 3000 and r["loaded_join"] > 0 for r in runs.values())
    assert runs["rsjoin"]["complete"] and runs["rsjoin"]["sample"] == 20
    for method in ("shj", "resample"):
        assert runs[method]["speedup"] > 0 and runs[method]["rsjoin_seconds_same_inserts"] <= runs["rsjoin"]["seconds"]
    assert (out / "join_sample.png").stat().st_size > 0
