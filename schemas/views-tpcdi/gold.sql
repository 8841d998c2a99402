-- A TPC-DI-style pipeline, gold layer: the analytics a brokerage's dashboards read, over the
-- silver dimensions and facts.

-- lakeivm: deadline=2m
CREATE MATERIALIZED VIEW g_customers_by_tier_state
AS SELECT tier, state, COUNT(*) AS customers
   FROM dim_customer_current
   WHERE status = 'Active'
   GROUP BY tier, state;

-- lakeivm: deadline=2m
CREATE MATERIALIZED VIEW g_customer_versions
COMMENT 'How often customers change: versions and distinct customers per tier'
AS SELECT tier, COUNT(*) AS versions, COUNT(DISTINCT c_id) AS customers
   FROM dim_customer
   GROUP BY tier;

-- lakeivm: deadline=2m
CREATE MATERIALIZED VIEW g_accounts_per_customer
AS SELECT c_id, COUNT(*) AS accounts, SUM(CASE WHEN tax_status = 0 THEN 1 ELSE 0 END) AS tax_free_accounts
   FROM dim_account_current
   WHERE status = 'Active'
   GROUP BY c_id;

-- lakeivm: deadline=2m
CREATE MATERIALIZED VIEW g_customer_360
AS SELECT c.c_id, c.last_name, c.first_name, c.tier, c.state, COALESCE(a.accounts, 0) AS accounts
   FROM dim_customer_current c LEFT JOIN g_accounts_per_customer a ON a.c_id = c.c_id;

-- lakeivm: deadline=2m
CREATE MATERIALIZED VIEW g_broker_daily_volume
AS SELECT b.broker_id, b.branch, to_date(t.close_ts) AS day, COUNT(*) AS trades,
          SUM(t.quantity * t.trade_price) AS volume, SUM(t.commission) AS commissions
   FROM dim_trade t
   JOIN dim_account_current a ON t.ca_id = a.ca_id
   JOIN dim_broker b ON a.broker_id = b.broker_id
   WHERE t.status = 'Completed'
   GROUP BY b.broker_id, b.branch, to_date(t.close_ts);

-- lakeivm: deadline=2m
CREATE MATERIALIZED VIEW g_broker_totals
AS SELECT broker_id, branch, SUM(trades) AS trades, SUM(volume) AS volume
   FROM g_broker_daily_volume
   GROUP BY broker_id, branch;

-- lakeivm: deadline=2m
CREATE MATERIALIZED VIEW g_broker_leaderboard
AS SELECT broker_id, branch, volume,
          RANK() OVER (PARTITION BY branch ORDER BY volume DESC) AS rank_in_branch
   FROM g_broker_totals;

-- lakeivm: deadline=2m
CREATE MATERIALIZED VIEW g_security_trading
AS SELECT symbol, COUNT(*) AS trades, SUM(quantity) AS shares, AVG(trade_price) AS avg_price,
          STDDEV(trade_price) AS price_stddev, MIN(trade_price) AS low, MAX(trade_price) AS high
   FROM dim_trade
   WHERE status = 'Completed'
   GROUP BY symbol;

-- lakeivm: deadline=2m
CREATE MATERIALIZED VIEW g_top_securities
AS SELECT symbol, shares FROM g_security_trading ORDER BY shares DESC, symbol LIMIT 10;

-- lakeivm: deadline=2m
CREATE MATERIALIZED VIEW g_industry_trades
AS SELECT s.industry, COUNT(*) AS trades, SUM(t.quantity * t.trade_price) AS volume
   FROM dim_trade t JOIN dim_security_current s ON t.symbol = s.symbol
   WHERE t.status = 'Completed'
   GROUP BY s.industry;

-- lakeivm: deadline=2m
CREATE MATERIALIZED VIEW g_daily_trades
AS SELECT to_date(close_ts) AS day, status, COUNT(*) AS trades, SUM(fee + commission + tax) AS charges
   FROM dim_trade
   WHERE close_ts IS NOT NULL
   GROUP BY to_date(close_ts), status;

-- lakeivm: deadline=2m
CREATE MATERIALIZED VIEW g_latest_trade_per_account
AS WITH ranked AS (
     SELECT ca_id, trade_id, symbol, create_ts,
            ROW_NUMBER() OVER (PARTITION BY ca_id ORDER BY create_ts DESC, trade_id DESC) AS rn
     FROM dim_trade)
   SELECT ca_id, trade_id, symbol, create_ts FROM ranked WHERE rn = 1;

-- lakeivm: deadline=2m
CREATE MATERIALIZED VIEW g_cash_stats
AS SELECT ca_id, COUNT(*) AS days, STDDEV(day_amount) AS daily_stddev, MIN(cash) AS low_cash, MAX(cash) AS high_cash
   FROM fact_cash_balances
   GROUP BY ca_id;

-- lakeivm: deadline=2m
CREATE MATERIALIZED VIEW g_flows
COMMENT 'Money in and out of accounts: trades and cash, one row each'
AS SELECT ca_id, 'trade' AS source, quantity * trade_price AS amount, CAST(NULL AS BIGINT) AS transactions
   FROM dim_trade WHERE status = 'Completed'
   UNION ALL
   SELECT ca_id, 'cash', day_amount, transactions
   FROM fact_cash_balances;

-- lakeivm: deadline=2m
CREATE MATERIALIZED VIEW g_net_flows
AS SELECT ca_id, source, COUNT(*) AS movements, SUM(amount) AS net
   FROM g_flows
   GROUP BY ca_id, source;

-- lakeivm: deadline=2m
CREATE MATERIALIZED VIEW g_holdings_by_customer
AS SELECT a.c_id, h.symbol, SUM(h.current_holding) AS position, COUNT(*) AS trades
   FROM fact_holdings h JOIN dim_account_current a ON h.ca_id = a.ca_id
   GROUP BY a.c_id, h.symbol;

-- lakeivm: deadline=2m
CREATE MATERIALIZED VIEW g_market_cap_by_industry
AS SELECT s.industry, COUNT(*) AS securities, SUM(s.sh_out * c.dm_close) AS market_cap
   FROM dim_security_current s JOIN s_latest_close c ON c.symbol = s.symbol
   GROUP BY s.industry;

-- lakeivm: deadline=2m
CREATE MATERIALIZED VIEW g_pe_ratio
AS SELECT s.symbol, c.dm_close, e.eps_4q, c.dm_close / NULLIF(e.eps_4q, 0) AS pe_ratio
   FROM dim_security_current s
   JOIN s_latest_close c ON c.symbol = s.symbol
   JOIN s_eps_4q e ON e.cik = s.cik
   WHERE e.is_latest;

-- lakeivm: deadline=2m
CREATE MATERIALIZED VIEW g_market_52w
COMMENT 'Securities trading within 5% of their 52-week high on their latest day'
AS SELECT m.symbol, m.dm_close, m.fifty_two_week_high, m.fifty_two_week_low
   FROM fact_market_history m JOIN s_latest_close c ON c.symbol = m.symbol AND c.dm_date = m.dm_date
   WHERE m.dm_close >= 0.95 * m.fifty_two_week_high;

-- lakeivm: deadline=2m
CREATE MATERIALIZED VIEW g_watch_activity
AS SELECT symbol, COUNT(*) AS watches, COUNT(DISTINCT c_id) AS watchers,
          SUM(CASE WHEN removed_ts IS NULL THEN 1 ELSE 0 END) AS active
   FROM fact_watches
   GROUP BY symbol;

-- lakeivm: deadline=2m
CREATE MATERIALIZED VIEW g_prospect_nameplates
AS SELECT marketing_nameplate, COUNT(*) AS prospects, AVG(income) AS avg_income
   FROM prospect
   GROUP BY marketing_nameplate;

-- lakeivm: deadline=2m
CREATE MATERIALIZED VIEW g_prospects_already_customers
AS SELECT p.state, COUNT(*) AS prospects
   FROM prospect p
   WHERE EXISTS (SELECT 1 FROM dim_customer_current c WHERE c.name_key = p.name_key)
   GROUP BY p.state;
