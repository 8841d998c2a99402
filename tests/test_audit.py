"""The audit of a top-k: rows tied with the k-th are taken in an order Spark leaves open, so the view
and its recompute may keep different ones; the audit accepts any pick ``ORDER BY ... LIMIT k`` may
give, and only those."""
from __future__ import annotations

import itertools
import random
from collections import Counter

from lakeivm.catalog.registry import spec_from_dict
from lakeivm.run import audit as audits
from lakeivm.run.engine import run_view
from lakeivm.store import commit


def test_a_pick_is_checked_against_every_order_the_sort_allows():
    """``one_of_the_picks`` against brute force: the first k rows of every permutation of the rows
    whose keys do not decrease, for random rows with many ties, and every k-row bag of them."""
    rng = random.Random(3)
    for _ in range(150):
        rows = [(rng.randrange(3), rng.randrange(3)) for _ in range(rng.randint(1, 6))]
        key = lambda row: row[0]  # noqa: E731 -- the ORDER BY column; row[1] decides nothing
        k = rng.randint(1, len(rows))
        ordered = sorted(rows, key=key)
        picks = {frozenset(Counter(p[:k]).items()) for p in itertools.permutations(rows)
                 if all(key(a) <= key(b) for a, b in zip(p, p[1:]))}
        tied = [r for r in rows if key(r) == key(ordered[k - 1])]
        for candidate in {frozenset(Counter(c).items()) for c in itertools.combinations(rows, k)} | {frozenset({((9, 9), k)})}:
            assert audits.one_of_the_picks(ordered[:k], tied, key, Counter(dict(candidate))) == (candidate in picks), (rows, k, candidate)


def test_the_audit_accepts_another_pick_among_ties_and_no_other_rows(lake, spark, monkeypatch):
    lake.create_table("t", spark.createDataFrame([("a", 10), ("b", 5), ("c", 5), ("d", 1)], "k string, v int"))
    view = spec_from_dict({"name": "top2", "deadline": 60, "refresh_policy": "incremental",
                           "sql": "SELECT k, SUM(v) AS s FROM t GROUP BY k ORDER BY s DESC LIMIT 2"})
    run_view(lake, view)
    ctx, maintainer = audits.reader(lake, view, commit.last_committed(lake, "top2"))
    kept = {r.k for r in maintainer.result(ctx).collect()}
    assert kept in ({"a", "b"}, {"a", "c"}) and audits.audit(lake, view).ok
    other = ({"b", "c"} - kept).pop()
    monkeypatch.setattr(audits, "recompute", lambda *args: spark.createDataFrame([("a", 10), (other, 5)], "k string, s bigint"))
    assert audits.audit(lake, view).ok  # the recompute kept the other row of s = 5: both are the SQL's
    monkeypatch.undo()
    real = audits.reader

    class Kept:  # the view keeping a row of s = 6: no row of the SQL, tied or not
        def result(self, ctx, version):
            return spark.createDataFrame([("a", 10), ("b", 6)], "k string, s bigint")

    monkeypatch.setattr(audits, "reader", lambda *args: (real(*args)[0], Kept()))
    report = audits.audit(lake, view)
    assert not report.ok and report.unexpected == (("b", 6),) and len(report.missing) == 1, str(report)
