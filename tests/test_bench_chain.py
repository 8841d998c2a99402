"""``lakeivm bench chain``'s summary (the suite itself runs for many minutes: ``lakeivm bench chain``):
hit rates per deadline, quantiles and costs relative to joint planning."""
from __future__ import annotations

from lakeivm.bench.chain import _quantile, tables


def _policy(refreshes, total):
    seconds = [r[2] for r in refreshes]
    rows = [{"tick": t, "view": v, "deadline_s": d, "seconds": s, "predicted_s": p, "met": s <= d} for t, v, s, d, p in refreshes]
    deadlines = sorted({r["deadline_s"] for r in rows})
    return {"refreshes": rows, "total_s": total, "met": sum(r["met"] for r in rows),
            "p50_s": _quantile(seconds, 0.5), "p95_s": _quantile(seconds, 0.95),
            "per_deadline": {f"{d:g}": {"met": sum(r["met"] for r in rows if r["deadline_s"] == d),
                                        "refreshes": sum(r["deadline_s"] == d for r in rows)} for d in deadlines}}


def test_the_summary_counts_refreshes_within_each_deadline_and_compares_costs_with_joint():
    assert _quantile([], 0.5) is None and _quantile([3.0, 1.0, 2.0], 0.5) == 2.0 and _quantile([1.0, 9.0], 0.95) == 9.0
    joint = _policy([(2, "gold", 4.0, 10.0, 5.0), (5, "silver", 20.0, 30.0, 18.0)], total=40.0)
    lazy = _policy([(2, "gold", 12.0, 10.0, None), (5, "silver", 25.0, 30.0, None)], total=37.0)
    summary, per_refresh = tables({"policies": {"joint": joint, "on-demand": lazy}})
    assert summary["columns"][2:4] == ["within 10 s", "within 30 s"]
    assert summary["rows"][0][:4] == ["joint", "2/2", "1/1", "1/1"] and summary["rows"][0][-1] == "1.00"
    assert summary["rows"][1][:4] == ["on-demand", "1/2", "0/1", "1/1"] and summary["rows"][1][-1] == "0.93"
    assert per_refresh["rows"][0] == [2, "gold (10)", "4.00 (5.00)", "12.00 () MISSED"]
