"""The pynatsd data source in a real local Spark against a real pynatsd: writes, streaming reads, drains."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

import pytest

from tests.pipeline.natsclient import SyncNats

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from tests.servers import ServerProcess

pytestmark = pytest.mark.timeout(300)


def _rows(spark: SparkSession, table: str, order: str = "seq") -> list[dict[str, object]]:
    return [r.asDict() for r in spark.sql(f"SELECT * FROM {table} ORDER BY {order}").collect()]


def _drain_until(
    spark: SparkSession, query: StreamingQuery, table: str, count: int, timeout: float = 60
) -> int:
    """Let the query process what has arrived until the sink holds `count` rows (bounded in time)."""
    deadline = time.monotonic() + timeout
    n = 0
    while time.monotonic() < deadline:
        query.processAllAvailable()
        n = spark.sql(f"SELECT count(*) FROM {table}").collect()[0][0]
        if n >= count:
            break
        time.sleep(0.1)
    query.processAllAvailable()  # anything beyond `count` would show up now
    return int(spark.sql(f"SELECT count(*) FROM {table}").collect()[0][0])


def _reported(progress: Any) -> dict[str, int]:
    """What the reader reported as its latest offset (with buffer counters) in one progress entry."""
    latest = progress["sources"][0]["latestOffset"]
    return json.loads(latest) if isinstance(latest, str) else dict(latest)


def test_batch_write_round_trip(spark: SparkSession, broker: ServerProcess, nats_client: SyncNats) -> None:
    sink = nats_client.subscribe("bw.>")
    rows = [
        (
            f"bw.{i % 7}",
            f"payload-{i}".encode(),
            {"k": str(i), "kind": "test"} if i % 3 else None,
            f"r.{i}" if i % 5 == 0 else None,
        )
        for i in range(3000)
    ]
    df = spark.createDataFrame(
        rows, "subject string, payload binary, headers map<string,string>, reply string"
    )
    df.repartition(2).write.format("pynatsd").option("url", broker.url).mode("append").save()
    # String payloads and no optional columns work too.
    text = spark.createDataFrame(
        [(f"bw.text.{i}", f"hello {i}") for i in range(500)], "subject string, payload string"
    )
    text.write.format("pynatsd").option("url", broker.url).mode("append").save()

    got = sink.wait_for(3500, 30)
    nats_client.publish_all([])  # a round trip: anything extra would have arrived by now
    assert len(sink.msgs) == 3500
    received = sorted(
        (m.subject, m.data, m.headers or None, m.reply or None)
        for m in got
        if not m.subject.startswith("bw.text.")
    )
    assert received == sorted(rows)
    texts = sorted((m.subject, m.data) for m in got if m.subject.startswith("bw.text."))
    assert texts == sorted((f"bw.text.{i}", f"hello {i}".encode()) for i in range(500))


def test_write_rejects_bad_schema(spark: SparkSession, broker: ServerProcess) -> None:
    df = spark.createDataFrame([("x", 1)], "subject string, value int")
    with pytest.raises(Exception, match="payload"):
        df.write.format("pynatsd").option("url", broker.url).mode("append").save()


def test_stream_read_exact_into_memory_sink(
    spark: SparkSession, broker: ServerProcess, nats_client: SyncNats
) -> None:
    stream = (
        spark.readStream.format("pynatsd")
        .option("url", broker.url)
        .option("subjects", "sr.a.>, sr.b.*")
        .option("maxMessagesPerTrigger", "1500")
        .option("numPartitions", "2")
        .load()
    )
    query = stream.writeStream.format("memory").queryName("sr_sink").start()
    try:
        nats_client.wait_for_subscriber("sr.b.probe")
        sent = []
        for i in range(5000):
            subject = f"sr.a.{i % 3}.x" if i % 2 else f"sr.b.{i % 4}"
            headers = {"n": str(i)} if i % 10 == 0 else None
            sent.append((subject, f"m{i}".encode(), headers, f"inbox.{i}" if i % 25 == 0 else ""))
        sent.append(("sr.c.1", b"not subscribed", None, ""))
        sent.append(("sr.b.1.too.deep", b"not matched by sr.b.*", None, ""))
        nats_client.publish_all(sent)
        assert _drain_until(spark, query, "sr_sink", 5001) == 5001  # the probe plus the 5000 messages

        rows = [r for r in _rows(spark, "sr_sink") if r["subject"] != "sr.b.probe"]
        assert [r["seq"] for r in rows] == list(range(2, 5002))  # seq 1 was the probe; no gaps, no repeats
        got = [(r["subject"], r["payload"], r["headers"], r["reply"] or "") for r in rows]
        assert got == sent[:5000]  # arrival order across both subscriptions, nothing lost or repeated
        assert all(r["received_at"] is not None for r in rows)
        progress = query.recentProgress
        assert max(p["numInputRows"] for p in progress) <= 1500  # admission control
        assert _reported(progress[-1])["dropped"] == 0
    finally:
        query.stop()


def test_stream_write_carries_message_ids(
    spark: SparkSession, broker: ServerProcess, nats_client: SyncNats
) -> None:
    out = nats_client.subscribe("sw.out.>")
    source = spark.readStream.format("pynatsd").option("url", broker.url).option("subjects", "sw.in.>").load()
    echoed = source.selectExpr(
        "concat('sw.out.', substring(subject, 7)) AS subject", "upper(cast(payload AS string)) AS payload"
    )
    query = (
        echoed.writeStream.format("pynatsd")
        .option("url", broker.url)
        .option("checkpointLocation", f"/tmp/pynatsd-sw-{time.time_ns()}")
        .start()
    )
    try:
        nats_client.wait_for_subscriber("sw.in.probe")
        nats_client.publish_all([(f"sw.in.{i % 2}", f"msg {i}".encode(), None, "") for i in range(400)])
        deadline = time.monotonic() + 60
        while len(out.msgs) < 401 and time.monotonic() < deadline:
            query.processAllAvailable()
        query.processAllAvailable()
        nats_client.publish_all([])
        got = [m for m in out.msgs if m.subject != "sw.out.probe"]
        assert sorted(m.data for m in got) == sorted(f"MSG {i}".encode() for i in range(400))
        ids = [m.headers["Nats-Msg-Id"] for m in got]
        assert len(set(ids)) == len(ids) == 400
        for msg_id in ids:
            batch, partition, row = msg_id.split("/")
            assert batch.isdigit() and partition.isdigit() and row.isdigit()
    finally:
        query.stop()


def test_queue_group_shares_messages(
    spark: SparkSession, broker: ServerProcess, nats_client: SyncNats
) -> None:
    other = nats_client.subscribe("qg.>", queue="workers")
    stream = (
        spark.readStream.format("pynatsd")
        .option("url", broker.url)
        .option("subjects", "qg.>")
        .option("queue", "workers")
        .load()
    )
    query = stream.writeStream.format("memory").queryName("qg_sink").start()
    try:
        query.processAllAvailable()  # the reader has subscribed once an offset was asked for
        nats_client.publish_all([(f"qg.{i}", str(i).encode(), None, "") for i in range(2000)])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            query.processAllAvailable()
            in_spark = spark.sql("SELECT count(*) FROM qg_sink").collect()[0][0]
            if in_spark + len(other.msgs) >= 2000:
                break
        query.processAllAvailable()
        spark_payloads = {bytes(r["payload"]) for r in _rows(spark, "qg_sink")}
        other_payloads = {m.data for m in other.msgs}
        assert spark_payloads and other_payloads  # both members got a share
        assert not spark_payloads & other_payloads  # each message went to one member only
        assert spark_payloads | other_payloads == {str(i).encode() for i in range(2000)}
    finally:
        query.stop()


def _available_now(spark: SparkSession, url: str, subjects: str, name: str, **options: str) -> StreamingQuery:
    reader = spark.readStream.format("pynatsd").option("url", url).option("subjects", subjects)
    for key, value in {"availableNowIdleMs": "1500", **options}.items():
        reader = reader.option(key, value)
    return reader.load().writeStream.format("memory").queryName(name).trigger(availableNow=True).start()


def test_available_now_drains_then_stops(
    spark: SparkSession, broker: ServerProcess, nats_client: SyncNats
) -> None:
    query = _available_now(spark, broker.url, "an.>", "an_sink", maxMessagesPerTrigger="300")
    nats_client.wait_for_subscriber("an.probe")
    nats_client.publish_all([(f"an.{i % 5}", json.dumps({"i": i}).encode(), None, "") for i in range(1000)])
    assert query.awaitTermination(120)
    assert query.exception() is None
    rows = [r for r in _rows(spark, "an_sink") if r["subject"] != "an.probe"]
    assert sorted(json.loads(r["payload"])["i"] for r in rows) == list(range(1000))
    batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
    assert len(batches) >= 4 and all(p["numInputRows"] <= 300 for p in batches)


def test_available_now_overflow_drops_newest_and_counts(
    spark: SparkSession, broker: ServerProcess, nats_client: SyncNats
) -> None:
    query = _available_now(spark, broker.url, "of.>", "of_sink", bufferSize="100")
    nats_client.wait_for_subscriber("of.probe")  # the probe takes one buffer slot
    nats_client.publish_all([("of.data", str(i).encode(), None, "") for i in range(500)])
    assert query.awaitTermination(120)
    rows = [r for r in _rows(spark, "of_sink") if r["subject"] == "of.data"]
    # The buffer kept the oldest 99 data messages and dropped the 401 newest ones.
    assert [bytes(r["payload"]) for r in rows] == [str(i).encode() for i in range(99)]
    reported = _reported(query.lastProgress)
    assert reported["dropped"] == 401
    assert reported["received"] == 501
