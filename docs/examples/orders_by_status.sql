-- An example view declared in SQL (docs/reference/spec.md#sql-files); tests/test_ddl.py loads it.
-- lakeivm: tick=1m
CREATE OR REPLACE MATERIALIZED VIEW orders_by_status
  REFRESH POLICY INCREMENTAL
  COMMENT 'Orders and revenue per order status'
  TBLPROPERTIES ('lakeivm.deadline' = '30s', 'delta.enableChangeDataFeed' = 'true')
AS SELECT o_orderstatus, COUNT(*) AS orders, SUM(o_totalprice) AS revenue
   FROM orders
   GROUP BY o_orderstatus;
