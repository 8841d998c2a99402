"""Payload rings of F-IVM: counts, sums, vectors of sums and the cofactor (regression) ring.

Every relation and view maps keys to payloads from a ring (F-IVM §2). Joins multiply
payloads, unions and marginalization add them, a deletion is a negative payload, and the
task-specific arithmetic happens only in the lifting function g_X applied when X is marginalized.

Each ring is a small immutable object with ``zero``/``one``/``add``/``mul``/``neg``, ``lift`` (g_X),
``from_multiplicity`` (a base tuple's payload), ``is_zero`` and a flat-column codec
(``flat_columns``/``to_flat``/``from_flat``, docs/kinds/fivm.md#payloads-as-columns) so the Spark
layer can store payloads as plain numeric columns and add them column by column (⊕ and ⊎ become
``SUM`` per column).

Example::

    >>> ring = CofactorRing(("x", "y"))
    >>> p = ring.mul(ring.lift("x", 2.0), ring.lift("y", 3.0))
    >>> ring.to_flat(p)["q__x__y"]
    6.0
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from lakeivm.errors import InvalidInput

ATOL = 1e-9


class Ring(Protocol):
    """What the view-tree evaluator and the Spark layer need of a payload ring."""

    def zero(self) -> Any: ...
    def one(self) -> Any: ...
    def add(self, a: Any, b: Any) -> Any: ...
    def mul(self, a: Any, b: Any) -> Any: ...
    def neg(self, a: Any) -> Any: ...
    def lift(self, variable: str, value: Any) -> Any: ...
    def from_multiplicity(self, m: int) -> Any: ...
    def is_zero(self, a: Any) -> bool: ...
    def is_dead(self, a: Any) -> bool: ...
    def close(self, a: Any, b: Any) -> bool: ...
    def flat_columns(self, lifted: Sequence[str]) -> tuple[str, ...]: ...
    def to_flat(self, a: Any, lifted: Sequence[str]) -> dict[str, float]: ...
    def from_flat(self, row: Mapping[str, float]) -> Any: ...


@dataclass(frozen=True)
class CountRing:
    """ℤ with lifting g_X(x) = 1 for every variable: COUNT(*) over the join (Ex. 2.4). O(1) per op."""

    def zero(self) -> int:
        return 0

    def one(self) -> int:
        return 1

    def add(self, a: int, b: int) -> int:
        return a + b

    def mul(self, a: int, b: int) -> int:
        return a * b

    def neg(self, a: int) -> int:
        return -a

    def lift(self, variable: str, value: object) -> int:
        """g_X(x) = 1: counting ignores values."""
        return 1

    def from_multiplicity(self, m: int) -> int:
        """Payload of a base tuple with multiplicity ``m`` (m · 1)."""
        return m

    def is_zero(self, a: int) -> bool:
        return a == 0

    def is_dead(self, a: int) -> bool:
        """Zero test for a stored view's payload (same as ``is_zero`` here)."""
        return a == 0

    def close(self, a: int, b: int) -> bool:
        return a == b

    def flat_columns(self, lifted: Sequence[str] = ()) -> tuple[str, ...]:
        """One column ``p``."""
        return ("p",)

    def to_flat(self, a: int, lifted: Sequence[str] = ()) -> dict[str, int]:
        return {"p": a}

    def from_flat(self, row: Mapping[str, float]) -> int:
        return int(row["p"])


@dataclass(frozen=True)
class SumRing:
    """ℝ with g_X(x) = x for X in ``variables`` and 1 otherwise: SUM(∏ variables) (Ex. 2.5). O(1) per op."""

    variables: frozenset[str] = frozenset()

    def zero(self) -> float:
        return 0.0

    def one(self) -> float:
        return 1.0

    def add(self, a: float, b: float) -> float:
        return a + b

    def mul(self, a: float, b: float) -> float:
        return a * b

    def neg(self, a: float) -> float:
        return -a

    def lift(self, variable: str, value: float) -> float:
        """g_X(x) = x if X is a factor of the summed product, else 1."""
        return float(value) if variable in self.variables else 1.0

    def from_multiplicity(self, m: int) -> float:
        return float(m)

    def is_zero(self, a: float) -> bool:
        return abs(a) <= ATOL

    def is_dead(self, a: float) -> bool:
        """Zero test for a stored view's payload (same as ``is_zero`` here)."""
        return abs(a) <= ATOL

    def close(self, a: float, b: float) -> bool:
        return bool(np.isclose(a, b, rtol=1e-9, atol=1e-6))

    def flat_columns(self, lifted: Sequence[str] = ()) -> tuple[str, ...]:
        """One column ``p``."""
        return ("p",)

    def to_flat(self, a: float, lifted: Sequence[str] = ()) -> dict[str, float]:
        return {"p": a}

    def from_flat(self, row: Mapping[str, float]) -> float:
        return float(row["p"])


@dataclass(frozen=True)
class SumVectorRing:
    """ℝⁿ with componentwise + and ×: n SUM(∏ vars) aggregates sharing one view tree (F-IVM §1).

    Component k lifts X to x if X is in ``aggregates[k]`` and to 1 otherwise, so an empty set is a
    COUNT(*) component. Payloads are tuples of floats; each op costs O(n).
    """

    aggregates: tuple[frozenset[str], ...]

    def __post_init__(self) -> None:
        if not self.aggregates:
            raise InvalidInput("SumVectorRing needs at least one aggregate; pass (frozenset(),) for a COUNT.")

    def zero(self) -> tuple[float, ...]:
        return (0.0,) * len(self.aggregates)

    def one(self) -> tuple[float, ...]:
        return (1.0,) * len(self.aggregates)

    def add(self, a: tuple[float, ...], b: tuple[float, ...]) -> tuple[float, ...]:
        return tuple(x + y for x, y in zip(a, b))

    def mul(self, a: tuple[float, ...], b: tuple[float, ...]) -> tuple[float, ...]:
        return tuple(x * y for x, y in zip(a, b))

    def neg(self, a: tuple[float, ...]) -> tuple[float, ...]:
        return tuple(-x for x in a)

    def lift(self, variable: str, value: float) -> tuple[float, ...]:
        return tuple(float(value) if variable in agg else 1.0 for agg in self.aggregates)

    def from_multiplicity(self, m: int) -> tuple[float, ...]:
        return (float(m),) * len(self.aggregates)

    def is_zero(self, a: tuple[float, ...]) -> bool:
        return all(abs(x) <= ATOL for x in a)

    def is_dead(self, a: tuple[float, ...]) -> bool:
        """Zero test for a stored view's payload: every component is zero (include a COUNT
        component, ``frozenset()``, to keep groups whose sums happen to be zero)."""
        return all(abs(x) <= ATOL for x in a)

    def close(self, a: tuple[float, ...], b: tuple[float, ...]) -> bool:
        return bool(np.allclose(a, b, rtol=1e-9, atol=1e-6))

    def flat_columns(self, lifted: Sequence[str] = ()) -> tuple[str, ...]:
        """Columns ``p_0 .. p_{n-1}``, one per aggregate."""
        return tuple(f"p_{k}" for k in range(len(self.aggregates)))

    def to_flat(self, a: tuple[float, ...], lifted: Sequence[str] = ()) -> dict[str, float]:
        return dict(zip(self.flat_columns(), a))

    def from_flat(self, row: Mapping[str, float]) -> tuple[float, ...]:
        return tuple(float(row[c]) for c in self.flat_columns())


@dataclass(frozen=True)
class Cofactor:
    """A degree-m matrix ring element (c, s, Q): count, sum vector, sum-of-products matrix."""

    c: float
    s: np.ndarray = field(repr=False)
    q: np.ndarray = field(repr=False)


@dataclass(frozen=True)
class CofactorRing:
    """The degree-m matrix ring of Def. 7.2 over the named ``features`` (linear regression, §7.2).

    a + b is componentwise; a * b = (c_a c_b, c_b s_a + c_a s_b, c_b Q_a + c_a Q_b + s_a s_bᵀ + s_b s_aᵀ).
    g_Xj(x) = (1, x e_j, x² e_j e_jᵀ) for a feature X_j, and 1 for any other variable. Each op
    costs O(m²). Over a join, the root payload is (Σw, Xᵀw, Xᵀ diag(w) X) of the weighted flat join.
    """

    features: tuple[str, ...]
    _index: Mapping[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if len(set(self.features)) != len(self.features):
            raise InvalidInput(f"CofactorRing features must be distinct, got {self.features}.")
        object.__setattr__(self, "_index", {f: j for j, f in enumerate(self.features)})

    @property
    def degree(self) -> int:
        return len(self.features)

    def zero(self) -> Cofactor:
        m = self.degree
        return Cofactor(0.0, np.zeros(m), np.zeros((m, m)))

    def one(self) -> Cofactor:
        m = self.degree
        return Cofactor(1.0, np.zeros(m), np.zeros((m, m)))

    def add(self, a: Cofactor, b: Cofactor) -> Cofactor:
        return Cofactor(a.c + b.c, a.s + b.s, a.q + b.q)

    def mul(self, a: Cofactor, b: Cofactor) -> Cofactor:
        cross = np.outer(a.s, b.s)
        return Cofactor(a.c * b.c, b.c * a.s + a.c * b.s, b.c * a.q + a.c * b.q + cross + cross.T)

    def neg(self, a: Cofactor) -> Cofactor:
        return Cofactor(-a.c, -a.s, -a.q)

    def lift(self, variable: str, value: float) -> Cofactor:
        """g_Xj(x) = (1, x e_j, x² e_jj) for a feature, the ring's 1 for any other variable."""
        j = self._index.get(variable)
        if j is None:
            return self.one()
        x = float(value)
        out = self.one()
        out.s[j] = x
        out.q[j, j] = x * x
        return out

    def from_multiplicity(self, m: int) -> Cofactor:
        out = self.one()
        return Cofactor(float(m), out.s, out.q)

    def is_zero(self, a: Cofactor) -> bool:
        """Exact zero test (up to ATOL): use it for in-flight deltas, where c = 0 with s ≠ 0 is a move."""
        return abs(a.c) <= ATOL and bool(np.all(np.abs(a.s) <= ATOL)) and bool(np.all(np.abs(a.q) <= ATOL))

    def is_dead(self, a: Cofactor) -> bool:
        """Zero test for a stored view of a valid bag: c = 0 implies s = Q = 0, so float residue
        left in s and Q must not keep the key alive (docs/kinds/fivm.md#payloads-as-columns)."""
        return abs(a.c) <= ATOL

    def close(self, a: Cofactor, b: Cofactor) -> bool:
        return bool(
            np.isclose(a.c, b.c, rtol=1e-9, atol=1e-6)
            and np.allclose(a.s, b.s, rtol=1e-9, atol=1e-6)
            and np.allclose(a.q, b.q, rtol=1e-9, atol=1e-6)
        )

    def flat_columns(self, lifted: Sequence[str] | None = None) -> tuple[str, ...]:
        """``c``, ``s__<v>`` per lifted feature and ``q__<u>__<v>`` for u ≤ v in feature order.

        ``lifted`` restricts to the features lifted in a view's subtree (the paper's non-zero
        blocks; pass ``view.lifted``, non-features are ignored since they lift to 1); the other
        entries of that view's payload are zero. Default: all features.
        """
        names = self._restrict(lifted)
        cols = ["c"] + [f"s__{v}" for v in names]
        cols += [f"q__{u}__{v}" for i, u in enumerate(names) for v in names[i:]]
        return tuple(cols)

    def to_flat(self, a: Cofactor, lifted: Sequence[str] | None = None) -> dict[str, float]:
        names = self._restrict(lifted)
        row = {"c": float(a.c)}
        row.update({f"s__{v}": float(a.s[self._index[v]]) for v in names})
        for i, u in enumerate(names):
            for v in names[i:]:
                row[f"q__{u}__{v}"] = float(a.q[self._index[u], self._index[v]])
        return row

    def from_flat(self, row: Mapping[str, float]) -> Cofactor:
        """Decode a flat row; absent ``s__``/``q__`` columns are the zero blocks."""
        out = self.zero()
        s, q = out.s, out.q
        for v, j in self._index.items():
            s[j] = float(row.get(f"s__{v}", 0.0))
            for u, i in self._index.items():
                if i <= j:
                    q[i, j] = q[j, i] = float(row.get(f"q__{u}__{v}", 0.0))
        return Cofactor(float(row["c"]), s, q)

    def _restrict(self, lifted: Sequence[str] | None) -> list[str]:
        if lifted is None:
            return list(self.features)
        return [f for f in self.features if f in set(lifted)]


def ols_coefficients(ring: CofactorRing, payload: Cofactor, label: str) -> dict[str, float]:
    """Least-squares coefficients (with intercept) of ``label`` on the other features (§7.2).

    Solves the normal equations on the bias-augmented Gram matrix [[c, sᵀ], [s, Q]]
    (docs/kinds/fivm.md#payloads-as-columns); O(m³) once per read, independent of the join size.
    Uses the pseudo-inverse, so collinear features get the minimum-norm solution that
    ``numpy.linalg.lstsq`` also returns. Returns {"intercept": b0, feature: b, ...}.
    """
    if label not in ring.features:
        raise InvalidInput(f"label {label!r} is not one of the ring's features {ring.features}; add it to the features.")
    if payload.c <= 0:
        raise InvalidInput("cannot fit a regression on an empty join (count c <= 0); load data first.")
    gram = np.empty((ring.degree + 1, ring.degree + 1))
    gram[0, 0], gram[0, 1:], gram[1:, 0], gram[1:, 1:] = payload.c, payload.s, payload.s, payload.q
    y = ring.features.index(label) + 1
    x = [0] + [j + 1 for j, f in enumerate(ring.features) if f != label]
    theta = np.linalg.pinv(gram[np.ix_(x, x)]) @ gram[x, y]
    names = ["intercept"] + [f for f in ring.features if f != label]
    return {n: float(t) for n, t in zip(names, theta)}
