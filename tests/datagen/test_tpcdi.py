"""The TPC-DI-style generator: seeded, its batches mostly append with real UPDATEs and DELETEs in the
change data feed, and the brokerage stays consistent (every settled trade has its history, cash and
holding rows; a cancelled one has none). delta-rs writes and reads: no Spark."""
from __future__ import annotations

from collections import Counter

import pytest
from deltalake import DeltaTable

from lakeivm.datagen.tpcdi import TABLES, TpcdiChangeStream, generate_tpcdi
from lakeivm.errors import InvalidInput
from lakeivm.store.lake import Lake


def brokerage(tmp_path, seed: int = 1, batches: int = 2) -> tuple[Lake, TpcdiChangeStream]:
    lake = Lake(lambda: None, str(tmp_path / f"lake{seed}"))  # no Spark: delta-rs writes a local lake
    stream = generate_tpcdi(lake, customers=60, seed=seed, progress=lambda line: None)
    for _ in range(batches):
        stream.batch()
    return lake, stream


def rows(lake: Lake, table: str) -> list[dict]:
    return DeltaTable(lake.table_path(table)).to_pyarrow_table().to_pylist()


def test_same_seed_same_lake(tmp_path):
    (a, _), (b, _), (c, _) = brokerage(tmp_path / "a"), brokerage(tmp_path / "b"), brokerage(tmp_path / "c", seed=2)
    for table in TABLES:
        key = lambda row: tuple(str(v) for v in row.values())  # noqa: E731
        assert sorted(rows(a, table), key=key) == sorted(rows(b, table), key=key), table
    assert rows(a, "trades") != rows(c, "trades")


def test_trades_settle_with_their_history_cash_and_holdings(tmp_path):
    lake, stream = brokerage(tmp_path, batches=3)
    trades = {row["t_id"]: row for row in rows(lake, "trades")}
    pending = {t_id for t_id, *_ in stream._pending}
    history = Counter((row["th_t_id"], row["th_st_id"]) for row in rows(lake, "trade_history"))
    cash = Counter(row["ct_ca_id"] for row in rows(lake, "cash_transactions"))
    held = {row["hh_t_id"] for row in rows(lake, "holding_history")}
    assert pending and all(trades[t_id]["t_st_id"] == "SBMT" for t_id in pending)
    for t_id, trade in trades.items():
        assert history[(t_id, "SBMT")] == 1, trade
        if trade["t_st_id"] == "CMPT":
            assert trade["t_trade_price"] is not None and history[(t_id, "CMPT")] == 1 and t_id in held
            assert cash[trade["t_ca_id"]] > 0
        elif trade["t_st_id"] == "CNCL":
            assert trade["t_trade_price"] is None and history[(t_id, "CNCL")] == 1 and t_id not in held
        else:
            assert t_id in pending
    assert Counter(t["t_st_id"] for t in trades.values())["CMPT"] > Counter(t["t_st_id"] for t in trades.values())["CNCL"]


def test_batches_append_update_and_delete_through_the_change_data_feed(tmp_path):
    lake, _ = brokerage(tmp_path, batches=3)
    changes = {}
    for table in ("trades", "prospects", "daily_market", "customer_mgmt"):
        feed = DeltaTable(lake.table_path(table)).load_cdf(starting_version=1).read_all()
        changes[table] = Counter(feed.column("_change_type").to_pylist())
    assert changes["trades"]["update_postimage"] > 0 and changes["trades"]["insert"] > 0  # settled, submitted
    assert changes["prospects"]["delete"] > 0 and changes["prospects"]["update_postimage"] > 0
    assert set(changes["daily_market"]) == {"insert"} and set(changes["customer_mgmt"]) == {"insert"}  # appends only
    updates = [row for row in rows(lake, "customer_mgmt") if row["action_type"] == "UPDCUST"]
    assert updates and all(row["c_l_name"] is None for row in updates)  # an update leaves unchanged fields NULL


def test_too_small_a_brokerage_is_refused(tmp_path):
    with pytest.raises(InvalidInput, match="at least 10 customers"):
        TpcdiChangeStream(Lake(lambda: None, str(tmp_path)), customers=3)
