-- ephemeral: dbt inlines it as a CTE of each model that refs it
{{ config(materialized='ephemeral') }}
SELECT o_orderkey, o_custkey, o_orderdate, o_orderpriority
FROM {{ source('tpch', 'orders') }}
