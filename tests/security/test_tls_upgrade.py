"""TLS after INFO (nats-server's default): config and flags, mutual TLS, plaintext clients, handshake
timeout, https monitoring. pynatsd under asyncio and uvloop, and nats-server with the same arguments."""

from __future__ import annotations

import asyncio
import json
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import nats
import pytest
from nats.aio.msg import Msg

from tests.conftest import need_tool
from tests.security.certs import make_certs
from tests.servers import ServerProcess, free_port, nats_server_binary, pynatsd_command, start_server
from tests.wire import WireClient

TLS_REQUIRED_ERR = b"-ERR 'Secure Connection - TLS Required'\r\n"
# pynatsd under both event loops, and the reference server
KINDS = [("pynatsd", "asyncio"), ("pynatsd", "uvloop"), ("nats-server", "")]
KIND_IDS = ["pynatsd-asyncio", "pynatsd-uvloop", "nats-server"]


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(params=KINDS, ids=KIND_IDS)
def kind(request: pytest.FixtureRequest) -> tuple[str, str]:
    value: tuple[str, str] = request.param
    if value[0] == "nats-server":
        need_tool(nats_server_binary() is not None, "nats-server")
    return value


Serve = Callable[[list[str]], ServerProcess]


@pytest.fixture
def serve(kind: tuple[str, str]) -> Iterator[Serve]:
    """serve(args) -> a server of the wanted kind, stopped after the test."""
    started: list[ServerProcess] = []
    name, loop = kind

    def start(args: list[str]) -> ServerProcess:
        srv = start_server(name, args, env={"PYNATSD_LOOP": loop} if loop else None)
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.stop()


def _tls_block(certs: dict[str, str], extra: str = "") -> str:
    return f'tls {{\n  cert_file: "{certs["server"]}"\n  key_file: "{certs["server_key"]}"\n{extra}}}\n'


def _client_ctx(certs: dict[str, str], with_cert: bool = False) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=certs["ca"])
    if with_cert:
        ctx.load_cert_chain(certs["client"], certs["client_key"])
    return ctx


async def _round_trip(port: int, ctx: ssl.SSLContext) -> dict[str, object]:
    """Connects with nats-py over TLS, checks pub/sub and request/reply; returns the server's INFO."""
    nc = await nats.connect(f"tls://127.0.0.1:{port}", tls=ctx, allow_reconnect=False)
    try:
        sub = await nc.subscribe("secure.>")
        await nc.publish("secure.a", b"over tls")
        assert (await sub.next_msg(timeout=5)).data == b"over tls"

        async def echo(msg: Msg) -> None:
            await msg.respond(msg.data.upper())

        await nc.subscribe("svc", cb=echo)
        assert (await nc.request("svc", b"x" * 100_000, timeout=5)).data == b"X" * 100_000
        info: dict[str, object] = nc._server_info
        return info
    finally:
        await nc.close()


async def test_config_tls(serve: Serve, certs: dict[str, str], tmp_path: Path) -> None:
    conf = tmp_path / "tls.conf"
    conf.write_text(_tls_block(certs, "  timeout: 2\n"))
    srv = serve(["-c", str(conf)])
    with WireClient(srv.port) as plain:  # INFO itself is plaintext, and says TLS is required
        assert plain.info["tls_required"] is True
        assert "tls_verify" not in plain.info
    info = await _round_trip(srv.port, _client_ctx(certs))
    assert info["tls_required"] is True


async def test_tls_flags(serve: Serve, certs: dict[str, str]) -> None:
    srv = serve(["--tls", "--tlscert", certs["server"], "--tlskey", certs["server_key"]])
    info = await _round_trip(srv.port, _client_ctx(certs))
    assert info["tls_required"] is True


def _refused_after_handshake(port: int, ctx: ssl.SSLContext) -> bool:
    """Completes the client side of the handshake after INFO, then sends CONNECT+PING: True when the
    server answers with a TLS alert or a close instead of PONG."""
    with WireClient(port) as client:
        assert client.info["tls_verify"] is True
        with ctx.wrap_socket(client.sock, server_hostname="127.0.0.1") as tls:
            try:
                tls.sendall(b"CONNECT {}\r\nPING\r\n")
                data = tls.recv(4096)
            except (ssl.SSLError, OSError):
                return True
            return data == b""


@pytest.mark.parametrize("source", ["flags", "config"])
async def test_mutual_tls(serve: Serve, certs: dict[str, str], tmp_path: Path, source: str) -> None:
    if source == "flags":
        args = ["--tlsverify", "--tlscert", certs["server"], "--tlskey", certs["server_key"]]
        args += ["--tlscacert", certs["ca"]]
    else:
        conf = tmp_path / "mtls.conf"
        conf.write_text(_tls_block(certs, f'  ca_file: "{certs["ca"]}"\n  verify: true\n'))
        args = ["-c", str(conf)]
    srv = serve(args)
    info = await _round_trip(srv.port, _client_ctx(certs, with_cert=True))
    assert info["tls_verify"] is True
    # Without a client certificate: refused (nats-server with a TLS alert, pynatsd by closing).
    assert _refused_after_handshake(srv.port, _client_ctx(certs))
    with pytest.raises((ssl.SSLError, OSError, nats.errors.Error)):
        await nats.connect(
            f"tls://127.0.0.1:{srv.port}", tls=_client_ctx(certs), allow_reconnect=False, connect_timeout=5
        )


def test_plaintext_client_is_refused(serve: Serve, certs: dict[str, str]) -> None:
    """A client that ignores tls_required and sends CONNECT in clear: closed without a word, as
    nats-server does (the bytes fail as a TLS handshake)."""
    srv = serve(["--tls", "--tlscert", certs["server"], "--tlskey", certs["server_key"]])
    with WireClient(srv.port) as client:
        assert client.info["tls_required"] is True
        client.send(b'CONNECT {"verbose":false}\r\nPING\r\n')
        assert client.read_until(b"PONG\r\n") == (b"", True)


def test_handshake_timeout(
    serve: Serve, kind: tuple[str, str], certs: dict[str, str], tmp_path: Path
) -> None:
    conf = tmp_path / "timeout.conf"
    # with verify, as the socket is then set to reset on close until the handshake is done
    conf.write_text(_tls_block(certs, f'  timeout: 0.3\n  ca_file: "{certs["ca"]}"\n  verify: true\n'))
    srv = serve(["-c", str(conf)])
    with WireClient(srv.port) as client:
        data, closed = client.read_until(b"never", timeout=10)  # the client stays silent
    assert closed
    if kind[0] == "pynatsd":
        assert data == TLS_REQUIRED_ERR
    else:
        # nats-server queues the same -ERR but on the unfinished TLS connection: it never reaches the
        # client (its own TestTLSTimeout accepts both outcomes)
        assert data in (b"", TLS_REQUIRED_ERR)


def _https_get(port: int, path: str, ctx: ssl.SSLContext) -> dict[str, object]:
    with urllib.request.urlopen(f"https://127.0.0.1:{port}{path}", context=ctx, timeout=5) as resp:
        assert resp.status == 200
        body: dict[str, object] = json.loads(resp.read())
        return body


@pytest.mark.parametrize("source", ["flags", "config"])
async def test_https_monitoring(serve: Serve, certs: dict[str, str], tmp_path: Path, source: str) -> None:
    https = free_port()
    if source == "flags":
        args = ["-ms", str(https), "--tlsverify", "--tlscacert", certs["ca"]]
        args += ["--tlscert", certs["server"], "--tlskey", certs["server_key"]]
    else:
        conf = tmp_path / "https.conf"
        block = _tls_block(certs, f'  ca_file: "{certs["ca"]}"\n  verify: true\n')
        conf.write_text(f"https_port: {https}\n{block}")
        args = ["-c", str(conf)]
    srv = serve(args)
    ctx = _client_ctx(certs)  # no client certificate: the monitoring port never asks for one
    varz = _https_get(https, "/varz", ctx)
    assert varz["https_port"] == https
    assert varz["tls_required"] is True and varz["tls_verify"] is True
    assert (varz["tls_timeout"], varz["auth_timeout"]) == (2, 3)  # auth: the TLS limit + 1 s by default
    assert _https_get(https, "/healthz", ctx) == {"status": "ok"}
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        urllib.request.urlopen(f"http://127.0.0.1:{https}/varz", timeout=5).read()  # plain http
    # /connz shows the TLS session of a connected client
    nc = await nats.connect(
        f"tls://127.0.0.1:{srv.port}", tls=_client_ctx(certs, with_cert=True), allow_reconnect=False
    )
    try:
        await nc.flush()
        conns = _https_get(https, "/connz", ctx)["connections"]
        assert isinstance(conns, list) and len(conns) == 1
        assert conns[0]["tls_version"] == "1.3"
        assert conns[0]["tls_cipher_suite"].startswith("TLS_")
        assert "tls_first" not in conns[0]
    finally:
        await nc.close()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--tls"], "TLS Server certificate must be present and valid"),
        (["--tls", "--tlscert", "{server}"], "TLS Server private key must be present and valid"),
        (["-ms", "18223"], "TLS cert and key required for HTTPS"),
        (
            ["-m", "18222", "-ms", "18223", "--tls", "--tlscert", "{server}", "--tlskey", "{server_key}"],
            "can't specify both HTTP (18222) and HTTPs (18223) ports",
        ),
    ],
)
@pytest.mark.parametrize("name", ["pynatsd", "nats-server"])
def test_tls_setup_errors(name: str, extra: list[str], message: str, certs: dict[str, str]) -> None:
    """Bad TLS setups exit 1 with nats-server's message, before serving anything."""
    binary = nats_server_binary()
    if name == "nats-server":
        need_tool(binary is not None, "nats-server")
    cmd = pynatsd_command() if name == "pynatsd" else [str(binary)]
    args = [a.format(**certs) for a in extra]
    proc = subprocess.run(
        [*cmd, "-a", "127.0.0.1", "-p", str(free_port()), *args], capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 1
    assert message in proc.stdout + proc.stderr


def test_plain_server_does_not_ask_for_tls() -> None:
    """Without TLS configured, INFO does not ask for it and the connection stays in clear."""
    srv = start_server("pynatsd")
    try:
        with WireClient(srv.port) as client:
            assert "tls_required" not in client.info
            reply, _ = client.exchange(b'CONNECT {"verbose":false}\r\n')
            assert reply == b""
    finally:
        srv.stop()


async def test_concurrent_tls_clients(serve: Serve, certs: dict[str, str]) -> None:
    """Many clients upgrading at once, each receiving what the others publish."""
    srv = serve(["--tls", "--tlscert", certs["server"], "--tlskey", certs["server_key"]])
    url = f"tls://127.0.0.1:{srv.port}"
    clients = await asyncio.gather(
        *(nats.connect(url, tls=_client_ctx(certs), allow_reconnect=False) for _ in range(40))
    )
    try:
        subs = [await nc.subscribe("fan.in") for nc in clients]
        for nc in clients:
            await nc.flush()
        for i, nc in enumerate(clients):
            await nc.publish("fan.in", b"%d" % i)
        for sub in subs:
            got = sorted([int((await sub.next_msg(timeout=10)).data) for _ in clients])
            assert got == list(range(len(clients)))
    finally:
        await asyncio.gather(*(nc.close() for nc in clients))
