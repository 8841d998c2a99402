"""Small join shapes and random insert streams shared by the join_sample tests."""
from __future__ import annotations

import random

SHAPES = {
    "line2": {"R1": ("a", "b"), "R2": ("b", "c")},
    "line3": {"R1": ("a", "b"), "R2": ("b", "c"), "R3": ("c", "d")},
    "line4": {"R1": ("a", "b"), "R2": ("b", "c"), "R3": ("c", "d"), "R4": ("d", "e")},
    "star3": {"S1": ("x", "a"), "S2": ("x", "b"), "S3": ("x", "c")},
    "branch": {"A": ("a", "b"), "B": ("b", "c", "d"), "C": ("c", "e"), "D": ("d", "f"), "E": ("f", "g")},
}


def random_stream(shape: dict[str, tuple[str, ...]], seed: int, per_relation: int, domain: int) -> list[tuple[str, int, tuple[int, ...]]]:
    """A shuffled insert stream of distinct (relation, row_id, row) triples over values 0..domain-1."""
    rnd = random.Random(seed)
    stream = []
    for rel, attrs in shape.items():
        rows = {tuple(rnd.randrange(domain) for _ in attrs) for _ in range(per_relation)}
        stream += [(rel, f"{rel}#{i}", row) for i, row in enumerate(sorted(rows))]
    rnd.shuffle(stream)
    return stream
