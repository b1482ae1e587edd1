"""The query of the exactly-once test, run as its own driver process so the test can SIGKILL it.

    python -m tests.pipeline.eo_query URL STREAM OUT_DIR CHECKPOINT run|drain

`run` processes micro-batches until killed; `drain` processes what the stream holds now, then exits.
"""

from __future__ import annotations

import sys

from pynatsd.spark.spark import local_session


def main(url: str, stream: str, out: str, checkpoint: str, mode: str) -> None:
    spark = local_session("pynatsd-eo")
    source = (
        spark.readStream.format("pynatsd")
        .option("url", url)
        .option("stream", stream)
        .option("maxMessagesPerTrigger", "700")
        .option("numPartitions", "2")
        .load()
    )
    writer = source.writeStream.format("parquet").option("path", out).option("checkpointLocation", checkpoint)
    if mode == "drain":
        writer.trigger(availableNow=True).start().awaitTermination()
    else:
        writer.trigger(processingTime="100 milliseconds").start().awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:6])
