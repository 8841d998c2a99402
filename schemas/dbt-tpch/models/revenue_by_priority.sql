{{ config(materialized='materialized_view', meta={'lakeivm': {'deadline': '1m'}}) }}
SELECT o_orderpriority, COUNT(*) AS orders, SUM(revenue) AS revenue
FROM {{ ref('order_revenue') }}
GROUP BY o_orderpriority
