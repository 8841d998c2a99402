"""The 22 TPC-H queries as views (``schemas/views-tpch``, validation parameters) over a TPC-H lake
and its change stream (RF1 inserts, RF2 deletes, supply-cost and supplier-nation updates): each is
maintained -- by an incremental kind where its SQL allows, else recomputed in full -- and equals
its own SQL, as written, after every refresh. The default suite runs one batch over the queries whose
constructs no other test takes from TPC-H (an aggregate over a LEFT JOIN's aggregate, a CTE view
compared with its own maximum, IN over an aggregate, a decorrelated nested IN, NOT EXISTS beside a
scalar subquery); -m slow runs all 22, one batch at SF 0.002 and three at SF 0.01."""
from __future__ import annotations

import pytest

from lakeivm.store import commit
from lakeivm.config import SCHEMAS
from lakeivm.datagen.tpch import TpchChangeStream, generate_tpch
from lakeivm.run.audit import audit
from lakeivm.run.engine import run_view
from lakeivm.catalog.registry import load_specs

INCREMENTAL = {"tpch_q01", "tpch_q02", "tpch_q03", "tpch_q04", "tpch_q05", "tpch_q06", "tpch_q07", "tpch_q08", "tpch_q09", "tpch_q10", "tpch_q11", "tpch_q12",
               "tpch_q13", "tpch_q14", "tpch_q15", "tpch_q16", "tpch_q17", "tpch_q18", "tpch_q19", "tpch_q20", "tpch_q21", "tpch_q22"}  # all 22: the README's TPC-H table says how each is maintained
DERIVED = {"tpch_q02": ["tpch_q02__sq1"], "tpch_q11": ["tpch_q11__groups", "tpch_q11__sq1"], "tpch_q13": ["tpch_q13__c_orders"], "tpch_q15": ["tpch_q15__revenue0", "tpch_q15__sq1"],
           "tpch_q18": ["tpch_q18__in1"], "tpch_q20": ["tpch_q20__in1", "tpch_q20__in1__sq1"],
           "tpch_q22": ["tpch_q22__sq1"]}  # aggregating derived tables, CTEs, aggregating and decorrelated subqueries: views of their own


SLOW = pytest.mark.slow
RUNS = [pytest.param((13, 15, 18, 20, 22), 1, id="q13-15-18-20-22"),
        *(pytest.param(queries, batches, id=f"{name}-{batches}", marks=SLOW)  # two workers share them
          for batches in (1, 3) for name, queries in (("q01-q11", range(1, 12)), ("q12-q22", range(12, 23))))]


@pytest.mark.heavy(150)
@pytest.mark.parametrize("queries, batches", RUNS)
def test_the_22_queries_are_maintained_and_equal_their_sql(lake, queries, batches):
    generate_tpch(lake, 0.002 if batches == 1 else 0.01, progress=lambda m: None)  # CI: SF 0.002; -m slow: the SF 0.01
    shipped = load_specs(SCHEMAS / "views-tpch", lake.root)  # the tables' columns say which are a subquery's own
    assert len(shipped) == 22 + sum(map(len, DERIVED.values())) and not shipped.broken
    specs = {f"tpch_q{n:02d}": shipped[f"tpch_q{n:02d}"] for n in queries}
    kinds = {name: run_view(lake, spec).kind for name, spec in sorted(specs.items())}  # a view's derived views run first
    assert {name for name, kind in kinds.items() if kind != "full"} == INCREMENTAL & set(specs), kinds
    derived = {name: [d.name for d in spec.split_off] for name, spec in specs.items() if spec.split_off}
    assert derived == {name: views for name, views in DERIVED.items() if name in specs}
    views = {**specs, **{d.name: d for spec in specs.values() for d in spec.split_off}}  # each checks the view it reads
    for name in views.keys() - specs.keys():
        kinds[name] = commit.last_committed(lake, name).kind
        assert kinds[name] != "full", kinds  # an incremental aggregate of its own
    stream, rows = TpchChangeStream(lake, seed=22), {}
    for _ in range(batches):
        stream.batch(orders=10, parts=3, suppliers=2)
        for name, spec in sorted(specs.items()):
            row = run_view(lake, spec)  # its derived views first
            assert row is not None and row.consistent, name
        for name, spec in sorted(views.items()):
            report = audit(lake, spec)
            assert report.ok, f"{name} ({kinds[name]}): {report}"
            rows[name] = report.rows
    print(rows)  # how many rows each result holds (-s shows it)
