"""/jsz, the /varz jetstream block and /metrics carry real JetStream figures."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import nats

from tests.servers import free_port, start_server


def get(port: int, path: str) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
        return str(resp.read().decode())


async def test_jsz_varz_metrics(tmp_path: Path) -> None:
    http = free_port()
    srv = start_server("pynatsd", ["-js", "-sd", str(tmp_path)], http_port=http)
    try:
        nc = await nats.connect(srv.url)
        js = nc.jetstream()
        await js.add_stream(name="M", subjects=["m"])
        for _ in range(3):
            await js.publish("m", b"hello")
        await js.pull_subscribe("m", "c")
        await nc.close()
        jsz = json.loads(get(http, "/jsz"))
        assert (jsz["streams"], jsz["consumers"], jsz["messages"]) == (1, 1, 3)
        assert jsz["bytes"] > 0 and jsz["storage"] == jsz["bytes"] and "disabled" not in jsz
        detail = json.loads(get(http, "/jsz?accounts=true&streams=true&consumers=true"))
        stream = detail["account_details"][0]["stream_detail"][0]
        assert stream["name"] == "M" and stream["state"]["messages"] == 3
        assert stream["consumer_detail"][0]["num_pending"] == 3
        varz = json.loads(get(http, "/varz"))
        assert varz["jetstream"]["stats"]["storage"] == jsz["storage"]
        assert varz["jetstream"]["config"]["store_dir"].endswith("jetstream")
        metrics = get(http, "/metrics")
        assert 'pynatsd_jetstream_messages{server_id="' in metrics
        assert "pynatsd_jetstream_streams" in metrics
        assert 'id="streams"' in get(http, "/")  # the dashboard's stream table
    finally:
        srv.stop()
