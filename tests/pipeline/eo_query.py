"""The query of the exactly-once test, run as its own driver process so the test can SIGKILL it.

    python -m tests.pipeline.eo_query URL STREAM OUT_DIR CHECKPOINT run|drain

`run` processes micro-batches until killed; `drain` processes what the stream holds now, then exits (the
test drains in its own Spark session through `start`: a second driver JVM would cost 10-20 s).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from pynatsd.spark.spark import local_session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery


def start(spark: SparkSession, url: str, stream: str, out: str, checkpoint: str, mode: str) -> StreamingQuery:
    """The query: `run` in micro-batches of 700 messages every 100 ms; `drain` what the stream holds now.

    The drain's batches are larger: a batch planned before the kill is replayed with its own stored offsets
    whatever this says, and the rest needs fewer batches (each costs about a second)."""
    source = (
        spark.readStream.format("pynatsd")
        .option("url", url)
        .option("stream", stream)
        .option("maxMessagesPerTrigger", "700" if mode == "run" else "4000")
        .option("numPartitions", "2")
        .load()
    )
    writer = source.writeStream.format("parquet").option("path", out).option("checkpointLocation", checkpoint)
    if mode == "drain":
        return writer.trigger(availableNow=True).start()
    return writer.trigger(processingTime="100 milliseconds").start()


def main(url: str, stream: str, out: str, checkpoint: str, mode: str) -> None:
    spark = local_session("pynatsd-eo")
    start(spark, url, stream, out, checkpoint, mode).awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:6])
