"""The payload every view of a Spark F-IVM view carries, as flat columns.

Why columns: docs/kinds/fivm.md#payloads-as-columns.

A view's payload is an element of a product ring (componentwise + and ×, F-IVM §2):

- a **vector of sums** ``p_0 .. p_{n-1}`` (``SumVectorRing``, the compound payload of F-IVM §1): ``p_0`` is COUNT(*)
  and each SQL aggregate adds a sum of its non-null values and a count of them, so SUM, COUNT
  and AVG keep SQL's NULL rules;
- for a regression view, a **cofactor triple** ``c``, ``s__<f>``, ``q__<f>__<g>`` over the
  features (``CofactorRing``, Def. 7.2), restricted to the features lifted below the view (the
  paper's non-zero blocks, §7.2).

``multiply`` is ⊗ written once for any values with ``+`` and ``*``: Python floats in the tests
(checked against ``rings.py``) and pyspark Columns in the maintainer (``a * b`` of two Columns
is a Column expression), so a join of views multiplies payloads in one ``select``.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lakeivm.views.fivm.rings import CofactorRing

ALIVE = "p_0"


@dataclass(frozen=True)
class PayloadRing:
    """Sum vector of ``sums`` components times the cofactor ring over ``features`` (may be empty).

    ``p_0`` counts join tuples: a stored key whose ``p_0`` is 0 holds no tuple, so every other
    component is 0 too (up to float residue) and the key is deleted (``rings.is_dead``).
    """

    sums: int
    features: tuple[str, ...] = ()

    @property
    def cofactor(self) -> CofactorRing | None:
        from lakeivm.views.fivm.rings import CofactorRing  # numpy: not imported by a command that does not need it

        return CofactorRing(self.features) if self.features else None

    def sum_columns(self) -> tuple[str, ...]:
        return tuple(f"p_{k}" for k in range(self.sums))

    def columns(self, lifted: Sequence[str]) -> tuple[str, ...]:
        """The payload columns of a view whose subtree lifts the features ``lifted``."""
        cofactor = self.cofactor
        return self.sum_columns() + (cofactor.flat_columns(lifted) if cofactor else ())

    def lifted(self, features: Sequence[str]) -> tuple[str, ...]:
        """``features`` in ring order (the order of flat columns)."""
        return tuple(f for f in self.features if f in set(features))

    def multiply(self, factors: Sequence[tuple[Sequence[str], Mapping[str, Any]]]) -> dict[str, Any]:
        """⊗ of payloads given as (lifted features, {column: value}); the lifted sets are disjoint
        (each feature is lifted at one leaf). O(k·m²) values for k factors and m features."""
        (lifted, out), rest = factors[0], factors[1:]
        lifted, out = self.lifted(lifted), dict(out)
        for other_lifted, other in rest:
            out = {**{p: out[p] * other[p] for p in self.sum_columns()},
                   **self._cofactor_product(lifted, out, self.lifted(other_lifted), other)}
            lifted = self.lifted((*lifted, *other_lifted))
        return {c: out[c] for c in self.columns(lifted)}

    def _cofactor_product(self, a_lifted: Sequence[str], a: Mapping[str, Any],
                          b_lifted: Sequence[str], b: Mapping[str, Any]) -> dict[str, Any]:
        """Def. 7.2 on blocks: (c_a c_b, c_b s_a + c_a s_b, c_b Q_a + c_a Q_b + s_a s_bᵀ + s_b s_aᵀ);
        with disjoint lifted sets each entry has one non-zero term."""
        if not self.features:
            return {}
        in_a = set(a_lifted)
        both = self.lifted((*a_lifted, *b_lifted))
        out = {"c": a["c"] * b["c"]}
        for v in both:
            out[f"s__{v}"] = b["c"] * a[f"s__{v}"] if v in in_a else a["c"] * b[f"s__{v}"]
        for i, u in enumerate(both):
            for v in both[i:]:
                q = f"q__{u}__{v}"
                if u in in_a and v in in_a:
                    out[q] = b["c"] * a[q]
                elif u not in in_a and v not in in_a:
                    out[q] = a["c"] * b[q]
                else:
                    out[q] = (a if u in in_a else b)[f"s__{u}"] * (a if v in in_a else b)[f"s__{v}"]
        return out
