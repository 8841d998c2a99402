"""The order-book generator: seeded, never deletes an absent row, prices follow the walk."""
from __future__ import annotations

from collections import Counter
from decimal import Decimal

import pytest

from lakeivm.datagen.orderbook import OrderBookGenerator
from lakeivm.errors import InvalidInput


def replay(events) -> dict[str, Counter]:
    """Apply events to multisets, asserting every delete removes a present row."""
    tables: dict[str, Counter] = {"bids": Counter(), "asks": Counter()}
    for event in events:
        table = tables[event.table]
        if event.sign < 0:
            assert table[event.row] > 0, f"delete of an absent row {event.row}"
        table[event.row] += event.sign
    return {name: +t for name, t in tables.items()}


def test_same_seed_same_stream_and_rows_match_replay() -> None:
    a, b = OrderBookGenerator(seed=5), OrderBookGenerator(seed=5)
    events = a.initial_book(300) + a.events(2000, delete_ratio=0.4)
    assert events == b.initial_book(300) + b.events(2000, delete_ratio=0.4)
    assert events != OrderBookGenerator(seed=6).initial_book(300) + OrderBookGenerator(seed=6).events(2000, 0.4)
    tables = replay(events)
    assert tables["bids"] == Counter(a.rows("bids")) and tables["asks"] == Counter(a.rows("asks"))


def test_initial_book_and_delete_ratio() -> None:
    gen = OrderBookGenerator(seed=2, brokers=4)
    book = gen.initial_book(1000)
    assert len(book) == 1000 and all(e.sign == 1 for e in book)
    assert Counter(e.table for e in book) == {"bids": 500, "asks": 500}
    stream = gen.events(4000, delete_ratio=0.3)
    deletes = sum(e.sign < 0 for e in stream) / len(stream)
    assert 0.25 < deletes < 0.35
    assert {e.row.broker_id for e in book + stream} == set(range(4))
    assert gen.events(200, delete_ratio=0.0) and all(e.sign == 1 for e in gen.events(200, delete_ratio=0.0))


def test_prices_walk_bids_below_asks_at_insert() -> None:
    gen = OrderBookGenerator(seed=3, step=1, depth=5, start_price=100)
    inserts = [e for e in gen.initial_book(50) + gen.events(3000, 0.3) if e.sign > 0]
    assert all(1 <= e.row.volume <= gen.max_volume and e.row.price > 0 for e in inserts)
    prices = [e.row.price for e in inserts]
    jumps = [abs(cur - prev) for prev, cur in zip(prices, prices[1:])]
    assert max(jumps) <= 2 * gen.depth + gen.step
    bids = [e.row.price for e in inserts if e.table == "bids"]
    asks = [e.row.price for e in inserts if e.table == "asks"]
    assert sum(asks) / len(asks) > sum(bids) / len(bids)


def test_decimal_prices_and_zero_volumes() -> None:
    gen = OrderBookGenerator(seed=4, tick=Decimal("0.01"), zero_volume_rate=0.5)
    events = gen.initial_book(400) + gen.events(400)
    assert all(isinstance(e.row.price, Decimal) and e.row.price == e.row.price.quantize(Decimal("0.01"))
               for e in events)
    zeros = sum(e.row.volume == 0 for e in events if e.sign > 0)
    assert 0.3 < zeros / sum(e.sign > 0 for e in events) < 0.7
    replay(events)


def test_bad_arguments_named() -> None:
    with pytest.raises(InvalidInput, match="delete_ratio"):
        OrderBookGenerator().events(1, delete_ratio=2.0)
    with pytest.raises(InvalidInput, match="zero_volume_rate"):
        OrderBookGenerator(zero_volume_rate=-1)
    with pytest.raises(InvalidInput, match="unknown order-book table"):
        OrderBookGenerator().rows("trades")


@pytest.mark.heavy(172)
def test_written_book_and_event_batches_are_the_generators_rows(lake) -> None:
    """On Spark: write_orderbook, then an event batch (deletes of one copy included) leave the tables holding
    the generator's rows. (The shipped order-book views follow such event streams in tests/views/nested.)"""
    from lakeivm.datagen.orderbook import apply_orderbook_events, write_orderbook

    counts = write_orderbook(lake, 60, seed=4)
    assert sum(counts.values()) == 60
    gen = OrderBookGenerator(seed=4, tick=Decimal("0.01"))
    gen.initial_book(60)  # the same book write_orderbook wrote
    apply_orderbook_events(lake, gen.events(40, delete_ratio=0.4))
    for table in ("bids", "asks"):
        live = Counter((r.broker_id, r.price, r.volume) for r in gen.rows(table))
        assert Counter(tuple(r) for r in lake.read(lake.table_path(table)).collect()) == live
    with pytest.raises(InvalidInput, match="deletes rows that are not in the table"):
        from lakeivm.views.nested.events import BookRow, Event
        apply_orderbook_events(lake, [Event("bids", BookRow(99, Decimal("1.00"), 1), -1)])
