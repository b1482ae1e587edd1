"""The JetStream mode of the pynatsd data source in a real local Spark: sequence-range reads from the
executors, exactly-once across a killed driver and across task retries, acked and de-duplicated writes."""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.pipeline import eo_query
from tests.pipeline.natsclient import SyncNats
from tests.servers import REPO_ROOT, ServerProcess

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def js(js_broker: ServerProcess) -> Iterator[SyncNats]:
    client = SyncNats(js_broker.url)
    yield client
    client.close()


def add_stream(client: SyncNats, name: str, subjects: list[str], allow_direct: bool = False) -> None:
    async def add() -> None:
        await client.nc.jetstream().add_stream(name=name, subjects=subjects, allow_direct=allow_direct)

    client.io.run(add(), 10)


def publish_acked(client: SyncNats, msgs: list[tuple[str, bytes, dict[str, str] | None]]) -> None:
    """Publish into streams, waiting for every ack (so the messages have sequences when this returns)."""

    async def pub() -> None:
        js = client.nc.jetstream()
        futures = [await js.publish_async(s, p, headers=h) for s, p, h in msgs]
        for f in futures:
            await f

    client.io.run(pub(), 120)


def stream_messages(client: SyncNats, name: str) -> int:
    async def info() -> int:
        return int((await client.nc.jetstream().stream_info(name)).state.messages)

    return client.io.run(info(), 10)


def read(spark: SparkSession, url: str, stream: str, **options: str) -> DataFrame:
    reader = spark.read.format("pynatsd").option("url", url).option("stream", stream)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def test_batch_read_same_rows_with_1_2_4_partitions(
    spark: SparkSession, js_broker: ServerProcess, js: SyncNats
) -> None:
    add_stream(js, "BR", ["br.>"], allow_direct=True)
    sent = [(f"br.{i % 3}", f"m{i}".encode(), {"n": str(i)} if i % 7 == 0 else None) for i in range(3000)]
    publish_acked(js, sent)
    # Holes in the sequence: a direct-get window's answer then runs past its end.
    deleted = {50, 51, 52, 700, 1999}

    async def delete() -> None:
        for seq in deleted:
            await js.nc.jetstream().delete_msg("BR", seq)

    js.io.run(delete(), 10)
    expected = [(i + 1, s, p, h, "BR") for i, (s, p, h) in enumerate(sent) if i + 1 not in deleted]
    for mode in ("direct", "consumer"):
        results = []
        for parts in ("1", "2", "4"):
            df = read(spark, js_broker.url, "BR", numPartitions=parts, fetchMode=mode, fetchBatch="400")
            rows = df.orderBy("seq").collect()
            results.append([(r.seq, r.subject, bytes(r.payload), r.headers or None, r.stream) for r in rows])
        assert results[0] == results[1] == results[2] == expected, mode
        # A subject filter and a sequence range.
        some = read(
            spark,
            js_broker.url,
            "BR",
            subjects="br.1",
            startSequence="101",
            endSequence="400",
            numPartitions="3",
            fetchMode=mode,
            fetchBatch="30",
        ).collect()
        assert sorted(r.seq for r in some) == [s for s in range(101, 401) if (s - 1) % 3 == 1]
        wild = read(spark, js_broker.url, "BR", subjects="br.*", endSequence="900", fetchMode=mode)
        assert wild.count() == 900 - 3 - 1
    assert read(spark, js_broker.url, "BR", startTime="2000-01-01T00:00:00+00:00").count() == len(expected)
    assert read(spark, js_broker.url, "BR", latest="true").count() == 0
    # The timestamps of both fetch modes are the stream's, to the microsecond.
    times = [
        sorted((r.seq, r.received_at) for r in read(spark, js_broker.url, "BR", fetchMode=m).collect())
        for m in ("direct", "consumer")
    ]
    assert times[0] == times[1]


def test_direct_get_refused_falls_back_to_the_consumer(
    spark: SparkSession, js_broker: ServerProcess, js: SyncNats
) -> None:
    add_stream(js, "ND", ["nd.>"])  # allow_direct off: nobody answers direct gets
    publish_acked(js, [(f"nd.{i % 2}", b"%d" % i, None) for i in range(500)])
    assert read(spark, js_broker.url, "ND", numPartitions="2").count() == 500  # auto: the consumer
    assert read(spark, js_broker.url, "ND", fetchMode="consumer").count() == 500
    with pytest.raises(Exception, match="does not answer direct gets"):
        read(spark, js_broker.url, "ND", fetchMode="direct").count()


def _fail_first_attempt(df: DataFrame, partition: int) -> DataFrame:
    """Make the first attempt of one task fail midway, after it produced some rows (Spark retries it)."""
    from pyspark import TaskContext
    from pyspark.sql.functions import udf

    def boom(seq: int) -> int:
        ctx = TaskContext.get()
        if ctx is not None and ctx.partitionId() == partition and ctx.attemptNumber() == 0 and seq % 500 == 0:
            raise RuntimeError("injected task failure")
        return seq

    return df.withColumn("seq", udf(boom, "long", useArrow=False)("seq"))


def test_task_retry_duplicates_nothing(spark: SparkSession, js_broker: ServerProcess, js: SyncNats) -> None:
    add_stream(js, "TR", ["tr.in.>"])
    add_stream(js, "TROUT", ["tr.out.>"])
    n = 4000
    publish_acked(js, [(f"tr.in.{i % 4}", f"p{i}".encode(), None) for i in range(n)])
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "200")
    try:
        # Into a parquet sink through the streaming source.
        out = tempfile.mkdtemp(prefix="pynatsd-tr-")
        source = (
            spark.readStream.format("pynatsd")
            .option("url", js_broker.url)
            .option("stream", "TR")
            .option("numPartitions", "2")
            .load()
        )
        query = (
            _fail_first_attempt(source, 1)
            .writeStream.format("parquet")
            .option("path", f"{out}/data")
            .option("checkpointLocation", f"{out}/ck")
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(120)
        assert query.exception() is None
        got = spark.read.parquet(f"{out}/data")
        assert got.count() == got.select("seq").distinct().count() == n
        # Into a stream through the JetStream sink: the retried task republishes ids the stream has seen.
        df = read(spark, js_broker.url, "TR", numPartitions="2").selectExpr(
            "concat('tr.out.', subject) AS subject", "payload", "seq"
        )
        (
            _fail_first_attempt(df, 0)
            .drop("seq")
            .write.format("pynatsd")
            .option("url", js_broker.url)
            .option("stream", "TROUT")
            .mode("append")
            .save()
        )
        assert stream_messages(js, "TROUT") == n
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")


def test_stream_write_acks_and_msg_ids(spark: SparkSession, js_broker: ServerProcess, js: SyncNats) -> None:
    add_stream(js, "SWIN", ["swj.in.>"])
    add_stream(js, "SWOUT", ["swj.out.>"])
    publish_acked(js, [(f"swj.in.{i % 2}", f"m{i}".encode(), None) for i in range(1000)])
    ck = tempfile.mkdtemp(prefix="pynatsd-swj-")
    source = (
        spark.readStream.format("pynatsd")
        .option("url", js_broker.url)
        .option("stream", "SWIN")
        .option("maxMessagesPerTrigger", "300")
        .load()
    )
    query = (
        source.selectExpr("concat('swj.out.', substring(subject, 8)) AS subject", "payload")
        .writeStream.format("pynatsd")
        .option("url", js_broker.url)
        .option("stream", "SWOUT")
        .option("checkpointLocation", ck)
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    assert query.exception() is None
    rows = read(spark, js_broker.url, "SWOUT").collect()
    assert sorted(bytes(r.payload) for r in rows) == sorted(f"m{i}".encode() for i in range(1000))
    ids = [r.headers["Nats-Msg-Id"] for r in rows]
    assert len(set(ids)) == 1000
    assert all(i.startswith(query.id + "/") and len(i.split("/")) == 4 for i in ids)
    # Publishing into a subject no stream captures fails the write instead of losing the rows.
    bad = spark.createDataFrame([("swj.nowhere", b"x")], "subject string, payload binary")
    with pytest.raises(Exception, match=r"refused|ack"):
        bad.write.format("pynatsd").option("url", js_broker.url).option("stream", "SWOUT").option(
            "flushTimeoutMs", "3000"
        ).mode("append").save()


def _eo(url: str, out: Path, mode: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.pipeline.eo_query",
            url,
            "EO",
            str(out / "data"),
            str(out / "ck"),
            mode,
        ],
        cwd=REPO_ROOT,
        env=env,
        start_new_session=True,  # its own process group: the kill takes the JVM and the Python workers too
        stdout=subprocess.DEVNULL,
        stderr=open(out / f"{mode}.log", "wb"),
    )


@pytest.mark.parametrize("js_broker", ["pynatsd"], indirect=True)  # slow: one server is enough
def test_exactly_once_across_killed_driver(
    spark: SparkSession, js_broker: ServerProcess, js: SyncNats, tmp_path: Path
) -> None:
    add_stream(js, "EO", ["eo.>"])
    first, second = 6000, 3000
    publish_acked(js, [(f"eo.{i % 5}", json.dumps({"i": i}).encode(), None) for i in range(first)])
    proc = _eo(js_broker.url, tmp_path, "run")
    commits = tmp_path / "ck" / "commits"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if commits.is_dir() and len([p for p in commits.iterdir() if p.name.isdigit()]) >= 3:
                break
            time.sleep(0.1)
        assert proc.poll() is None, (tmp_path / "run.log").read_text()[-3000:]
        assert len(list(commits.iterdir())) >= 3, "the query committed no batch in time"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    done_before = len([p for p in commits.iterdir() if p.name.isdigit()])
    assert done_before < first // 700 + 1, "killed too late: every batch was already committed"
    publish_acked(
        js, [(f"eo.{i % 5}", json.dumps({"i": i}).encode(), None) for i in range(first, first + second)]
    )
    # Resumed by another driver: the test's own Spark session (a process of its own would add a JVM start).
    drain = eo_query.start(spark, js_broker.url, "EO", str(tmp_path / "data"), str(tmp_path / "ck"), "drain")
    assert drain.awaitTermination(180)
    assert drain.exception() is None
    got = spark.read.parquet(str(tmp_path / "data"))
    total = first + second
    assert got.count() == got.select("seq").distinct().count() == total
    assert sorted(json.loads(r.payload)["i"] for r in got.select("payload").collect()) == list(range(total))


@pytest.mark.parametrize("js_broker", ["pynatsd"], indirect=True)  # slow: one server is enough
def test_example_job_resumes_from_checkpoint(
    spark: SparkSession, js_broker: ServerProcess, js: SyncNats, tmp_path: Path
) -> None:
    from pynatsd.spark.example import job
    from pynatsd.spark.example.trades import Trade, expected_vwap, simulate

    start_ms = 1_767_225_600_000
    js.io.run(job.ensure_streams(js_broker.url, {"EXT": "trades.>", "EXV": "vwap.>"}), 10)
    trades = list(simulate(600, start_ms, 75))
    late = Trade("ZZZ", 1.0, 1, start_ms + 3_600_000)  # moves the watermark past every window
    half = len(trades) // 2
    parquet, ck = str(tmp_path / "vwap"), str(tmp_path / "ck")
    for part in (trades[:half], [*trades[half:], late]):  # the second run resumes from the checkpoint
        publish_acked(js, [(t.subject, t.to_json(), None) for t in part])
        query = job.start(
            spark, js_broker.url, parquet, ck, stream="EXT", out_stream="EXV", trigger_seconds=0.2
        )
        try:
            query.processAllAvailable()
            query.processAllAvailable()  # the watermark moves in the batch after the data
        finally:
            query.stop()
    expected = expected_vwap(trades)
    rows = read(spark, js_broker.url, "EXV").collect()
    got = {(json.loads(r.payload)["symbol"], r.headers["Nats-Msg-Id"]) for r in rows}
    assert len(rows) == len(got) == len(expected) == 20  # every window exactly once
    assert sum(json.loads(r.payload)["trades"] for r in rows) == len(trades)


def _job(url: str, tmp: Path, run: int) -> subprocess.Popen[bytes]:
    """The example job's own entry point, as a user runs it, in its own process group."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    args = ["--url", url, "--stream", "EKT", "--out-stream", "EKV", "--checkpoint", str(tmp / "ck")]
    args += ["--parquet", str(tmp / "vwap"), "--trigger-seconds", "0.5"]
    return subprocess.Popen(
        [sys.executable, "-m", "pynatsd.spark.example.job", *args],
        cwd=REPO_ROOT,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=open(tmp / f"job{run}.log", "wb"),
    )


def _commits(tmp: Path) -> int:
    commits = tmp / "ck" / "commits"
    return len([p for p in commits.iterdir() if p.name.isdigit()]) if commits.is_dir() else 0


def _wait(proc: subprocess.Popen[bytes], log: Path, done: Any, what: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert proc.poll() is None, f"the job died: {log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}: {log.read_text()[-3000:]}"
        time.sleep(0.2)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("js_broker", ["pynatsd"], indirect=True)  # slow: one server is enough
def test_example_job_survives_sigkill(
    spark: SparkSession, js_broker: ServerProcess, js: SyncNats, tmp_path: Path
) -> None:
    import nats.js.errors

    from pynatsd.spark.example import job
    from pynatsd.spark.example.trades import Trade, expected_vwap, simulate

    start_ms = 1_767_225_600_000
    trades = list(simulate(600, start_ms, 75))  # 45 s of event time: 5 windows x 4 symbols
    late = Trade("ZZZ", 1.0, 1, start_ms + 3_600_000)  # moves the watermark past every window
    half = len(trades) // 2

    async def fresh_streams() -> None:  # the other example test's streams take the same subjects
        for name in ("EXT", "EXV"):
            with contextlib.suppress(nats.js.errors.NotFoundError):
                await js.nc.jetstream().delete_stream(name)
        await job.ensure_streams(js_broker.url, {"EKT": "trades.>", "EKV": "vwap.>"})

    js.io.run(fresh_streams(), 10)
    publish_acked(js, [(t.subject, t.to_json(), None) for t in trades[:half]])
    first = _job(js_broker.url, tmp_path, 1)
    try:
        _wait(first, tmp_path / "job1.log", lambda: _commits(tmp_path) >= 2, "two committed batches")
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # the driver, its JVM and its Python workers, mid-run
        first.wait(30)
    killed_at = _commits(tmp_path)
    publish_acked(js, [(t.subject, t.to_json(), None) for t in [*trades[half:], late]])
    expected = expected_vwap(trades)
    # Restarted from the checkpoint by another driver: the test's own Spark session (a second job process
    # would add a JVM start, then 3 s without a commit to know it had done everything).
    second = job.start(
        spark,
        js_broker.url,
        str(tmp_path / "vwap"),
        str(tmp_path / "ck"),
        stream="EKT",
        out_stream="EKV",
        trigger_seconds=0.2,
    )
    try:
        second.processAllAvailable()
        second.processAllAvailable()  # the watermark moves in the batch after the data
        assert second.exception() is None
    finally:
        second.stop()
    assert _commits(tmp_path) > killed_at  # the second run went on from the checkpoint
    rows = read(spark, js_broker.url, "EKV").collect()
    got = {}
    for r in rows:
        body = json.loads(r.payload)
        key = (body["symbol"], int(r.headers["Nats-Msg-Id"].rsplit("/", 1)[1]))
        assert key not in got, f"window {key} published twice"
        got[key] = (body["vwap"], body["volume"], body["trades"])
    assert got.keys() == expected.keys() and len(rows) == 20  # every window exactly once
    for key, (vwap, volume) in expected.items():
        assert math.isclose(got[key][0], vwap, rel_tol=1e-8), key
        assert got[key][1] == volume
    assert sum(n for _, _, n in got.values()) == len(trades)  # no trade lost or counted twice
    stored = spark.read.parquet(str(tmp_path / "vwap")).select("symbol", "window_start").collect()
    assert len(stored) == len(set(stored)) == 20  # a replayed batch overwrote its own Parquet directory


def test_direct_get_reader_completes_answers_cut_by_max_bytes(js_broker: ServerProcess, js: SyncNats) -> None:
    """Outside Spark: answers capped at a few messages by max_bytes are completed by further requests, windows
    shrink to what fits, and holes and the range bounds are respected (with and without a filter)."""
    from pynatsd.spark.directget import read_range_direct

    add_stream(js, "CUT", ["cut.>"], allow_direct=True)
    publish_acked(js, [(f"cut.{i % 2}", b"%03d" % i + b"x" * 100, None) for i in range(400)])

    async def delete() -> None:
        for seq in (10, 11, 200):
            await js.nc.jetstream().delete_msg("CUT", seq)

    js.io.run(delete(), 10)

    def rows(subject_filter: str | None, lo: int, hi: int) -> list[tuple[int, bytes]]:
        batches = read_range_direct(
            [js_broker.url], "CUT", subject_filter, lo, hi, 50, 10, 5, flush_rows=7, max_bytes=1500
        )
        return sorted(
            (s, p[:3])
            for b in batches
            for s, p in zip(b["seq"].to_pylist(), b["payload"].to_pylist(), strict=True)
        )

    # The server does cut such an answer short (so the reader's completion path runs).
    from pynatsd.spark.rawnats import RawConnection

    conn = RawConnection.open([js_broker.url], 5, "probe")
    conn.publish(b"$JS.API.DIRECT.GET.CUT", b'{"seq":1,"batch":50,"max_bytes":1500}')
    frames = []
    while not frames or b"204 EOB" not in frames[-1].headers:
        frames.append(conn.next_frame())
    conn.close()
    assert 1 < len(frames) - 1 < 50
    assert rows(None, 5, 390) == [(s, b"%03d" % (s - 1)) for s in range(5, 391) if s not in (10, 11, 200)]
    odd = rows("cut.1", 5, 390)
    assert odd == [(s, b"%03d" % (s - 1)) for s in range(5, 391) if s % 2 == 0 and s not in (10, 200)]
