"""The Spark side of the example: parse trades, 10-second windowed VWAP and volume per symbol, then publish
each closed window to `vwap.<symbol>` and write it to Parquet.

    python -m pynatsd.spark.example.job --url URL --checkpoint DIR --parquet DIR   (JetStream: TRADES -> VWAP)

Kill it at any time (SIGKILL included) and start it again with the same checkpoint: it resumes after the
last committed micro-batch, every result lands in VWAP exactly once (see README "Restartable example job").
"""

from __future__ import annotations

import argparse
import asyncio

import nats
import nats.js.errors
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
    stream: str | None = None,
    out_stream: str | None = None,
) -> StreamingQuery:
    """Run the pipeline: one streaming query, whose micro-batches go to the broker and to Parquet.

    With `stream` the trades are read from that JetStream stream (restartable from the checkpoint with nothing
    lost); with `out_stream` results are published into that stream with acks, de-duplicated by window id.
    """
    reader = spark.readStream.format("pynatsd").option("url", url)
    reader = reader.option("stream", stream) if stream else reader.option("subjects", subjects)
    messages = reader.load()

    def sink(batch: DataFrame, batch_id: int) -> None:
        batch.persist()
        try:
            if batch.isEmpty():
                return
            # One directory per batch, overwritten: a batch replayed after a crash replaces its own output.
            batch.write.mode("overwrite").parquet(f"{parquet_dir}/batch_id={batch_id}")
            out = to_messages(batch).write.format("pynatsd").option("url", url)
            (out.option("stream", out_stream) if out_stream else out).mode("append").save()
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


async def ensure_streams(url: str, streams: dict[str, str]) -> None:
    """Create the streams (name -> subjects) that do not exist yet."""
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        for name, subjects in streams.items():
            try:
                await js.stream_info(name)
            except nats.js.errors.NotFoundError:
                await js.add_stream(name=name, subjects=[subjects], allow_direct=True)
    finally:
        await nc.close()


def main() -> None:
    """`python -m pynatsd.spark.example.job`: the JetStream pipeline, restartable from its checkpoint."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--url", default="nats://127.0.0.1:4222")
    parser.add_argument("--stream", default="TRADES", help="stream of trades (created on trades.>)")
    parser.add_argument("--out-stream", default="VWAP", help="stream of results (created on vwap.>)")
    parser.add_argument("--checkpoint", required=True, help="keep it to resume where the job stopped")
    parser.add_argument("--parquet", required=True)
    parser.add_argument("--trigger-seconds", type=float, default=1.0, help="micro-batch interval")
    args = parser.parse_args()
    asyncio.run(ensure_streams(args.url, {args.stream: "trades.>", args.out_stream: "vwap.>"}))
    from pynatsd.spark.spark import local_session

    spark = local_session("pynatsd-vwap")
    query = start(
        spark,
        args.url,
        args.parquet,
        args.checkpoint,
        trigger_seconds=args.trigger_seconds,
        stream=args.stream,
        out_stream=args.out_stream,
    )
    query.awaitTermination()


if __name__ == "__main__":
    main()
