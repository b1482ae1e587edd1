"""Streams end to end through nats-py: API, publish acks, headers, limits, storage and restart."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from nats.aio.client import Client
from nats.js import api
from nats.js.errors import APIError, BadRequestError, NoStreamResponseError, NotFoundError

from tests.jetstream.conftest import JsServer


async def raw(nc: Client, subject: str, body: object = b"") -> dict[str, object]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    msg = await nc.request(subject, data, timeout=2)
    return dict(json.loads(msg.data))


async def test_account_info_and_stream_crud(nc: Client) -> None:
    js = nc.jetstream()
    info = await js.account_info()
    assert info.streams == 0
    si = await js.add_stream(name="ORDERS", subjects=["orders.*"])
    assert si.config.name == "ORDERS" and si.config.retention == api.RetentionPolicy.LIMITS
    # The same config again is idempotent; a different one is 10058.
    await js.add_stream(name="ORDERS", subjects=["orders.*"])
    with pytest.raises(BadRequestError) as err:
        await js.add_stream(name="ORDERS", subjects=["orders.*"], max_msgs=5)
    assert err.value.err_code == 10058
    with pytest.raises(BadRequestError) as err:
        await js.add_stream(name="OTHER", subjects=["orders.new"])
    assert err.value.err_code == 10065
    assert await js.streams_info() and (await js.streams_info())[0].config.name == "ORDERS"
    names = await raw(nc, "$JS.API.STREAM.NAMES", {"subject": "orders.x"})
    assert names["streams"] == ["ORDERS"]
    si = await js.update_stream(name="ORDERS", subjects=["orders.*"], max_msgs=5)
    assert si.config.max_msgs == 5
    assert (await js.account_info()).streams == 1
    assert await js.delete_stream("ORDERS")
    with pytest.raises(NotFoundError) as nf:
        await js.stream_info("ORDERS")
    assert nf.value.err_code == 10059


async def test_replicas_refused(nc: Client) -> None:
    with pytest.raises(APIError) as err:
        await nc.jetstream().add_stream(name="R3", subjects=["r3"], num_replicas=3)
    assert err.value.err_code == 10074


async def test_publish_ack_dedupe_and_expected_headers(nc: Client) -> None:
    js = nc.jetstream()
    await js.add_stream(name="S", subjects=["s.>"])
    ack = await js.publish("s.a", b"1", headers={"Nats-Msg-Id": "m1"})
    assert (ack.stream, ack.seq, ack.duplicate) == ("S", 1, None)
    dup = await js.publish("s.a", b"1", headers={"Nats-Msg-Id": "m1"})
    assert (dup.seq, dup.duplicate) == (1, True)
    with pytest.raises(APIError) as err:
        await js.publish("s.a", b"2", headers={"Nats-Expected-Last-Sequence": "7"})
    assert err.value.err_code == 10071
    await js.publish("s.a", b"2", headers={"Nats-Expected-Last-Sequence": "1"})
    with pytest.raises(APIError) as err:
        await js.publish("s.b", b"x", headers={"Nats-Expected-Last-Subject-Sequence": "1"})
    assert err.value.err_code == 10071
    await js.publish("s.b", b"x", headers={"Nats-Expected-Last-Subject-Sequence": "0"})
    with pytest.raises(APIError) as err:
        await js.publish("s.b", b"x", headers={"Nats-Expected-Stream": "T"})
    assert err.value.err_code == 10060
    with pytest.raises(APIError) as err:
        await js.publish("s.b", b"x", headers={"Nats-Expected-Last-Msg-Id": "nope"})
    assert err.value.err_code == 10070
    # A publish that matches no stream gets no responders, as from nats-server.
    with pytest.raises(NoStreamResponseError):
        await js.publish("nowhere", b"x", timeout=0.5)


async def test_limits_old_and_new(nc: Client) -> None:
    js = nc.jetstream()
    await js.add_stream(name="OLD", subjects=["old"], max_msgs=3)
    for i in range(5):
        await js.publish("old", b"%d" % i)
    st = (await js.stream_info("OLD")).state
    assert (st.messages, st.first_seq, st.last_seq) == (3, 3, 5)
    await js.add_stream(name="NEW", subjects=["new"], max_msgs=2, discard=api.DiscardPolicy.NEW)
    await js.publish("new", b"1")
    await js.publish("new", b"2")
    with pytest.raises(APIError) as err:
        await js.publish("new", b"3")
    assert err.value.err_code == 10077
    await js.add_stream(name="PER", subjects=["per.*"], max_msgs_per_subject=2)
    for i in range(4):
        await js.publish("per.a", b"%d" % i)
        await js.publish("per.b", b"%d" % i)
    info = await js.stream_info("PER", subjects_filter=">")
    assert info.state.messages == 4 and info.state.subjects == {"per.a": 2, "per.b": 2}
    await js.add_stream(name="BYTES", subjects=["bytes"], max_bytes=300)
    for _ in range(10):
        await js.publish("bytes", b"x" * 50)
    assert (await js.stream_info("BYTES")).state.bytes <= 300
    await js.add_stream(name="SIZE", subjects=["size"], max_msg_size=10)
    with pytest.raises(APIError) as err:
        await js.publish("size", b"x" * 11)
    assert err.value.err_code == 10054


async def test_max_age(nc: Client) -> None:
    js = nc.jetstream()
    await js.add_stream(name="AGE", subjects=["age"], max_age=0.2, storage=api.StorageType.MEMORY)
    await js.publish("age", b"x")
    assert (await js.stream_info("AGE")).state.messages == 1
    for _ in range(50):
        await asyncio.sleep(0.05)
        if (await js.stream_info("AGE")).state.messages == 0:
            break
    st = (await js.stream_info("AGE")).state
    assert (st.messages, st.last_seq) == (0, 1)


async def test_purge_get_delete_direct(nc: Client) -> None:
    js = nc.jetstream()
    await js.add_stream(name="P", subjects=["p.*"], allow_direct=True)
    for i in range(6):
        await js.publish(f"p.{i % 2}", b"%d" % i, headers={"K": str(i)})
    msg = await js.get_msg("P", seq=2)
    assert (msg.subject, msg.data, msg.headers) == ("p.1", b"1", {"K": "1"})
    last = await js.get_last_msg("P", "p.0")
    assert (last.seq, last.data) == (5, b"4")
    direct = await js.get_msg("P", subject="p.1", direct=True)
    assert (direct.seq, direct.data) == (6, b"5")
    assert await js.delete_msg("P", 1)
    with pytest.raises(APIError):
        await js.delete_msg("P", 1)
    with pytest.raises(NotFoundError):
        await js.get_msg("P", seq=1)
    await js.purge_stream("P", subject="p.0")
    st = (await js.stream_info("P")).state
    assert (st.messages, st.first_seq, st.num_deleted) == (3, 2, 2)
    await js.purge_stream("P", keep=1)
    assert (await js.stream_info("P")).state.messages == 1
    await js.purge_stream("P")
    st = (await js.stream_info("P")).state
    assert (st.messages, st.first_seq, st.last_seq) == (0, 7, 6)


async def test_rollup_and_deny_delete(nc: Client) -> None:
    js = nc.jetstream()
    await js.add_stream(name="R", subjects=["r.*"], allow_rollup_hdrs=True, deny_delete=True)
    for i in range(3):
        await js.publish("r.a", b"%d" % i)
    await js.publish("r.b", b"b")
    await js.publish("r.a", b"new", headers={"Nats-Rollup": "sub"})
    assert (await js.stream_info("R")).state.messages == 2
    await js.publish("r.b", b"all", headers={"Nats-Rollup": "all"})
    assert (await js.stream_info("R")).state.messages == 1
    with pytest.raises(APIError):
        await js.delete_msg("R", 6)
    await js.add_stream(name="NOROLL", subjects=["nr"])
    with pytest.raises(APIError) as err:
        await js.publish("nr", b"x", headers={"Nats-Rollup": "sub"})
    assert err.value.err_code == 10111


@pytest.mark.parametrize("storage", [api.StorageType.FILE, api.StorageType.MEMORY])
async def test_restart(js_server: JsServer, storage: api.StorageType) -> None:
    nc = await js_server.connect()
    js = nc.jetstream()
    await js.add_stream(name="KEEP", subjects=["keep.*"], storage=storage, max_msgs_per_subject=3)
    for i in range(10):
        await js.publish(f"keep.{i % 2}", b"v%d" % i, headers={"Nats-Msg-Id": f"id{i}"})
    await js.delete_msg("KEEP", 9)
    await js_server.restart()
    nc = await js_server.connect()
    js = nc.jetstream()
    if storage == api.StorageType.MEMORY:
        with pytest.raises(NotFoundError):
            await js.stream_info("KEEP")
        return
    st = (await js.stream_info("KEEP")).state
    assert (st.messages, st.first_seq, st.last_seq) == (5, 5, 10)
    assert (await js.get_msg("KEEP", seq=10)).data == b"v9"
    # The duplicate window survives the restart too.
    dup = await js.publish("keep.1", b"again", headers={"Nats-Msg-Id": "id7"})
    assert (dup.seq, dup.duplicate) == (8, True)
    ack = await js.publish("keep.1", b"next")
    assert ack.seq == 11


async def test_unknown_and_unsupported_api(nc: Client) -> None:
    resp = await raw(nc, "$JS.API.STREAM.SNAPSHOT.X", {})
    assert resp["type"] == "io.nats.jetstream.api.v1.stream_snapshot_response" and "error" in resp
    resp = await raw(nc, "$JS.API.STREAM.CREATE.X", b"{bad json")
    assert resp["error"]["err_code"] == 10025  # type: ignore[index]


async def test_domain(tmp_path: Path) -> None:
    srv = JsServer(tmp_path / "dom", jetstream={"domain": "hub"})
    await srv.start()
    try:
        nc = await srv.connect()
        js = nc.jetstream(domain="hub")
        await js.add_stream(name="D", subjects=["d"])
        ack = await js.publish("d", b"x")
        assert (ack.seq, ack.domain) == (1, "hub")
        assert (await js.account_info()).domain == "hub"
    finally:
        await srv.stop()
