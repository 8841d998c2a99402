-- a dbt view: not a materialized view, so lakeivm leaves it to dbt (and refuses a view reading it)
{{ config(materialized='view') }}
SELECT c_custkey, md5(CAST(c_custkey AS STRING)) AS customer_key FROM {{ source('tpch', 'customer') }}
