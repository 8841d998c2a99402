"""TPC-H generation and its change stream, with the shipped views maintained over it."""
from __future__ import annotations

import pytest

from lakeivm.config import SHIPPED_VIEWS
from lakeivm.datagen.tpch import TpchChangeStream, generate_tpch
from lakeivm.run.audit import audit
from lakeivm.run.engine import run_view
from lakeivm.catalog.registry import load_specs


# Shipped views whose SQL another stream test maintains and audits already (the CI budget).
COVERED_ELSEWHERE = {
    "customer_distribution": "tests/test_tpch22.py: tpch_q13 is the same SQL",
    "customer_distribution__c_orders": "tests/test_tpch22.py: tpch_q13__c_orders, the same derived table (a LEFT JOIN and COUNT)",
    "tpch_q17": "tests/test_tpch22.py: tpch_q17, the same query with the specification's constants",
    "price_model": "tests/views/fivm/test_maintainer.py: the regression view, the same SQL and features",
    "shipping_priority": "tests/test_tpch22.py: tpch_q03, the same joins, filters, groups and SUM (its top-k aside)",
    "order_lines_sample": "tests/views/join_sample: a sample with a foreign key under random streams and asymmetric plans "
                          "(test_maintainer.py), its uniformity checked statistically (test_foreign_keys.py)",
    "revenue_by_region": "tests/test_upstream.py: a chain of views over views under random streams",
    "graph_triangles": "tests/views/triangle/test_maintainer.py: the same SQL and epsilon over a random edge stream",
    "revenue_by_nation": "tests/test_deployment.py: this shipped spec refreshed after a TPC-H change batch and audited "
                         "(and the same SQL with updatable: [lineitem] in tests/views/fivm)",
}


@pytest.mark.heavy(299)
def test_shipped_views_follow_the_tpch_change_stream(lake):
    counts = generate_tpch(lake, 0.002, progress=lambda m: None)
    assert counts["nation"] == 25 and counts["lineitem"] > 1000
    shipped = load_specs(SHIPPED_VIEWS)
    assert COVERED_ELSEWHERE.keys() <= shipped.keys()
    specs = {name: spec for name, spec in shipped.items() if name not in COVERED_ELSEWHERE}
    for spec in specs.values():
        run_view(lake, spec)
    stream = TpchChangeStream(lake, seed=3)
    before = {table: lake.head_version(lake.table_path(table)) for table in ("orders", "customer", "part")}
    said = stream.batch(orders=5, parts=3, suppliers=2, customers=2, prices=2)
    assert said.endswith("2 balances changed, 2 parts repriced"), said
    after = {table: lake.head_version(lake.table_path(table)) for table in before}
    assert after == {"orders": before["orders"] + 2, "customer": before["customer"] + 1, "part": before["part"] + 1}  # RF1, RF2; UPDATEs
    for spec in specs.values():
        row = run_view(lake, spec, mode="refresh")
        assert row.consistent and row.applied, spec.name
        report = audit(lake, spec)
        assert report.ok, f"{spec.name}: {report}"
