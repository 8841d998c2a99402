"""The flat payload product (written once for floats and Spark Columns) against the rings, and the
plan's leaf lifts: each aggregate a product of per-table factors, each feature lifted once."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from lakeivm.sql import parse_query
from lakeivm.views.fivm.payload import PayloadRing
from lakeivm.views.fivm.plan import build_plan, fit_query, leaf_weights
from lakeivm.views.fivm.rings import CofactorRing, SumVectorRing

FEATURES = ("a", "b", "c", "d")
VALUE = st.integers(-9, 9).map(float)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(VALUE, VALUE, VALUE, VALUE, VALUE), min_size=1, max_size=3), st.data())
def test_multiply_equals_ring_product_of_blocks(rows, data):
    """Three factors with disjoint lifted blocks: the flat product equals the rings' product."""
    ring = PayloadRing(2, FEATURES)
    cofactor, vector = CofactorRing(FEATURES), SumVectorRing((frozenset(), frozenset({"a"})))
    blocks = [("a",), ("b", "d"), ("c",)][: len(rows)]
    factors, expected_cof, expected_vec = [], cofactor.one(), vector.one()
    for block, (p0, p1, *values) in zip(blocks, rows):
        element = cofactor.from_multiplicity(data.draw(st.integers(-3, 3)))
        for feature, value in zip(block, values):
            element = cofactor.mul(element, cofactor.lift(feature, value))
        flat = {"p_0": p0, "p_1": p1, **cofactor.to_flat(element, block)}
        factors.append((block, flat))
        expected_cof = cofactor.mul(expected_cof, element)
        expected_vec = vector.mul(expected_vec, (p0, p1))
    product = ring.multiply(factors)
    lifted = tuple(f for f in FEATURES if any(f in b for b in blocks))
    assert list(product) == list(ring.columns(lifted))
    assert np.allclose([product["p_0"], product["p_1"]], expected_vec)
    assert cofactor.close(cofactor.from_flat(product), expected_cof)


def test_leaf_lifts_split_products_by_table_and_lift_each_feature_once():
    schemas = {"r": {"a": "int", "x": "double", "k": "int"}, "s": {"a": "int", "y": "double", "g": "string"}}
    query = parse_query("SELECT g, SUM(x * (1 - y) * 2) AS v, COUNT(*) AS n FROM r JOIN s ON r.a = s.a "
                        "WHERE s.y > 0 GROUP BY g", schemas)
    plan = build_plan(query, {})
    assert [c.state for c in plan.components] == ["_lakeivm_count", "_lakeivm_s0", "_lakeivm_n0"]
    assert plan.components[1].weights["r"] == "COALESCE(CAST((r.x) AS DOUBLE) * CAST((2) AS DOUBLE), 0D)"
    assert plan.components[1].weights["s"] == "COALESCE(CAST((1 - s.y) AS DOUBLE), 0D)"
    assert dict(leaf_weights(plan, "s"))["p_0"] == "1"
    regression = parse_query("SELECT COUNT(*) AS n FROM r JOIN s ON r.a = s.a", schemas)
    options = {"features": ["x", "k * 2 AS k2"], "label": "y"}
    plan = build_plan(fit_query(regression, options, schemas), options)
    assert [(f.name, f.alias) for f in plan.features] == [("x", "r"), ("k2", "r"), ("y", "s")]
    assert [c for c, _ in leaf_weights(plan, "s")] == ["p_0", "c", "s__y", "q__y__y"]
    assert plan.payload_columns(plan.tree.root) == ring_columns(("x", "k2", "y"))


def ring_columns(features):
    return ("p_0",) + CofactorRing(features).flat_columns()
