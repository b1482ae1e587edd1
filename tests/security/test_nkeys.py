"""nkey users: nonce challenge signed by nats-py, good and wrong keys, on pynatsd and nats-server."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import nats
import nkeys
import pytest

from tests.servers import start_server
from tests.wire import WireClient


def _user() -> tuple[str, str]:
    seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
    return seed.decode(), nkeys.from_seed(seed).public_key.decode()


@pytest.mark.parametrize("kind", ["pynatsd", "nats-server"])
async def test_nkey_login(kind: str, tmp_path: Path) -> None:
    seed, public = _user()
    other_seed, _ = _user()
    conf = tmp_path / "nk.conf"
    conf.write_text(f"authorization {{ users = [ {{nkey: {public}}} ] }}\n")
    server = start_server(kind, ["-c", str(conf)])
    try:
        nc = await nats.connect(server.url, nkeys_seed_str=seed, allow_reconnect=False)
        try:
            sub = await nc.subscribe("nk")
            await nc.publish("nk", b"signed")
            assert (await sub.next_msg(timeout=5)).data == b"signed"
        finally:
            await nc.close()
        with WireClient(server.port) as client:
            nonce = client.info["nonce"]
            kp = nkeys.from_seed(other_seed.encode())

            sig = base64.urlsafe_b64encode(kp.sign(nonce.encode())).decode().rstrip("=")
            connect = f'CONNECT {{"nkey":"{public}","sig":"{sig}","verbose":false}}\r\nPING\r\n'
            reply, closed = client.exchange(connect.encode())
            assert reply == b"-ERR 'Authorization Violation'\r\n"
            assert closed
    finally:
        server.stop()
