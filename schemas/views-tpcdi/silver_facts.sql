-- A TPC-DI-style pipeline, silver layer: the facts (TPC-DI §4.5: DimTrade, FactCashBalances,
-- FactHoldings, FactMarketHistory with its 52-week window, FactWatches).

-- lakeivm: deadline=2m
CREATE MATERIALIZED VIEW s_trade_lifecycle
COMMENT 'When each trade was created and closed, from its status history'
AS SELECT th_t_id AS trade_id,
          MIN(CASE WHEN th_st_id IN ('SBMT', 'PNDG') THEN th_dts END) AS create_ts,
          MAX(CASE WHEN th_st_id IN ('CMPT', 'CNCL') THEN th_dts END) AS close_ts,
          COUNT(*) AS status_changes
   FROM trade_history
   GROUP BY th_t_id;

-- lakeivm: deadline=2m
CREATE MATERIALIZED VIEW dim_trade
AS SELECT md5(CAST(t.t_id AS STRING)) AS sk_trade_id, t.t_id AS trade_id, t.t_ca_id AS ca_id, t.t_s_symb AS symbol,
          st.st_name AS status, tt.tt_name AS trade_type, tt.tt_is_sell AS is_sell, t.t_is_cash = 1 AS is_cash,
          t.t_qty AS quantity, t.t_bid_price AS bid_price, t.t_trade_price AS trade_price,
          t.t_chrg AS fee, t.t_comm AS commission, t.t_tax AS tax, t.t_exec_name AS executed_by,
          l.create_ts, l.close_ts
   FROM trades t
   JOIN status_type st ON t.t_st_id = st.st_id
   JOIN trade_type tt ON t.t_tt_id = tt.tt_id
   LEFT JOIN s_trade_lifecycle l ON l.trade_id = t.t_id;

-- lakeivm: deadline=2m
CREATE MATERIALIZED VIEW fact_cash_balances
COMMENT 'Each account''s cash at the end of each day it moved'
AS WITH daily AS (
     SELECT ct_ca_id AS ca_id, to_date(ct_dts) AS day, SUM(ct_amt) AS day_amount, COUNT(*) AS transactions
     FROM cash_transactions
     GROUP BY ct_ca_id, to_date(ct_dts))
   SELECT ca_id, day, day_amount, transactions,
          SUM(day_amount) OVER (PARTITION BY ca_id ORDER BY day ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS cash
   FROM daily;

-- lakeivm: deadline=2m
CREATE MATERIALIZED VIEW fact_holdings
AS SELECT h.hh_h_t_id AS holding_trade_id, h.hh_t_id AS trade_id, t.ca_id, t.symbol, t.close_ts,
          h.hh_before_qty AS before_quantity, h.hh_after_qty AS current_holding
   FROM holding_history h JOIN dim_trade t ON h.hh_t_id = t.trade_id;

-- lakeivm: deadline=2m
CREATE MATERIALIZED VIEW fact_market_history
COMMENT 'Daily market data with the 52-week high and low'
AS SELECT dm_s_symb AS symbol, dm_date, dm_close, dm_high, dm_low, dm_vol,
          MAX(dm_high) OVER (PARTITION BY dm_s_symb ORDER BY dm_date ROWS BETWEEN 364 PRECEDING AND CURRENT ROW) AS fifty_two_week_high,
          MIN(dm_low) OVER (PARTITION BY dm_s_symb ORDER BY dm_date ROWS BETWEEN 364 PRECEDING AND CURRENT ROW) AS fifty_two_week_low,
          AVG(dm_close) OVER (PARTITION BY dm_s_symb ORDER BY dm_date ROWS BETWEEN 19 PRECEDING AND CURRENT ROW) AS close_20d_avg
   FROM daily_market;

-- lakeivm: deadline=2m
CREATE MATERIALIZED VIEW s_latest_close
COMMENT 'Each security''s latest market day'
AS WITH ranked AS (
     SELECT dm_s_symb AS symbol, dm_date, dm_close,
            ROW_NUMBER() OVER (PARTITION BY dm_s_symb ORDER BY dm_date DESC) AS rn
     FROM daily_market)
   SELECT symbol, dm_date, dm_close FROM ranked WHERE rn = 1;

-- lakeivm: deadline=2m
CREATE MATERIALIZED VIEW s_eps_4q
COMMENT 'Each company''s earnings per share over its last four quarters'
AS SELECT cik, year, quarter,
          SUM(eps) OVER (PARTITION BY cik ORDER BY year, quarter ROWS BETWEEN 3 PRECEDING AND CURRENT ROW) AS eps_4q,
          ROW_NUMBER() OVER (PARTITION BY cik ORDER BY year DESC, quarter DESC) = 1 AS is_latest
   FROM finwire_fin;

-- lakeivm: deadline=2m
CREATE MATERIALIZED VIEW fact_watches
AS SELECT w_c_id AS c_id, w_s_symb AS symbol,
          MIN(CASE WHEN w_action = 'ACTV' THEN w_dts END) AS placed_ts,
          MAX(CASE WHEN w_action = 'CNCL' THEN w_dts END) AS removed_ts
   FROM watch_history
   GROUP BY w_c_id, w_s_symb;
