"""Source rows and signed change events fed to the nested-aggregate evaluators.

A Delta change data feed maps onto these (docs/kinds/nested.md#state-commits-and-query-texts):
``insert``/``update_postimage`` give ``sign=+1``, ``delete``/``update_preimage`` give ``sign=-1``; a
delete removes one copy of a row.
"""
from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Union

from lakeivm.errors import InvalidInput

Number = Union[int, Decimal]
BOOK_TABLES = ("bids", "asks")
TPCH_TABLES = ("lineitem", "part")


@dataclass(frozen=True)
class BookRow:
    """One order-book row of ``bids`` or ``asks``."""

    broker_id: int
    price: Number
    volume: Number


@dataclass(frozen=True)
class LineitemRow:
    """The ``lineitem`` columns TPC-H Q17 reads."""

    l_partkey: int
    l_quantity: Number
    l_extendedprice: Number


@dataclass(frozen=True)
class PartRow:
    """The ``part`` columns TPC-H Q17 reads."""

    p_partkey: int
    p_brand: str
    p_container: str


Row = Union[BookRow, LineitemRow, PartRow]
_ROW_TYPES = {"bids": BookRow, "asks": BookRow, "lineitem": LineitemRow, "part": PartRow}


@dataclass(frozen=True)
class Event:
    """One row inserted (``sign=+1``) into or deleted (``sign=-1``) from ``table``."""

    table: str
    row: Row
    sign: int = 1

    def __post_init__(self) -> None:
        if self.table not in _ROW_TYPES:
            raise InvalidInput(f"unknown source table {self.table!r}; expected one of {sorted(_ROW_TYPES)}")
        if not isinstance(self.row, _ROW_TYPES[self.table]):
            raise InvalidInput(f"a {self.table} event needs a {_ROW_TYPES[self.table].__name__}, got {self.row!r}")
        if self.sign not in (1, -1):
            raise InvalidInput(f"event sign must be +1 (insert) or -1 (delete), got {self.sign!r}")
