"""Spark pipelines for pynatsd: a PySpark Python Data Source (`pynatsd`) that reads subjects into Spark
streams and writes DataFrames back as messages, using nats-py so it works against any NATS server.

    from pynatsd.spark import register
    register(spark)                                   # spark.dataSource.register(NatsDataSource)
    spark.readStream.format("pynatsd").option("url", url).option("subjects", "trades.>").load()
    df.write.format("pynatsd").option("url", url).mode("append").save()
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pynatsd.spark.source import NAME, NatsDataSource

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["NAME", "NatsDataSource", "register"]


def register(spark: SparkSession) -> None:
    """Register the `pynatsd` data source with a session (needed once per session)."""
    spark.dataSource.register(NatsDataSource)
