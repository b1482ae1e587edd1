"""TLS-first (`tls { handshake_first: true }`) with nats-py, on pynatsd and nats-server."""

from __future__ import annotations

import ssl
from pathlib import Path

import nats
import pytest

from tests.security.certs import make_certs
from tests.servers import start_server


@pytest.mark.parametrize("kind", ["pynatsd", "nats-server"])
async def test_handshake_first_roundtrip(kind: str, tmp_path: Path) -> None:
    p = make_certs(tmp_path)
    conf = tmp_path / "tls.conf"
    block = f'cert_file: "{p["server"]}"\n  key_file: "{p["server_key"]}"\n  handshake_first: true'
    conf.write_text(f"tls {{\n  {block}\n}}\n")
    server = start_server(kind, ["-c", str(conf)], tls_first=True)
    try:
        ctx = ssl.create_default_context(cafile=p["ca"])
        nc = await nats.connect(f"tls://127.0.0.1:{server.port}", tls=ctx, tls_handshake_first=True,
                                allow_reconnect=False)  # fmt: skip
        try:
            assert nc._server_info.get("tls_required") is True
            sub = await nc.subscribe("secure")
            await nc.publish("secure", b"over tls")
            msg = await sub.next_msg(timeout=5)
            assert msg.data == b"over tls"
        finally:
            await nc.close()
    finally:
        server.stop()


@pytest.mark.parametrize("kind", ["pynatsd", "nats-server"])
async def test_handshake_first_mutual_tls(kind: str, tmp_path: Path) -> None:
    p = make_certs(tmp_path)
    conf = tmp_path / "mtls.conf"
    block = (
        f'cert_file: "{p["server"]}"\n  key_file: "{p["server_key"]}"\n  ca_file: "{p["ca"]}"\n'
        "  verify: true\n  handshake_first: true"
    )
    conf.write_text(f"tls {{\n  {block}\n}}\n")
    server = start_server(kind, ["-c", str(conf)], tls_first=True, client_cert=(p["client"], p["client_key"]))
    try:
        url = f"tls://127.0.0.1:{server.port}"
        ctx = ssl.create_default_context(cafile=p["ca"])
        # Without a client certificate: refused (nats-server with a TLS alert, pynatsd by closing).
        with pytest.raises((ssl.SSLError, OSError, nats.errors.Error)):
            await nats.connect(url, tls=ctx, tls_handshake_first=True, allow_reconnect=False)
        ctx.load_cert_chain(p["client"], p["client_key"])
        nc = await nats.connect(url, tls=ctx, tls_handshake_first=True, allow_reconnect=False)
        try:
            assert nc._server_info.get("tls_verify") is True
            sub = await nc.subscribe("secure")
            await nc.publish("secure", b"mutual")
            assert (await sub.next_msg(timeout=5)).data == b"mutual"
            await nc.close()  # a normal close once accepted
        finally:
            await nc.close()
    finally:
        server.stop()
