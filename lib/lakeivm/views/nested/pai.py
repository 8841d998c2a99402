"""PAI map: equality-correlated groups as a hash map of partial aggregates (paper §2.1.3, Fig. 1c).

Each correlation group (e.g. a price level, a broker) has a nested-aggregate value (its key) and a
vector of contributions to the outer aggregate. ``at(v)`` is the summed contributions of every
group whose key equals ``v``. Several groups may share a key, so a group's own share is kept
separately and only that share moves when the group's key changes: tied groups are never merged
(docs/kinds/nested.md#tied-aggregate-values). Every operation is O(1) expected.
"""
from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

from lakeivm.errors import InvalidInput

Sums = tuple[Any, ...]


class PaiMap:
    """group -> (key, contributions) and key -> summed contributions of the groups at that key."""

    def __init__(self, width: int) -> None:
        if width < 1:
            raise InvalidInput(f"a PAI map needs at least one contribution per group, got width={width}")
        self.width = width
        self._groups: dict[Hashable, tuple[Any, Sums]] = {}
        self._buckets: dict[Any, list[Any]] = {}

    def __len__(self) -> int:
        return len(self._groups)

    def add(self, group: Hashable, key_delta: Any, deltas: Sequence[Any]) -> None:
        """Move ``group``'s key by ``key_delta`` and its contributions by ``deltas``. O(1).

        A group whose key and contributions are all zero is dropped; keep a count among the
        contributions so that an empty group is distinguishable from a zero-sum one.
        """
        if group is None or key_delta is None or any(d is None for d in deltas):
            raise InvalidInput(f"NULL group, key or contribution for group {group!r}; filter NULLs first")
        if len(deltas) != self.width:
            raise InvalidInput(f"expected {self.width} contributions per group, got {len(deltas)}")
        key, vals = self._groups.get(group, (0, (0,) * self.width))
        self._bump(key, vals, -1)
        key, vals = key + key_delta, tuple(v + d for v, d in zip(vals, deltas))
        if key == 0 and not any(vals):
            self._groups.pop(group, None)
            return
        self._groups[group] = (key, vals)
        self._bump(key, vals, 1)

    def group(self, group: Hashable) -> tuple[Any, Sums]:
        """``group``'s (key, contributions); (0, zeros) if absent. O(1)."""
        return self._groups.get(group, (0, (0,) * self.width))

    def at(self, key: Any) -> Sums:
        """Summed contributions of the groups whose key equals ``key``. O(1)."""
        return tuple(self._buckets.get(key, (0,) * self.width))

    def check_invariants(self) -> None:
        """Assert that every bucket equals the brute-force sum of its groups' shares, none is empty."""
        expect: dict[Any, list[Any]] = {}
        for key, vals in self._groups.values():
            assert key != 0 or any(vals), "empty group kept"
            bucket = expect.setdefault(key, [0] * self.width)
            for i, v in enumerate(vals):
                bucket[i] += v
        expect = {k: v for k, v in expect.items() if any(v)}
        assert expect == self._buckets, "PAI buckets differ from the per-group shares"

    def _bump(self, key: Any, vals: Sums, sign: int) -> None:
        if not any(vals):
            return
        bucket = self._buckets.setdefault(key, [0] * self.width)
        for i, v in enumerate(vals):
            bucket[i] += sign * v
        if not any(bucket):
            del self._buckets[key]
