"""A Python definition: spark-pipelines runs it; lakeivm maintains views declared in SQL and says
it does not take this one."""
from pyspark import pipelines as dp
from pyspark.sql import DataFrame


@dp.materialized_view
def big_orders() -> DataFrame:
    return spark.table("orders").where("o_totalprice > 400000")  # noqa: F821 -- spark-pipelines provides `spark`
