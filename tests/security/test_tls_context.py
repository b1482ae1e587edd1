"""TLS contexts from Options: a real handshake over loopback sockets, with and without client certs."""

from __future__ import annotations

import socket
import ssl
import threading
from pathlib import Path

import pytest

from pynatsd.base.options import Options
from pynatsd.base.tls import server_context
from tests.security.certs import make_certs


def _handshake(server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext) -> str | None:
    """Runs one handshake over a socketpair; returns the server-side error text or None."""
    a, b = socket.socketpair()
    a.settimeout(10)
    b.settimeout(10)
    result: list[str | None] = []

    def serve() -> None:
        try:
            with server_ctx.wrap_socket(a, server_side=True) as s:
                s.recv(1)
            result.append(None)
        except (ssl.SSLError, OSError) as exc:
            result.append(str(exc))

    t = threading.Thread(target=serve)
    t.start()
    try:
        with client_ctx.wrap_socket(b, server_hostname="localhost") as c:
            c.sendall(b"x")
    except (ssl.SSLError, OSError):
        pass
    t.join(10)
    return result[0] if result else "no result"


def test_tls_off_gives_no_context() -> None:
    assert server_context(Options()) is None


def test_server_cert_and_mutual_tls(tmp_path: Path) -> None:
    p = make_certs(tmp_path)
    client = ssl.create_default_context(cafile=p["ca"])
    plain = server_context(Options(tls=True, tls_cert=p["server"], tls_key=p["server_key"]))
    assert plain is not None
    assert _handshake(plain, client) is None

    mutual = server_context(
        Options(tls=True, tls_cert=p["server"], tls_key=p["server_key"], tls_ca_cert=p["ca"], tls_verify=True)
    )
    assert mutual is not None
    assert _handshake(mutual, client) is not None  # no client certificate: refused
    client.load_cert_chain(p["client"], p["client_key"])
    assert _handshake(mutual, client) is None


def test_verify_without_ca_uses_the_system_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`verify: true` without `ca_file` checks client certificates against the system's CAs, as
    nats-server (Go) does; SSL_CERT_FILE, which OpenSSL and Go both read, stands in for the store."""
    p = make_certs(tmp_path)
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.load_verify_locations(p["ca"])
    client.load_cert_chain(p["client"], p["client_key"])
    options = Options(tls=True, tls_cert=p["server"], tls_key=p["server_key"], tls_verify=True)
    monkeypatch.setenv("SSL_CERT_FILE", p["server"])  # a store without our CA: the client is refused
    monkeypatch.setenv("SSL_CERT_DIR", str(tmp_path / "none"))
    refusing = server_context(options)
    assert refusing is not None and _handshake(refusing, client) is not None
    monkeypatch.setenv("SSL_CERT_FILE", p["ca"])
    trusting = server_context(options)
    assert trusting is not None and _handshake(trusting, client) is None
