"""R-MAT graphs and edge streams: seeded, skewed, and valid as edge sets."""
from __future__ import annotations

from collections import Counter

import pytest

from lakeivm.datagen.graph import RMat, edge_stream, edges_table, rmat_edges
from lakeivm.errors import InvalidInput


def test_rmat_is_seeded_distinct_and_in_range() -> None:
    edges = rmat_edges(10, 5000, seed=3)
    assert edges == rmat_edges(10, 5000, seed=3)
    assert edges != rmat_edges(10, 5000, seed=4)
    assert len(edges) == len(set(edges)) == 5000
    assert all(0 <= a < 1024 and 0 <= b < 1024 and a != b for a, b in edges)
    assert any(a == b for a, b in rmat_edges(4, 60, seed=1, self_loops=True))


def test_rmat_degrees_are_skewed() -> None:
    edges = rmat_edges(12, 30000, seed=5)
    for degrees in (Counter(a for a, _ in edges), Counter(b for _, b in edges)):
        mean = len(edges) / 4096
        assert max(degrees.values()) > 20 * mean
    uniform = rmat_edges(12, 30000, seed=5, probabilities=(0.25, 0.25, 0.25, 0.25))
    assert max(Counter(a for a, _ in uniform).values()) < 5 * 30000 / 4096


def test_edges_table_has_int64_columns() -> None:
    edges = rmat_edges(6, 100, seed=1)
    table = edges_table(edges)
    assert table.column_names == ["src", "dst"] and str(table.schema.field("src").type) == "int64"
    assert list(zip(table["src"].to_pylist(), table["dst"].to_pylist())) == edges


@pytest.mark.parametrize("delete_share", [0.0, 0.3, 0.5, 0.9, 1.0])
def test_stream_keeps_the_edge_set_valid(delete_share: float) -> None:
    edges = rmat_edges(9, 2000, seed=7)
    graph = set(edges)
    batches = list(edge_stream(edges, 9, batches=30, batch_size=100, seed=11, delete_share=delete_share))
    assert batches == list(edge_stream(edges, 9, batches=30, batch_size=100, seed=11, delete_share=delete_share))
    for batch in batches:
        assert len(batch.inserts) + len(batch.deletes) == 100
        assert len(set(batch.inserts)) == len(batch.inserts) and len(set(batch.deletes)) == len(batch.deletes)
        assert not set(batch.inserts) & set(batch.deletes)
        assert set(batch.deletes) <= graph and not set(batch.inserts) & graph
        assert all(a != b for a, b in batch.inserts)
        graph -= set(batch.deletes)
        graph |= set(batch.inserts)
    assert len(graph) == 2000 + sum(len(b.inserts) - len(b.deletes) for b in batches)
    if delete_share == 1.0:
        assert not graph


def test_stream_deletes_hit_hubs_and_inserts_keep_skew() -> None:
    edges = rmat_edges(11, 10000, seed=2)
    degree = Counter(a for a, _ in edges)
    hub = degree.most_common(1)[0][0]
    batches = list(edge_stream(edges, 11, batches=20, batch_size=500, seed=3))
    assert any(a == hub for b in batches for a, _ in b.deletes)
    inserted = Counter(a for b in batches for a, _ in b.inserts)
    assert max(inserted.values()) > 10 * sum(inserted.values()) / 2048


def test_batch_as_signed_changes_and_table() -> None:
    batch = next(edge_stream(rmat_edges(8, 500, seed=1), 8, batches=1, batch_size=50, seed=4))
    changes = batch.changes()
    assert sorted(changes) == sorted([(e, 1) for e in batch.inserts] + [(e, -1) for e in batch.deletes])
    table = batch.to_table()
    assert table.column_names == ["src", "dst", "sign"] and table.num_rows == 50
    assert sum(table["sign"].to_pylist()) == len(batch.inserts) - len(batch.deletes)


def test_rejects_bad_arguments() -> None:
    with pytest.raises(InvalidInput, match="probabilities"):
        RMat(5, 1, (0.5, 0.5, 0.5, 0.5))
    with pytest.raises(InvalidInput, match="scale"):
        RMat(0, 1)
    with pytest.raises(InvalidInput, match="edges"):
        rmat_edges(3, 40, seed=1)
    with pytest.raises(InvalidInput, match="delete_share"):
        next(edge_stream([], 5, batches=1, batch_size=1, seed=1, delete_share=2.0))
    with pytest.raises(InvalidInput, match="larger scale"):
        list(edge_stream([], 3, batches=10, batch_size=10, seed=1, delete_share=0.0))
