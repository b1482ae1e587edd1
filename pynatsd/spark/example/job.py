"""The Spark side of the example: parse trades, 10-second windowed VWAP and volume per symbol, then publish
each closed window to `vwap.<symbol>` and append it to Parquet."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

TRADE_SCHEMA = "symbol string, price double, qty long, ts long"


def vwap(messages: DataFrame, window: str = "10 seconds", lateness: str = "2 seconds") -> DataFrame:
    """Closed windows only (append mode): a window is emitted once the watermark passes its end."""
    trades = (
        messages.select(F.from_json(F.col("payload").cast("string"), TRADE_SCHEMA).alias("t"))
        .select("t.*")
        .where(F.col("symbol").isNotNull() & (F.col("qty") > 0))
        .withColumn("event_time", F.timestamp_millis("ts"))
        .withWatermark("event_time", lateness)
    )
    return (
        trades.groupBy(F.window("event_time", window), "symbol")
        .agg(
            (F.sum(F.col("price") * F.col("qty")) / F.sum("qty")).alias("vwap"),
            F.sum("qty").alias("volume"),
            F.count("*").alias("trades"),
        )
        .select(
            "symbol",
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "vwap",
            "volume",
            "trades",
        )
    )


def to_messages(results: DataFrame) -> DataFrame:
    """Rows for the pynatsd writer; the Nats-Msg-Id names the window, so a replayed batch is recognisable."""
    body = F.to_json(
        F.struct(
            "symbol",
            F.date_format("window_start", "yyyy-MM-dd'T'HH:mm:ss'Z'").alias("window_start"),
            F.date_format("window_end", "yyyy-MM-dd'T'HH:mm:ss'Z'").alias("window_end"),
            F.round("vwap", 6).alias("vwap"),
            "volume",
            "trades",
        )
    )
    msg_id = F.concat_ws("/", F.lit("vwap"), "symbol", F.unix_millis("window_start").cast("string"))
    return results.select(
        F.concat(F.lit("vwap."), "symbol").alias("subject"),
        body.alias("payload"),
        F.create_map(F.lit("Nats-Msg-Id"), msg_id).alias("headers"),
    )


def start(
    spark: SparkSession,
    url: str,
    parquet_dir: str,
    checkpoint_dir: str,
    subjects: str = "trades.>",
    trigger_seconds: float = 1.0,
) -> StreamingQuery:
    """Run the pipeline: one streaming query, whose micro-batches go to the broker and to Parquet."""
    messages = spark.readStream.format("pynatsd").option("url", url).option("subjects", subjects).load()

    def sink(batch: DataFrame, batch_id: int) -> None:
        batch.persist()
        try:
            if batch.isEmpty():
                return
            batch.write.mode("append").parquet(parquet_dir)
            to_messages(batch).write.format("pynatsd").option("url", url).mode("append").save()
        finally:
            batch.unpersist()

    return (
        vwap(messages)
        .writeStream.outputMode("append")
        .option("checkpointLocation", checkpoint_dir)
        .trigger(processingTime=f"{trigger_seconds} seconds")
        .foreachBatch(sink)
        .start()
    )
