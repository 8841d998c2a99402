"""``lakeivm bench reads``' table (the suite itself runs for minutes: ``lakeivm bench reads``): per
path, each policy's median seconds per batch and how many times slower reading per view is."""
from __future__ import annotations

from lakeivm.bench.reads import tables


def test_the_table_compares_reading_per_view_with_shared_reads_on_each_path():
    run = lambda median, ok=True: {"median_s": median, "audits_ok": ok}  # noqa: E731
    (table,) = tables({"paths": {"local": {"shared": run(2.0), "per-view": run(3.0)},
                                 "spark": {"shared": run(10.0), "per-view": run(25.0, ok=False)}}})
    assert table["rows"] == [["local", "2.00", "3.00", "1.50", "ok"], ["spark", "10.00", "25.00", "2.50", "DIFFER"]]
