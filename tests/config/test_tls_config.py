"""tls block options honoured, on pynatsd as on nats-server: `cipher_suites`, `curve_preferences`,
`min_version` restrict the handshake, `certs = [...]` serves the certificate matching the client's SNI."""

from __future__ import annotations

import contextlib
import socket
import ssl
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID

from tests.conftest import need_tool
from tests.security.certs import make_certs, self_signed, write_pem
from tests.servers import ServerProcess, nats_server_binary, server_with_config

Serve = Callable[[str], ServerProcess]


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    directory = tmp_path_factory.mktemp("tls-config")
    paths = make_certs(directory)
    # A second, self-signed certificate for another name, to be picked by SNI.
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "other.example")])
    cert, key = self_signed(name, x509.SubjectAlternativeName([x509.DNSName("other.example")]), False)
    paths["other"], paths["other_key"] = write_pem(directory / "other", key, cert)
    return paths


@pytest.fixture(params=["pynatsd", "nats-server"])
def serve(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Serve]:
    kind = str(request.param)
    if kind == "nats-server":
        need_tool(nats_server_binary() is not None, "nats-server")
    with contextlib.ExitStack() as started:

        def start(text: str) -> ServerProcess:
            return started.enter_context(server_with_config(kind, tmp_path / "tls.conf", text))

        yield start


def _client(max12: bool = True, cipher: str = "", curve: str = "") -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    if max12:
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    if cipher:
        ctx.set_ciphers(cipher)
    if curve:
        ctx.set_ecdh_curve(curve)
    return ctx


def _handshake(port: int, ctx: ssl.SSLContext, sni: str = "localhost") -> str | None:
    """Upgrades after INFO (as nats clients do); the server certificate's common name, None if refused."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        info = b""
        while not info.endswith(b"\r\n"):
            chunk = raw.recv(4096)
            if not chunk:
                return None
            info += chunk
        try:
            with ctx.wrap_socket(raw, server_hostname=sni) as tls:
                der = tls.getpeercert(binary_form=True)
        except (ssl.SSLError, OSError):
            return None
    assert der is not None
    cn = x509.load_der_x509_certificate(der).subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(cn[0].value)


def _block(certs: dict[str, str], extra: str) -> str:
    return f'tls {{ cert_file: "{certs["server"]}", key_file: "{certs["server_key"]}"\n {extra} }}\n'


def test_cipher_suites_restrict_tls12(serve: Serve, certs: dict[str, str]) -> None:
    server = serve(_block(certs, 'cipher_suites: ["TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"]'))
    assert _handshake(server.port, _client(cipher="ECDHE-ECDSA-AES128-GCM-SHA256")) == "server"
    assert _handshake(server.port, _client(cipher="ECDHE-ECDSA-AES256-GCM-SHA384")) is None


def test_curve_preferences_restrict_the_key_exchange(serve: Serve, certs: dict[str, str]) -> None:
    server = serve(_block(certs, 'curve_preferences: ["CurveP384"]'))
    # TLS 1.3: under 1.2 the offered groups also bind the (P-256) certificate's curve.
    assert _handshake(server.port, _client(max12=False, curve="secp384r1")) == "server"
    assert _handshake(server.port, _client(max12=False, curve="prime256v1")) is None


def test_min_version(serve: Serve, certs: dict[str, str]) -> None:
    server = serve(_block(certs, 'min_version: "1.3"'))
    assert _handshake(server.port, _client(max12=False)) == "server"
    assert _handshake(server.port, _client(max12=True)) is None


def test_several_certificates_by_sni(serve: Serve, certs: dict[str, str]) -> None:
    server = serve(
        f"""tls {{ certs = [
          {{cert_file: "{certs["server"]}", key_file: "{certs["server_key"]}"}}
          {{cert_file: "{certs["other"]}", key_file: "{certs["other_key"]}"}}
        ] }}"""
    )
    assert _handshake(server.port, _client(max12=False), sni="other.example") == "other.example"
    assert _handshake(server.port, _client(max12=False), sni="localhost") == "server"
    assert _handshake(server.port, _client(max12=False), sni="unknown.example") == "server"
