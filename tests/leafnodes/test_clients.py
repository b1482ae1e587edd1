"""nats.go and libnats across a leaf node link, each topology of tests/leafnodes/conftest.py: the Go and C
drivers of tests/interop publish on one side and subscribe, answer or request on the other, and every
payload and header arrives as it was sent (the nats-py rows are tests/leafnodes/test_matrix.py)."""

from __future__ import annotations

import asyncio

import pytest

from tests.interop.conftest import c_driver, go_driver  # noqa: F401 (the drivers' session fixtures)
from tests.interop.drivers import Driver
from tests.interop.spec import header_pairs, payload
from tests.leafnodes.conftest import Pair, connect, ready
from tests.servers import ServerProcess

COUNT = 6  # every payload size of the spec once


def _url(server: ServerProcess) -> str:
    return f"nats://a:a@127.0.0.1:{server.port}"  # user a of account A, bound across the link on both sides


@pytest.mark.parametrize("lang", ["go", "c"])
async def test_native_clients_across_the_link(pair: Pair, lang: str, request: pytest.FixtureRequest) -> None:
    driver: Driver = request.getfixturevalue(f"{lang}_driver")
    on_hub, on_leaf = await connect(pair.hub), await connect(pair.leaf)
    # a leaf's publisher to a hub's subscriber: payloads and headers byte for byte
    subject = f"native.{lang}.up"
    listener = driver.start("sub", _url(pair.hub), subject, COUNT)
    try:
        listener.expect("ready")
        await ready(on_hub, on_leaf)  # the probe's interest crosses behind the driver's
        await asyncio.to_thread(driver.run, "pub", _url(pair.leaf), subject, COUNT)
        received = [listener.expect("msg") for _ in range(COUNT)]
        listener.finish()
    finally:
        listener.kill()
    assert [bytes.fromhex(m["data"]) for m in received] == [payload(i) for i in range(COUNT)]
    assert [m["hdr"] for m in received] == [header_pairs(i, lang) for i in range(COUNT)]
    # a hub's requester answered by a responder on the leaf (the reply crosses back on the inbox)
    subject = f"native.{lang}.svc"
    responder = driver.start("respond", _url(pair.leaf), subject, COUNT)
    try:
        responder.expect("ready")
        await ready(on_leaf, on_hub)
        replies = await asyncio.to_thread(driver.run, "request", _url(pair.hub), subject, COUNT, "new")
        responder.finish()
    finally:
        responder.kill()
    assert [bytes.fromhex(r["data"]) for r in replies] == [b"re:" + payload(i) for i in range(COUNT)]
