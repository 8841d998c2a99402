"""Reservoir sampling with a predicate over a batched stream (Dai, Hu, Yi SIGMOD 2024, §3, Alg. 1/4/5).

Algorithm L (Li 1994) with geometric skips, run over a stream that mixes real items and dummies:
only real items enter the reservoir and w shrinks only on a real acceptance, so the sample is
distributed exactly like Algorithm L over the real items alone (§3.2, Theorem 3.1). The stream
arrives as batches of known length read through ``retrieve(z)``, which returns the item at 0-based
position z or ``None`` for a dummy (an item failing the predicate θ); the pending skip q carries
across batches. Expected cost Θ(Σ_i min(1, k/(r_i+1))) retrievals (Thm 3.2/3.3), O(k log(N/k)) on a
dense stream.

Everything a restart needs (items, w, q, counters and the RNG state) round-trips through
``to_state()``/``from_state()`` as plain JSON values, so a resumed run continues the very same
random process: re-initializing w at a restart would bias the sample toward recent items
(docs/kinds/join_sample.md#restarts-and-exact-re-bootstrap).
"""
from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any

from lakeivm.errors import InvalidInput, StateError

Retrieve = Callable[[int], Any]
STATE_VERSION = 1
_COUNTERS = ("seen", "stops", "dummy_stops", "accepted", "real_fill")


class PredicateReservoir:
    """A uniform k-sample without replacement of the real items seen so far (RSWP, Alg. 5).

    ``w is None`` is the paper's ``w = +∞`` sentinel: the reservoir has not been full yet and every
    item is read (fill phase). Afterwards w is the k-th smallest implicit key and ``skip`` (q) the
    number of items to pass before the next stop. Counters: ``seen`` (Σ batch lengths), ``stops``,
    ``dummy_stops``, ``accepted`` (real stops) and ``real_fill`` (real items read while filling).
    """

    def __init__(self, k: int, seed: int) -> None:
        if not isinstance(k, int) or k < 1:
            raise InvalidInput(f"reservoir size k={k!r} must be a positive int; pass sample_size >= 1")
        self.k = k
        self.items: list[Any] = []
        self.w: float | None = None
        self.skip = 0
        self.counters = dict.fromkeys(_COUNTERS, 0)
        self.rng = random.Random(seed)

    def feed(self, size: int, retrieve: Retrieve) -> None:
        """Process one batch of ``size`` items, calling ``retrieve`` only where the sampler stops (Alg. 5).

        Cost: O(size) retrievals while filling, then one retrieval per stop; a batch with no
        stop costs O(1) (``q -= size``).
        """
        if size < 0:
            raise InvalidInput(f"batch size {size} is negative; a batch holds >= 0 items")
        self.counters["seen"] += size
        pos = self._fill(size, retrieve)
        if len(self.items) < self.k:
            return
        if self.w is None:
            self.w = self._shrink(1.0)
            self.skip = self._draw_skip()
        while size - pos > self.skip:
            pos += self.skip
            item = retrieve(pos)
            pos += 1
            self.counters["stops"] += 1
            if item is None:
                self.counters["dummy_stops"] += 1
            else:
                self.counters["accepted"] += 1
                self.items[self.rng.randrange(self.k)] = item
                self.w = self._shrink(self.w)
            self.skip = self._draw_skip()
        self.skip -= size - pos

    def restore(self, items: list[Any], w: float | None) -> None:
        """Replace the sample by an exact bootstrap: S uniform, w ~ Beta(k, n-k+1), then q ~ Geo(w).

        Why that is exact: docs/kinds/join_sample.md#restarts-and-exact-re-bootstrap.

        ``w is None`` means the join has at most k results, all of which are ``items``. Draws come
        from ``self.rng``, the one seeded generator whose state ``to_state()`` persists.
        """
        if len(items) > self.k or (w is not None and len(items) < self.k):
            raise InvalidInput(f"bootstrap of {len(items)} items with w={w} does not fit k={self.k}")
        self.items = list(items)
        self.w = w
        self.skip = 0 if w is None else self._draw_skip()

    def check_invariants(self) -> None:
        """Assert the RSWP state promises: |S| <= k, full once w is set, w in (0,1], q >= 0."""
        assert len(self.items) <= self.k
        assert None not in self.items, "a dummy entered the reservoir"
        if self.w is None:
            assert self.skip == 0
        else:
            assert len(self.items) == self.k and 0.0 < self.w <= 1.0 and self.skip >= 0
        assert all(v >= 0 for v in self.counters.values())

    def to_state(self) -> dict[str, Any]:
        """Export everything a restart needs as JSON values (q as a decimal string: it can pass 2^63)."""
        version, internal, gauss = self.rng.getstate()
        return {
            "version": STATE_VERSION,
            "k": self.k,
            "items": list(self.items),
            "w": self.w,
            "skip": str(self.skip),
            "counters": dict(self.counters),
            "rng": [version, list(internal), gauss],
        }

    @classmethod
    def from_state(cls, state: dict[str, Any], decode_item: Callable[[Any], Any] = lambda x: x) -> PredicateReservoir:
        """Rebuild a reservoir from ``to_state()`` output; ``decode_item`` undoes JSON (e.g. list -> tuple)."""
        if state.get("version") != STATE_VERSION:
            raise StateError(f"reservoir state version {state.get('version')!r} is not {STATE_VERSION}; re-bootstrap the view")
        res = cls(state["k"], seed=0)
        res.items = [decode_item(x) for x in state["items"]]
        res.w = state["w"]
        res.skip = int(state["skip"])
        res.counters = {name: int(state["counters"][name]) for name in _COUNTERS}
        version, internal, gauss = state["rng"]
        res.rng.setstate((version, tuple(internal), gauss))
        res.check_invariants()
        return res

    def _fill(self, size: int, retrieve: Retrieve) -> int:
        pos = 0
        while len(self.items) < self.k and pos < size:
            item = retrieve(pos)
            pos += 1
            if item is not None:
                self.items.append(item)
                self.counters["real_fill"] += 1
        return pos

    def _uniform(self) -> float:
        """U ~ Uniform(0, 1]: never 0, so ln U is finite."""
        return 1.0 - self.rng.random()

    def _shrink(self, w: float) -> float:
        return w * self._uniform() ** (1.0 / self.k)

    def _draw_skip(self) -> int:
        """q ~ Geo(w), failures before the first success: ⌊ln U / ln(1−w)⌋ (the paper's misplaced parenthesis fixed)."""
        assert self.w is not None
        if self.w >= 1.0:
            return 0
        return math.floor(math.log(self._uniform()) / math.log1p(-self.w))
