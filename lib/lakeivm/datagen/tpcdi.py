"""A seeded TPC-DI-style brokerage: the source tables of ``schemas/views-tpcdi`` and their batches.

Modelled on the TPC-DI specification's sources (§2.2: the HR file, CustomerMgmt actions, FINWIRE's
CMP/SEC/FIN records, Trade and TradeHistory, CashTransaction, HoldingHistory, DailyMarket,
WatchHistory, Prospect) and its incremental batches (§5.4): mostly appends -- new trades, their
status changes, cash and holdings, a market day, watches, customer and account actions -- with
some updates (a trade's completion sets its status and price; prospects change) and deletes
(cancelled watches withdrawn, prospects dropped). Not TPC-DI's data or its file formats: tables as
a lake holds them after ingestion, at a scale of ``customers``.

Everything is drawn from one ``random.Random(seed)``: the same arguments give the same lake. On a
local lake delta-rs writes the commits (as ``datagen.tpch`` does), else Spark.

Example::

    generate_tpcdi(lake, customers=200)          # the initial load (Batch 1)
    stream = TpcdiChangeStream(lake, seed=1)
    stream.batch()                               # one incremental batch: a market day
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any, Callable
from urllib.parse import urlparse

import pyarrow as pa

from lakeivm.datagen.writes import dml
from lakeivm.errors import InvalidInput

TS = pa.timestamp("us", tz="UTC")
MONEY = pa.decimal128(10, 2)
PRICE = pa.decimal128(8, 2)
SCHEMAS: dict[str, pa.Schema] = {
    "status_type": pa.schema([("st_id", pa.string()), ("st_name", pa.string())]),
    "trade_type": pa.schema([("tt_id", pa.string()), ("tt_name", pa.string()), ("tt_is_sell", pa.int32()), ("tt_is_mrkt", pa.int32())]),
    "industry": pa.schema([("in_id", pa.string()), ("in_name", pa.string()), ("in_sc_id", pa.string())]),
    "hr_employees": pa.schema([("employee_id", pa.int32()), ("manager_id", pa.int32()), ("first_name", pa.string()),
                               ("last_name", pa.string()), ("job_code", pa.int32()), ("branch", pa.string()),
                               ("office", pa.string()), ("phone", pa.string())]),
    "customer_mgmt": pa.schema([("action_id", pa.int64()), ("action_ts", TS), ("action_type", pa.string()), ("c_id", pa.int32()),
                                ("c_tax_id", pa.string()), ("c_l_name", pa.string()), ("c_f_name", pa.string()),
                                ("c_gender", pa.string()), ("c_tier", pa.int32()), ("c_dob", pa.date32()), ("c_email", pa.string()),
                                ("c_state", pa.string()), ("c_country", pa.string())]),
    "account_mgmt": pa.schema([("action_id", pa.int64()), ("action_ts", TS), ("action_type", pa.string()), ("ca_id", pa.int32()),
                               ("ca_c_id", pa.int32()), ("ca_b_id", pa.int32()), ("ca_name", pa.string()), ("ca_tax_st", pa.int32())]),
    "finwire_cmp": pa.schema([("pts", TS), ("cik", pa.int32()), ("company_name", pa.string()), ("status", pa.string()),
                              ("industry_id", pa.string()), ("sp_rating", pa.string()), ("ceo_name", pa.string()),
                              ("country", pa.string())]),
    "finwire_sec": pa.schema([("pts", TS), ("symbol", pa.string()), ("issue_type", pa.string()), ("status", pa.string()),
                              ("name", pa.string()), ("ex_id", pa.string()), ("sh_out", pa.int64()), ("dividend", PRICE),
                              ("cik", pa.int32())]),
    "finwire_fin": pa.schema([("pts", TS), ("cik", pa.int32()), ("year", pa.int32()), ("quarter", pa.int32()),
                              ("revenue", MONEY), ("earnings", MONEY), ("eps", PRICE)]),
    "trades": pa.schema([("t_id", pa.int64()), ("t_dts", TS), ("t_st_id", pa.string()), ("t_tt_id", pa.string()),
                         ("t_is_cash", pa.int32()), ("t_s_symb", pa.string()), ("t_qty", pa.int32()), ("t_bid_price", PRICE),
                         ("t_ca_id", pa.int32()), ("t_exec_name", pa.string()), ("t_trade_price", PRICE),
                         ("t_chrg", MONEY), ("t_comm", MONEY), ("t_tax", MONEY)]),
    "trade_history": pa.schema([("th_t_id", pa.int64()), ("th_dts", TS), ("th_st_id", pa.string())]),
    "cash_transactions": pa.schema([("ct_ca_id", pa.int32()), ("ct_dts", TS), ("ct_amt", MONEY), ("ct_name", pa.string())]),
    "holding_history": pa.schema([("hh_h_t_id", pa.int64()), ("hh_t_id", pa.int64()), ("hh_before_qty", pa.int32()),
                                  ("hh_after_qty", pa.int32())]),
    "daily_market": pa.schema([("dm_date", pa.date32()), ("dm_s_symb", pa.string()), ("dm_close", PRICE), ("dm_high", PRICE),
                               ("dm_low", PRICE), ("dm_vol", pa.int64())]),
    "watch_history": pa.schema([("w_c_id", pa.int32()), ("w_s_symb", pa.string()), ("w_dts", TS), ("w_action", pa.string())]),
    "prospects": pa.schema([("agency_id", pa.string()), ("last_name", pa.string()), ("first_name", pa.string()),
                            ("city", pa.string()), ("state", pa.string()), ("country", pa.string()), ("income", pa.int32()),
                            ("number_cars", pa.int32()), ("number_children", pa.int32()), ("marital_status", pa.string()),
                            ("age", pa.int32()), ("credit_rating", pa.int32()), ("own_or_rent", pa.string()),
                            ("number_credit_cards", pa.int32()), ("net_worth", pa.int32())]),
}
TABLES = tuple(SCHEMAS)

_STATUS = [("ACTV", "Active"), ("CMPT", "Completed"), ("CNCL", "Canceled"), ("PNDG", "Pending"), ("SBMT", "Submitted"),
           ("INAC", "Inactive")]
_TRADE_TYPES = [("TMB", "Market Buy", 0, 1), ("TMS", "Market Sell", 1, 1), ("TSL", "Stop Loss", 1, 0),
                ("TLS", "Limit Sell", 1, 0), ("TLB", "Limit Buy", 0, 0)]
_INDUSTRIES = [("AM", "Aerospace", "IN"), ("BK", "Banks", "FN"), ("CH", "Chemicals", "BM"), ("SW", "Software", "TC"),
               ("RT", "Retail", "CS"), ("UT", "Utilities", "UT"), ("PH", "Pharmaceuticals", "HC"), ("EN", "Energy", "EN")]
_LAST = ["Smith", "Jones", "Garcia", "Chen", "Okafor", "Novak", "Rossi", "Muller", "Kim", "Silva", "Dubois", "Haddad"]
_FIRST = ["Ann", "Bo", "Carla", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jun", "Kai", "Lea", "mia", "NOAH"]
_STATES = ["CA", "NY", "TX", "WA", "ON", "BC", "IL", "FL"]
_RATINGS = ["AAA", "AA+", "A", "A-", "BBB+", "BBB", "BB", "B", "CCC"]
START = datetime(2024, 1, 1, tzinfo=timezone.utc)  # the first market day after the history loaded
HISTORY_DAYS = 400  # daily_market's history: more than the 52-week window


@dataclass
class TpcdiChangeStream:
    """The brokerage's state and its seeded batches; ``generate_tpcdi`` makes one and loads it."""

    lake: Any
    customers: int = 200
    seed: int = 1
    day: int = 0
    _next: dict[str, int] = field(default_factory=dict)
    _pending: list[tuple] = field(default_factory=list)  # submitted trades: (t_id, ca_id, symbol, qty, type)
    _accounts: dict[int, int] = field(default_factory=dict)  # open account -> its customer
    _account_ids: list[int] | None = None  # sorted(_accounts), kept until an account opens or closes
    _watches: list[tuple[int, str]] = field(default_factory=list)  # active (customer, symbol)
    _close: dict[str, Decimal] = field(default_factory=dict)  # each symbol's last close

    def __post_init__(self) -> None:
        if self.customers < 10:
            raise InvalidInput(f"a TPC-DI-style lake needs at least 10 customers, got {self.customers}")
        self.rng = random.Random(self.seed)
        self.brokers = max(5, self.customers // 40)
        self.companies = max(8, self.customers // 25)
        self.symbols = [f"S{n:04d}" for n in range(self.companies * 3 // 2)]

    # --- the initial load ---------------------------------------------------------------------

    def initial_load(self, progress: Callable[[str], None] = print) -> dict[str, int]:
        """Batch 1: every table written (replaced) with the brokerage's history; returns row counts."""
        rng, at = self.rng, START - timedelta(days=1)
        rows: dict[str, list[tuple]] = {
            "status_type": _STATUS, "trade_type": _TRADE_TYPES, "industry": _INDUSTRIES,
            "hr_employees": [self._employee(n) for n in range(self.brokers + self.brokers // 2)],
        }
        rows["customer_mgmt"] = [self._new_customer(c, START - timedelta(days=rng.randint(30, 900))) for c in range(self.customers)]
        rows["account_mgmt"] = []
        for c in range(self.customers):
            for _ in range(rng.choice([1, 1, 2, 3])):
                rows["account_mgmt"].append(self._new_account(c, START - timedelta(days=rng.randint(1, 30))))
        rows["finwire_cmp"] = [self._company(cik, START - timedelta(days=1000 + cik)) for cik in range(self.companies)]
        rows["finwire_sec"] = [self._security(symbol, START - timedelta(days=990)) for symbol in self.symbols]
        rows["finwire_fin"] = [self._financials(cik, year, quarter) for cik in range(self.companies)
                               for year in (2022, 2023) for quarter in (1, 2, 3, 4)]
        rows["daily_market"] = [self._market_day(symbol, (START - timedelta(days=HISTORY_DAYS - d)).date())
                                for d in range(HISTORY_DAYS) for symbol in self.symbols]
        rows["trades"], rows["trade_history"], rows["cash_transactions"], rows["holding_history"] = [], [], [], []
        for _ in range(self.customers * 3):
            self._submit(rows, at - timedelta(minutes=rng.randint(1, 5000)))
        self._settle(rows, at)
        rows["watch_history"] = [self._watch(at - timedelta(hours=rng.randint(1, 2000))) for _ in range(self.customers)]
        rows["prospects"] = [self._prospect(n) for n in range(self.customers * 2)]
        counts = {}
        for table in TABLES:
            self._write(table, rows[table], "overwrite")
            counts[table] = len(rows[table])
            progress(f"  tables/{table}: {counts[table]} rows")
        return counts

    # --- a batch ------------------------------------------------------------------------------

    def batch(self, scale: float = 1.0) -> str:
        """One incremental batch (a market day): ``scale`` times the usual number of new trades and
        actions. Returns a one-line description."""
        rng = self.rng
        self.day += 1
        at = START + timedelta(days=self.day)
        rows: dict[str, list[tuple]] = {table: [] for table in TABLES}
        settled = self._settle(rows, at)  # yesterday's submitted trades complete (UPDATE) or cancel
        for _ in range(max(2, round(self.customers / 10 * scale))):
            self._submit(rows, at + timedelta(minutes=rng.randint(1, 400)))
        rows["daily_market"] = [self._market_day(symbol, at.date()) for symbol in self.symbols]
        for _ in range(max(1, round(self.customers / 50 * scale))):
            rows["watch_history"].append(self._watch(at + timedelta(minutes=rng.randint(1, 400))))
        for _ in range(max(1, round(self.customers / 100 * scale))):
            if self._watches:
                customer, symbol = self._watches.pop(rng.randrange(len(self._watches)))
                rows["watch_history"].append((customer, symbol, at + timedelta(minutes=rng.randint(400, 500)), "CNCL"))
        for _ in range(max(1, round(self.customers / 50 * scale))):
            rows["customer_mgmt"].append(self._customer_update(rng.randrange(self._next.get("c_id", 0)), at))
        if rng.random() < 0.5:
            c_id = self._next.get("c_id", 0)
            rows["customer_mgmt"].append(self._new_customer(c_id, at))
            rows["account_mgmt"].append(self._new_account(c_id, at + timedelta(minutes=1)))
        if rng.random() < 0.3 and len(self._accounts) > 2:
            ca_id = self._an_account()
            rows["account_mgmt"].append(self._account_update(ca_id, at, close=rng.random() < 0.3))
        if self.day % 5 == 0:
            cik = rng.randrange(self.companies)
            rows["finwire_cmp"].append(self._company(cik, at))
            rows["finwire_sec"].append(self._security(rng.choice(self.symbols), at))
        if self.day % 7 == 0:
            year, quarter = 2024 + self.day // 28, self.day // 7 % 4 + 1
            rows["finwire_fin"] += [self._financials(cik, year, quarter) for cik in rng.sample(range(self.companies), 3)]
        for table in TABLES:
            if rows[table]:
                self._write(table, rows[table], "append")
        dropped = self._change_prospects(at)
        withdrawn = self._withdraw_a_watch()
        return (f"day {self.day}: {len(rows['trades'])} trades submitted, {settled} settled, "
                f"{len(rows['customer_mgmt'])} customer actions, {dropped} prospects dropped, {withdrawn} watches withdrawn")

    # --- rows ---------------------------------------------------------------------------------

    def _id(self, name: str) -> int:
        self._next[name] = self._next.get(name, 0) + 1
        return self._next[name] - 1

    def _employee(self, n: int) -> tuple:
        rng = self.rng
        return (n, n // 5 if n >= 5 else None, rng.choice(_FIRST), rng.choice(_LAST), 314 if n < self.brokers else 535,
                rng.choice(["Main", "North", "Harbor"]), f"{rng.randint(1, 40)}F", f"555-{rng.randint(1000, 9999)}")

    def _new_customer(self, c_id: int, at: datetime) -> tuple:
        rng = self.rng
        self._next["c_id"] = max(self._next.get("c_id", 0), c_id + 1)
        last, first = rng.choice(_LAST), rng.choice(_FIRST)
        return (self._id("action"), at, "NEW", c_id, f"{rng.randint(100, 999)}-{rng.randint(10, 99)}-{c_id:04d}",
                f" {last} " if rng.random() < 0.1 else last, first, rng.choice(["M", "F", "f", "x", None]),
                rng.choice([1, 2, 3]), date(1950, 1, 1) + timedelta(days=rng.randint(0, 20000)),
                f"{first}.{last}@example.com".upper() if rng.random() < 0.2 else f"{first}.{last}@example.com",
                rng.choice(_STATES), rng.choice(["USA", "Canada"]))

    def _customer_update(self, c_id: int, at: datetime) -> tuple:
        """UPDCUST or INACT: only the changed fields are set, the rest NULL (CustomerMgmt's way)."""
        rng = self.rng
        if rng.random() < 0.1:
            return (self._id("action"), at, "INACT", c_id, *[None] * 9)
        tier = rng.choice([1, 2, 3]) if rng.random() < 0.5 else None
        email = f"c{c_id}.{self.day}@example.org" if rng.random() < 0.5 else None
        state = rng.choice(_STATES) if rng.random() < 0.3 else None
        return (self._id("action"), at, "UPDCUST", c_id, None, None, None, None, tier, None, email, state, None)

    def _new_account(self, c_id: int, at: datetime) -> tuple:
        ca_id = self._id("ca_id")
        self._accounts[ca_id], self._account_ids = c_id, None
        return (self._id("action"), at, "ADDACCT", ca_id, c_id, self.rng.randrange(self.brokers),
                f"Account {ca_id}", self.rng.choice([0, 1, 2]))

    def _account_update(self, ca_id: int, at: datetime, close: bool) -> tuple:
        if close:
            self._accounts.pop(ca_id)
            self._account_ids = None
            return (self._id("action"), at, "CLOSEACCT", ca_id, None, None, None, None)
        return (self._id("action"), at, "UPDACCT", ca_id, None, self.rng.randrange(self.brokers), None, self.rng.choice([0, 1, 2]))

    def _company(self, cik: int, at: datetime) -> tuple:
        rng = self.rng
        return (at, cik, f"Company {cik}", "ACTV", rng.choice(_INDUSTRIES)[0], rng.choice(_RATINGS), rng.choice(_LAST),
                rng.choice(["USA", "Canada", "UK"]))

    def _security(self, symbol: str, at: datetime) -> tuple:
        rng = self.rng
        cik = int(symbol[1:]) % self.companies
        return (at, symbol, rng.choice(["COMMON", "PREF_A"]), "ACTV", f"{symbol} shares", rng.choice(["NYSE", "NASDAQ"]),
                rng.randint(10**6, 10**8), Decimal(rng.randint(0, 300)) / 100, cik)

    def _financials(self, cik: int, year: int, quarter: int) -> tuple:
        rng = self.rng
        revenue = Decimal(rng.randint(10**6, 10**8)) / 100
        earnings = (revenue * Decimal(rng.randint(-10, 30)) / 100).quantize(Decimal("0.01"))
        return (datetime(year, 3 * quarter, 28, tzinfo=timezone.utc), cik, year, quarter, revenue, earnings,
                Decimal(rng.randint(-50, 400)) / 100)

    def _market_day(self, symbol: str, day: date) -> tuple:
        rng = self.rng
        close = self._close.get(symbol, Decimal(rng.randint(1000, 20000)) / 100)
        close = max(Decimal("1.00"), (close * Decimal(1 + rng.uniform(-0.04, 0.04))).quantize(Decimal("0.01")))
        self._close[symbol] = close
        high = (close * Decimal(1 + rng.uniform(0, 0.03))).quantize(Decimal("0.01"))
        low = (close * Decimal(1 - rng.uniform(0, 0.03))).quantize(Decimal("0.01"))
        return (day, symbol, close, high, low, rng.randint(1000, 10**6))

    def _an_account(self) -> int:
        """An open account, drawn uniformly (sorting the accounts once per change to them, not per
        trade: at 100,000 customers a sort per trade took the initial load over 15 minutes)."""
        if self._account_ids is None:
            self._account_ids = sorted(self._accounts)
        return self.rng.choice(self._account_ids)

    def _submit(self, rows: dict[str, list], at: datetime) -> None:
        """A submitted trade (status SBMT) and its first history row."""
        rng = self.rng
        t_id, ca_id = self._id("t_id"), self._an_account()
        kind, symbol = rng.choice(_TRADE_TYPES)[0], rng.choice(self.symbols)
        qty = rng.randint(1, 20) * 10
        bid = self._close.get(symbol, Decimal("50.00"))
        rows["trades"].append((t_id, at, "SBMT", kind, rng.choice([0, 1]), symbol, qty, bid, ca_id,
                               f"{rng.choice(_FIRST)} {rng.choice(_LAST)}", None, None, None, None))
        rows["trade_history"].append((t_id, at, "SBMT"))
        self._pending.append((t_id, ca_id, symbol, qty, kind))

    def _settle(self, rows: dict[str, list], at: datetime) -> int:
        """Every submitted trade completes (nine in ten: price, charges, cash and holding rows) or is
        cancelled: an UPDATE of ``trades`` (the rows of ``rows['trades']`` in place, for a load) and
        a history row."""
        rng, pending, self._pending = self.rng, self._pending, []
        updates: dict[int, tuple] = {}
        for t_id, ca_id, symbol, qty, kind in pending:
            when = at + timedelta(minutes=rng.randint(1, 30))
            if rng.random() < 0.1:
                updates[t_id] = ("CNCL", None, None, None, None)
                rows["trade_history"].append((t_id, when, "CNCL"))
                continue
            price = (self._close.get(symbol, Decimal("50.00")) * Decimal(1 + rng.uniform(-0.01, 0.01))).quantize(Decimal("0.01"))
            charge, commission = Decimal(rng.randint(100, 900)) / 100, (price * qty / 100).quantize(Decimal("0.01"))
            tax = (commission / 4).quantize(Decimal("0.01"))
            updates[t_id] = ("CMPT", price, charge, commission, tax)
            rows["trade_history"].append((t_id, when, "CMPT"))
            sign = 1 if kind in ("TMS", "TSL", "TLS") else -1
            rows["cash_transactions"].append((ca_id, when, (sign * price * qty - charge - commission).quantize(Decimal("0.01")),
                                              f"{kind} {symbol}"))
            rows["holding_history"].append((t_id, t_id, 0, -sign * qty))
        if rows["trades"]:  # the initial load: settle the rows before they are written
            rows["trades"][:] = [row[:2] + (updates[row[0]][0],) + row[2 + 1:10] + updates[row[0]][1:] if row[0] in updates else row
                                 for row in rows["trades"]]
        elif updates:
            for status in ("CNCL", "CMPT"):
                ids = [t_id for t_id, update in updates.items() if update[0] == status]
                if status == "CNCL" and ids:
                    self._dml("trades", f"t_id IN ({', '.join(map(str, ids))})", {"t_st_id": "'CNCL'"})
            completed = {t_id: update for t_id, update in updates.items() if update[0] == "CMPT"}
            if completed:
                self._complete(completed)
        return len(updates)

    def _complete(self, completed: dict[int, tuple]) -> None:
        """One UPDATE of ``trades`` setting each completed trade's status, price and charges."""
        def case(index: int) -> str:
            return "CASE t_id " + " ".join(f"WHEN {t_id} THEN {update[index]}" for t_id, update in completed.items()) + " END"

        self._dml("trades", f"t_id IN ({', '.join(map(str, completed))})",
                  {"t_st_id": "'CMPT'", "t_trade_price": f"CAST({case(1)} AS DECIMAL(8,2))",
                   "t_chrg": f"CAST({case(2)} AS DECIMAL(10,2))", "t_comm": f"CAST({case(3)} AS DECIMAL(10,2))",
                   "t_tax": f"CAST({case(4)} AS DECIMAL(10,2))"})

    def _watch(self, at: datetime) -> tuple:
        customer, symbol = self.rng.randrange(self._next.get("c_id", 1)), self.rng.choice(self.symbols)
        self._watches.append((customer, symbol))
        return (customer, symbol, at, "ACTV")

    def _withdraw_a_watch(self) -> int:
        """A watch recorded by mistake is withdrawn: a DELETE of its rows (one in three batches)."""
        if self.rng.random() >= 1 / 3 or not self._watches:
            return 0
        customer, symbol = self._watches.pop(self.rng.randrange(len(self._watches)))
        self._dml("watch_history", f"w_c_id = {customer} AND w_s_symb = '{symbol}'")
        return 1

    def _prospect(self, n: int) -> tuple:
        rng = self.rng
        return (f"AG{n:05d}", rng.choice(_LAST), rng.choice(_FIRST), rng.choice(["Oslo", "Lima", "Pune", "Austin"]),
                rng.choice(_STATES), rng.choice(["USA", "Canada"]), rng.randint(20, 300) * 1000, rng.randint(0, 5),
                rng.randint(0, 6), rng.choice(["S", "M", "D", "W", None]), rng.randint(18, 90), rng.randint(300, 850),
                rng.choice(["O", "R", None]), rng.randint(0, 10), rng.randint(0, 3000) * 1000)

    def _change_prospects(self, at: datetime) -> int:
        """The prospect file of the day: some incomes change (UPDATE), a few drop out (DELETE), a few are new."""
        rng = self.rng
        total = self._next.setdefault("prospect", self.customers * 2)
        changed = sorted(rng.sample(range(total), min(total, max(1, self.customers // 50))))
        self._dml("prospects", f"agency_id IN ({', '.join(repr(f'AG{n:05d}') for n in changed)})",
                  {"income": f"income + {rng.randint(1, 20) * 1000}"})
        dropped = f"AG{rng.randrange(total):05d}"
        self._dml("prospects", f"agency_id = '{dropped}'")
        self._write("prospects", [self._prospect(self._id("prospect")) for _ in range(max(1, self.customers // 100))], "append")
        return 1

    # --- writes -------------------------------------------------------------------------------

    def _write(self, table: str, rows: list[tuple], mode: str) -> None:
        """Append (or, for the load, replace) ``rows``: one commit, the change data feed on."""
        schema = SCHEMAS[table]
        data = pa.Table.from_pylist([dict(zip(schema.names, row)) for row in rows], schema)
        if self._local():
            self.lake.write_small(self.lake.table_path(table), data, mode, configuration={"delta.enableChangeDataFeed": "true"},
                                  new_schema=mode == "overwrite")
        elif mode == "overwrite":
            self.lake.create_table(table, self.lake.spark.createDataFrame(data.to_pandas(), _ddl(schema)), mode="overwrite")
        else:
            self.lake.spark.createDataFrame(data.to_pandas(), _ddl(schema)).write.format("delta").mode("append").save(
                self.lake.table_path(table))

    def _dml(self, table: str, where: str, updates: dict[str, str] | None = None) -> None:
        dml(self.lake, table, where, updates)

    def _local(self) -> bool:
        return not urlparse(self.lake.root).scheme


def _ddl(schema: pa.Schema) -> str:
    names = {pa.string(): "string", pa.int32(): "int", pa.int64(): "bigint", pa.date32(): "date", TS: "timestamp"}
    return ", ".join(f"{f.name} {names.get(f.type) or f'decimal({f.type.precision},{f.type.scale})'}" for f in schema)


def generate_tpcdi(lake, customers: int = 200, seed: int = 1, progress: Callable[[str], None] = print) -> TpcdiChangeStream:
    """Write the initial load of a TPC-DI-style lake of ``customers`` customers; returns its change stream."""
    stream = TpcdiChangeStream(lake, customers=customers, seed=seed)
    progress(f"TPC-DI-style brokerage: {customers} customers, {len(stream.symbols)} securities")
    stream.initial_load(progress)
    return stream
