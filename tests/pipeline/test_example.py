"""The example pipeline end to end: trades in, checked VWAP/volume windows out on the broker and Parquet."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pynatsd.spark.example import job
from pynatsd.spark.example.trades import Trade, expected_vwap, simulate
from tests.pipeline.natsclient import SyncNats

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from tests.servers import ServerProcess

pytestmark = pytest.mark.timeout(300)

START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def test_vwap_pipeline_end_to_end(
    spark: SparkSession, broker: ServerProcess, nats_client: SyncNats, tmp_path: Path
) -> None:
    results = nats_client.subscribe("vwap.>")
    parquet = tmp_path / "vwap.parquet"
    query = job.start(spark, broker.url, str(parquet), str(tmp_path / "checkpoint"), trigger_seconds=0.5)
    try:
        nats_client.wait_for_subscriber("trades.probe")  # a probe's empty payload is no trade: ignored
        trades = list(simulate(600, START_MS, 75))  # 45 s of event time: 5 windows x 4 symbols
        nats_client.publish_all([(t.subject, t.to_json(), None, "") for t in trades])
        # A trade an hour later moves the watermark past every window above, so all of them close.
        late = Trade("ZZZ", 1.0, 1, START_MS + 3_600_000)
        nats_client.publish_all([(late.subject, late.to_json(), None, "")])
        expected = expected_vwap(trades)
        assert len(expected) == 20

        got = results.wait_for(len(expected), 120)
        query.processAllAvailable()
        nats_client.publish_all([])
        assert len(results.msgs) == len(expected)  # each window exactly once
        seen = {}
        for msg in got:
            body = json.loads(msg.data)
            assert msg.subject == f"vwap.{body['symbol']}"
            start_ms = START_MS + (int(body["window_start"][17:19]) // 10) * 10_000  # ...T00:00:SSZ
            assert msg.headers["Nats-Msg-Id"] == f"vwap/{body['symbol']}/{start_ms}"
            seen[(body["symbol"], start_ms)] = (body["vwap"], body["volume"], body["trades"])
        assert seen.keys() == expected.keys()
        for key, (vwap, volume) in expected.items():
            assert math.isclose(seen[key][0], vwap, rel_tol=1e-8), key
            assert seen[key][1] == volume
        assert sum(n for _, _, n in seen.values()) == len(trades)

        stored = spark.read.parquet(str(parquet)).collect()
        assert len(stored) == len(expected)
        for row in stored:
            key = (row["symbol"], int(row["window_start"].timestamp() * 1000))
            assert math.isclose(row["vwap"], expected[key][0], rel_tol=1e-12)
            assert row["volume"] == expected[key][1]
    finally:
        query.stop()
