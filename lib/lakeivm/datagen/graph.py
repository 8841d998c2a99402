"""Seeded skewed graphs (R-MAT) and valid edge insert/delete streams for triangle-count views.

R-MAT (Chakrabarti, Zhan, Faloutsos, SDM 2004) drops each edge into one of four quadrants of the
adjacency matrix, recursively ``scale`` times, with probabilities (a, b, c, d). a > d gives
power-law degrees, so hubs exist and IVM^ε's heavy parts are non-empty. Vertex ids are permuted
(seeded) so hubs are not simply the smallest ids. Graphs are edge *sets*: a stream inserts only
absent edges and deletes only present ones, so every batch applies cleanly as Delta DELETE and
INSERT in either order.
"""
from __future__ import annotations

import random
from collections.abc import Container, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from lakeivm.errors import InvalidInput

if TYPE_CHECKING:
    import pyarrow as pa

Edge = tuple[int, int]
GRAPH500 = (0.57, 0.19, 0.19, 0.05)


@dataclass(frozen=True)
class EdgeBatch:
    """One batch of a stream: edges to insert (absent before) and to delete (present before)."""

    inserts: tuple[Edge, ...]
    deletes: tuple[Edge, ...]

    def changes(self) -> list[tuple[Edge, int]]:
        """The batch as signed changes: +1 per insert, -1 per delete."""
        return [(e, 1) for e in self.inserts] + [(e, -1) for e in self.deletes]

    def to_table(self) -> pa.Table:
        """Columns (src, dst, sign) as int64, inserts first."""
        import pyarrow as pa

        changes = self.changes()
        return pa.table({
            "src": pa.array([e[0] for e, _ in changes], pa.int64()),
            "dst": pa.array([e[1] for e, _ in changes], pa.int64()),
            "sign": pa.array([s for _, s in changes], pa.int64()),
        })


class RMat:
    """An R-MAT edge sampler over 2^scale vertices; O(scale) per edge, vectorized with numpy."""

    def __init__(self, scale: int, seed: int, probabilities: tuple[float, float, float, float] = GRAPH500) -> None:
        if not 1 <= scale <= 40:
            raise InvalidInput(f"R-MAT scale must be in [1, 40] (2^scale vertices), got {scale}")
        if len(probabilities) != 4 or min(probabilities) < 0 or abs(sum(probabilities) - 1) > 1e-9:
            raise InvalidInput(f"R-MAT needs four probabilities >= 0 summing to 1, got {probabilities}; e.g. {GRAPH500}")
        self.scale = scale
        self.vertices = 1 << scale
        self._cumulative = np.cumsum(probabilities)
        self._rng = np.random.default_rng(seed)
        self._permutation = self._rng.permutation(self.vertices) if scale <= 24 else None

    def sample(self, count: int) -> np.ndarray:
        """``count`` edges (with repeats) as an int64 array of shape (count, 2)."""
        src = np.zeros(count, dtype=np.int64)
        dst = np.zeros(count, dtype=np.int64)
        for _ in range(self.scale):
            quadrant = np.searchsorted(self._cumulative, self._rng.random(count), side="right").clip(max=3)
            src = (src << 1) | (quadrant >> 1)
            dst = (dst << 1) | (quadrant & 1)
        if self._permutation is not None:
            src, dst = self._permutation[src], self._permutation[dst]
        return np.stack([src, dst], axis=1)


def rmat_edges(scale: int, edges: int, seed: int, probabilities: tuple[float, float, float, float] = GRAPH500,
               self_loops: bool = False) -> list[Edge]:
    """``edges`` distinct directed R-MAT edges over 2^scale vertices, in generation order.

    Skew: with the Graph500 probabilities the maximum out-degree is orders of magnitude above the
    mean. Self-loops are dropped unless ``self_loops``. Raises InvalidInput when the request
    cannot be met (more than a quarter of all possible edges).
    """
    sampler = RMat(scale, seed, probabilities)
    if edges < 0 or edges > sampler.vertices ** 2 // 4:
        raise InvalidInput(f"asked for {edges} edges over {sampler.vertices} vertices; use 0 <= edges <= "
                           f"{sampler.vertices ** 2 // 4} or a larger scale")
    return _distinct(sampler, edges, self_loops)


def edges_table(edges: Iterable[Edge]) -> pa.Table:
    """Edges as a pyarrow table with int64 columns (src, dst)."""
    import pyarrow as pa

    pairs = list(edges)
    return pa.table({"src": pa.array([a for a, _ in pairs], pa.int64()),
                     "dst": pa.array([b for _, b in pairs], pa.int64())})


def edge_stream(edges: Iterable[Edge], scale: int, batches: int, batch_size: int, seed: int,
                delete_share: float = 0.5, probabilities: tuple[float, float, float, float] = GRAPH500,
                self_loops: bool = False) -> Iterator[EdgeBatch]:
    """Batches of edge changes against the graph ``edges`` (over 2^scale vertices).

    Each batch deletes about ``delete_share``·``batch_size`` present edges (uniformly, so hubs lose
    edges in proportion to their degree; fewer if the graph runs out) and inserts the rest as new
    R-MAT edges, keeping the skew. Inserts and deletes of one batch are disjoint. O(batch_size)
    per batch.
    """
    if not 0.0 <= delete_share <= 1.0 or batch_size < 0 or batches < 0:
        raise InvalidInput(f"need 0 <= delete_share <= 1 and batches, batch_size >= 0; got {delete_share}, "
                           f"{batches}, {batch_size}")
    rng = random.Random(seed)
    sampler = RMat(scale, seed + 1, probabilities)
    present = list(dict.fromkeys(edges))
    position = {e: i for i, e in enumerate(present)}
    for _ in range(batches):
        wanted = sum(rng.random() < delete_share for _ in range(batch_size))
        if len(present) + batch_size > sampler.vertices ** 2 // 4:
            raise InvalidInput(f"the graph would exceed a quarter of the {sampler.vertices ** 2} possible edges; "
                               "use a larger scale or a higher delete_share")
        deletes = tuple(_remove(present, position, rng.randrange(len(present))) for _ in range(min(wanted, len(present))))
        inserts = _distinct(sampler, batch_size - len(deletes), self_loops, position, frozenset(deletes))
        for edge in inserts:
            position[edge] = len(present)
            present.append(edge)
        yield EdgeBatch(tuple(inserts), deletes)


def _distinct(sampler: RMat, count: int, self_loops: bool, *excluded: Container[Edge]) -> list[Edge]:
    """``count`` new distinct edges in none of ``excluded``, oversampling in rounds."""
    chosen: dict[Edge, None] = {}
    while len(chosen) < count:
        for a, b in sampler.sample(max(16, 2 * (count - len(chosen)))).tolist():
            if (self_loops or a != b) and not any((a, b) in c for c in excluded):
                chosen.setdefault((a, b))
                if len(chosen) == count:
                    break
    return list(chosen)


def _remove(present: list[Edge], position: dict[Edge, int], index: int) -> Edge:
    """Swap-remove ``present[index]`` in O(1), keeping ``position`` in sync."""
    edge, last = present[index], present[-1]
    present[index], position[last] = last, index
    present.pop()
    del position[edge]
    return edge


def write_graph(lake, edges: Iterable[Edge], table: str = "edges") -> int:
    """Create (or replace) base table ``table`` (src, dst BIGINT, CDF on) holding ``edges``; returns the count."""
    frame = lake.spark.createDataFrame(edges_table(edges).to_pandas())
    lake.create_table(table, frame, mode="overwrite")
    return lake.read(lake.table_path(table)).count()


def apply_edge_batch(lake, batch: EdgeBatch, table: str = "edges") -> None:
    """Commit one batch to ``table``: a MERGE deleting its deletes, then an append of its inserts."""
    path = lake.table_path(table)
    if batch.deletes:
        gone = lake.spark.createDataFrame(EdgeBatch((), batch.deletes).to_table().to_pandas()).drop("sign")
        lake.merge(path, gone, "t.src = s.src AND t.dst = s.dst", "WHEN MATCHED THEN DELETE")
    if batch.inserts:
        added = lake.spark.createDataFrame(EdgeBatch(batch.inserts, ()).to_table().to_pandas()).drop("sign")
        added.write.format("delta").mode("append").save(path)
