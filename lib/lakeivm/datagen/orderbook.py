"""Seeded order-book generator: ``bids`` and ``asks`` rows as a price random walk, plus a change stream.

Modelled on the DBToaster finance traces the RPAI paper streams (§5.1.1): a mid price walks by
at most ``step`` ticks per event, bids are placed up to ``depth`` ticks below it and asks up to
``depth`` ticks above. Deletes remove a uniformly chosen live row, so the stream never deletes a
row that is absent. Prices are integer ticks, or Decimals (``ticks * tick``) when ``tick`` is set.
Everything is drawn from one ``random.Random(seed)``: the same arguments give the same stream.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from decimal import Decimal

from lakeivm.errors import InvalidInput
from lakeivm.views.nested.events import BOOK_TABLES, BookRow, Event, Number


@dataclass
class OrderBookGenerator:
    """A live bids/asks book that emits insert and delete events as it changes.

    Example::

        gen = OrderBookGenerator(seed=1)
        book = gen.initial_book(1000)          # 1000 insert events (about half bids, half asks)
        stream = gen.events(10_000, delete_ratio=0.3)
        gen.rows("bids")                       # the live bids after both
    """

    seed: int = 0
    brokers: int = 10
    start_price: int = 10_000
    step: int = 2
    depth: int = 50
    max_volume: int = 100
    zero_volume_rate: float = 0.0
    tick: Decimal | None = None
    _live: dict[str, list[BookRow]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.brokers < 1 or self.start_price < 1 or self.step < 0 or self.depth < 1 or self.max_volume < 1:
            raise InvalidInput("order book needs brokers, start_price, depth, max_volume >= 1 and step >= 0")
        if not 0.0 <= self.zero_volume_rate <= 1.0:
            raise InvalidInput(f"zero_volume_rate must be in [0, 1], got {self.zero_volume_rate}")
        self._rng = random.Random(self.seed)
        self._mid = self.start_price
        self._live = {table: [] for table in BOOK_TABLES}

    def initial_book(self, n: int) -> list[Event]:
        """Insert events for an initial book of ``n`` rows, alternating bids and asks."""
        return [self._insert(BOOK_TABLES[i % 2]) for i in range(n)]

    def events(self, count: int, delete_ratio: float = 0.3) -> list[Event]:
        """``count`` events; each is a delete of a live row with probability ``delete_ratio``."""
        if not 0.0 <= delete_ratio <= 1.0:
            raise InvalidInput(f"delete_ratio must be in [0, 1], got {delete_ratio}")
        out = []
        for _ in range(count):
            table = self._rng.choice(BOOK_TABLES)
            if self._live[table] and self._rng.random() < delete_ratio:
                out.append(self._delete(table))
            else:
                out.append(self._insert(table))
        return out

    def rows(self, table: str) -> list[BookRow]:
        """The live rows of ``table`` (a copy; duplicates appear once per copy)."""
        if table not in self._live:
            raise InvalidInput(f"unknown order-book table {table!r}; expected one of {BOOK_TABLES}")
        return list(self._live[table])

    def _insert(self, table: str) -> Event:
        self._mid = max(self.depth + 1, self._mid + self._rng.randint(-self.step, self.step))
        offset = self._rng.randint(1, self.depth)
        ticks = self._mid - offset if table == "bids" else self._mid + offset
        volume = 0 if self._rng.random() < self.zero_volume_rate else self._rng.randint(1, self.max_volume)
        row = BookRow(self._rng.randrange(self.brokers), self._price(ticks), volume)
        self._live[table].append(row)
        return Event(table, row, 1)

    def _delete(self, table: str) -> Event:
        live = self._live[table]
        i = self._rng.randrange(len(live))
        live[i], live[-1] = live[-1], live[i]
        return Event(table, live.pop(), -1)

    def _price(self, ticks: int) -> Number:
        return ticks if self.tick is None else ticks * self.tick


BOOK_DDL = "broker_id int, price decimal(12,2), volume bigint"


def write_orderbook(lake, rows: int, seed: int = 1, mode: str = "error") -> dict[str, int]:
    """Write an initial book of ``rows`` rows as Delta tables ``bids`` and ``asks`` (CDF on).

    Prices are cents (DECIMAL(12,2)), volumes BIGINT, as the order-book views expect
    (``lakeivm/schemas/views-orderbook``). Returns the row count per table.
    """
    gen = OrderBookGenerator(seed=seed, tick=Decimal("0.01"))
    gen.initial_book(rows)
    counts = {}
    for table in BOOK_TABLES:
        data = [(r.broker_id, r.price, r.volume) for r in gen.rows(table)]
        lake.create_table(table, lake.spark.createDataFrame(data, BOOK_DDL), mode=mode)
        counts[table] = len(data)
    return counts


def apply_orderbook_events(lake, events: list[Event]) -> dict[str, int]:
    """Write a batch of order-book events to the Delta tables, one or two commits per touched table.

    A delete removes one copy of its row (as the generator's book does): rows whose count drops are
    deleted in one commit and their surviving copies appended with the inserts in the next. Returns
    the number of commits per table.
    """
    from collections import Counter

    net: dict[str, Counter] = {t: Counter() for t in BOOK_TABLES}
    for event in events:
        net[event.table][(event.row.broker_id, event.row.price, event.row.volume)] += event.sign
    commits = {}
    for table, change in net.items():
        path, lowered = lake.table_path(table), [row for row, m in change.items() if m < 0]
        appended = [row for row, m in change.items() for _ in range(max(m, 0))]
        commits[table] = 0
        if lowered:
            present = Counter(tuple(r) for r in lake.read(path).select("broker_id", "price", "volume").collect())
            short = [row for row in lowered if present[row] + change[row] < 0]
            if short:
                raise InvalidInput(f"{table}: the batch deletes rows that are not in the table, e.g. {short[0]}")
            keys = lake.spark.createDataFrame(lowered, BOOK_DDL)
            lake.merge(path, keys, "t.broker_id <=> s.broker_id AND t.price <=> s.price AND t.volume <=> s.volume",
                       "WHEN MATCHED THEN DELETE")
            appended += [row for row in lowered for _ in range(present[row] + change[row])]
            commits[table] += 1
        if appended:
            lake.spark.createDataFrame(appended, BOOK_DDL).write.format("delta").mode("append").save(path)
            commits[table] += 1
    return commits
