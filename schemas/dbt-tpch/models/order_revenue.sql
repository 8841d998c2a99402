{{ config(materialized='materialized_view') }}
SELECT o.o_orderkey, o.o_custkey, o.o_orderpriority,
       SUM(l.l_extendedprice * (1 - l.l_discount)) AS revenue, COUNT(*) AS lines
FROM {{ ref('stg_orders') }} o
JOIN {{ source('tpch', 'lineitem') }} l ON l.l_orderkey = o.o_orderkey
GROUP BY o.o_orderkey, o.o_custkey, o.o_orderpriority
