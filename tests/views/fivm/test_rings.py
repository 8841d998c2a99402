"""Ring laws (hypothesis), lifting, flat codec and the regression read-out of the F-IVM rings."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakeivm.errors import InvalidInput
from lakeivm.views.fivm.rings import Cofactor, CofactorRing, CountRing, SumRing, SumVectorRing, ols_coefficients

SMALL = st.integers(-20, 20)
FEATURES = ("a", "b", "c")
COFACTOR = CofactorRing(FEATURES)
VECTOR = SumVectorRing((frozenset(), frozenset({"a"}), frozenset({"a", "b"})))


def _cofactor(draw: st.DrawFn) -> Cofactor:
    m = len(FEATURES)
    c = draw(SMALL)
    s = np.array(draw(st.lists(SMALL, min_size=m, max_size=m)), dtype=float)
    upper = np.array(draw(st.lists(SMALL, min_size=m * m, max_size=m * m)), dtype=float).reshape(m, m)
    return Cofactor(float(c), s, np.triu(upper) + np.triu(upper, 1).T)


RINGS = [
    (CountRing(), SMALL),
    (SumRing(frozenset({"a"})), SMALL.map(float)),
    (VECTOR, st.tuples(SMALL, SMALL, SMALL).map(lambda t: tuple(map(float, t)))),
    (COFACTOR, st.composite(lambda draw: _cofactor(draw))()),
]
IDS = ["count", "sum", "vector", "cofactor"]


@pytest.mark.parametrize(("ring", "elems"), RINGS, ids=IDS)
def test_ring_laws(ring, elems) -> None:
    @settings(max_examples=60, deadline=None)
    @given(elems, elems, elems)
    def laws(a, b, c) -> None:
        eq = ring.close
        assert eq(ring.add(a, b), ring.add(b, a))
        assert eq(ring.add(ring.add(a, b), c), ring.add(a, ring.add(b, c)))
        assert eq(ring.mul(ring.mul(a, b), c), ring.mul(a, ring.mul(b, c)))
        assert eq(ring.mul(a, b), ring.mul(b, a))
        assert eq(ring.mul(a, ring.add(b, c)), ring.add(ring.mul(a, b), ring.mul(a, c)))
        assert eq(ring.add(a, ring.zero()), a)
        assert eq(ring.mul(a, ring.one()), a)
        assert eq(ring.mul(a, ring.zero()), ring.zero())
        assert ring.is_zero(ring.add(a, ring.neg(a)))
        assert ring.is_zero(ring.zero()) and not ring.is_zero(ring.one())
        assert eq(ring.from_flat(ring.to_flat(a)), a)

    laws()


def test_count_and_sum_lifts_give_count_and_sum_of_products() -> None:
    rows = [(1.0, 2.0), (3.0, -1.0), (0.5, 4.0)]
    for ring, expect in [
        (CountRing(), len(rows)),
        (SumRing(frozenset({"a", "b"})), sum(a * b for a, b in rows)),
        (SumRing(frozenset({"b"})), sum(b for _, b in rows)),
    ]:
        total = ring.zero()
        for a, b in rows:
            total = ring.add(total, ring.mul(ring.lift("a", a), ring.lift("b", b)))
        assert total == pytest.approx(expect)
    vec = VECTOR.zero()
    for a, b in rows:
        vec = VECTOR.add(vec, VECTOR.mul(VECTOR.lift("a", a), VECTOR.lift("b", b)))
    assert vec == pytest.approx((3.0, sum(a for a, _ in rows), sum(a * b for a, b in rows)))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(SMALL, SMALL, SMALL, st.integers(-3, 3)), max_size=12))
def test_lift_products_sum_to_weighted_moments(rows) -> None:
    total = COFACTOR.zero()
    for a, b, c, w in rows:
        lifted = COFACTOR.mul(COFACTOR.mul(COFACTOR.lift("a", a), COFACTOR.lift("b", b)), COFACTOR.lift("c", c))
        lifted = COFACTOR.mul(lifted, COFACTOR.from_multiplicity(w))
        total = COFACTOR.add(total, lifted)
    x = np.array([r[:3] for r in rows], dtype=float).reshape(-1, 3)
    w = np.array([r[3] for r in rows], dtype=float)
    assert COFACTOR.close(total, Cofactor(w.sum(), x.T @ w, x.T @ np.diag(w) @ x))


def test_lift_of_non_feature_is_one_and_zero_tests() -> None:
    assert COFACTOR.close(COFACTOR.lift("zzz", 5.0), COFACTOR.one())
    move = COFACTOR.add(COFACTOR.lift("a", 1.0), COFACTOR.neg(COFACTOR.lift("a", 2.0)))
    assert not COFACTOR.is_zero(move) and COFACTOR.is_dead(move)


def test_flat_columns_restricted_to_lifted_block() -> None:
    assert COFACTOR.flat_columns(["c", "a"]) == ("c", "s__a", "s__c", "q__a__a", "q__a__c", "q__c__c")
    assert len(CofactorRing(tuple(f"x{i}" for i in range(43))).flat_columns()) == 990
    payload = COFACTOR.mul(COFACTOR.lift("a", 2.0), COFACTOR.lift("c", 3.0))
    flat = COFACTOR.to_flat(payload, ["a", "c"])
    assert flat == {"c": 1.0, "s__a": 2.0, "s__c": 3.0, "q__a__a": 4.0, "q__a__c": 6.0, "q__c__c": 9.0}
    assert COFACTOR.close(COFACTOR.from_flat(flat), payload)
    assert COFACTOR.flat_columns(["nope", "b"]) == ("c", "s__b", "q__b__b")


def test_ols_matches_lstsq() -> None:
    rng = np.random.default_rng(7)
    x = rng.normal(size=(200, 2))
    y = 1.5 + x @ np.array([2.0, -3.0]) + rng.normal(scale=0.1, size=200)
    ring = CofactorRing(("u", "v", "y"))
    total = ring.zero()
    for (u, v), t in zip(x, y):
        total = ring.add(total, ring.mul(ring.mul(ring.lift("u", u), ring.lift("v", v)), ring.lift("y", t)))
    theta = ols_coefficients(ring, total, "y")
    expect, *_ = np.linalg.lstsq(np.column_stack([np.ones(200), x]), y, rcond=None)
    assert np.allclose([theta["intercept"], theta["u"], theta["v"]], expect, rtol=1e-8)
    with pytest.raises(InvalidInput):
        ols_coefficients(ring, ring.zero(), "y")
    with pytest.raises(InvalidInput):
        ols_coefficients(ring, total, "w")
