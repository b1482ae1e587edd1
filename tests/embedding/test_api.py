"""The embedding API (pynatsd.Server, docs/install.md): built from keyword arguments or a configuration
file, started and stopped in the caller's event loop, reached at `client_url`; a file is refused with the
errors of the command line (which builds its server the same way)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import nats
import pytest
from nats.aio.msg import Msg

import pynatsd
from pynatsd.cli import main
from pynatsd.leafnodes.manager import LeafListenError
from pynatsd.server import Server
from tests.servers import REPO_ROOT, free_port


def refuses_connections(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


async def test_a_server_from_keywords_serves_on_its_bound_port_until_stopped() -> None:
    server = Server.from_kwargs(port=0, host="127.0.0.1")
    with pytest.raises(RuntimeError, match="not running"):
        _ = server.client_url
    async with server as running:
        assert running is server and server.port > 0
        assert server.client_url == f"nats://127.0.0.1:{server.port}"
        client = await nats.connect(server.client_url)

        async def greet(msg: Msg) -> None:
            await msg.respond(b"hello " + msg.subject.encode())

        sub = await client.subscribe("greet.*", cb=greet)
        reply = await client.request("greet.joe", b"", timeout=5)
        assert reply.data == b"hello greet.joe"
        await sub.unsubscribe()
        await client.close()
    assert not server.listening and refuses_connections(server.port)
    await server.stop()  # stopping again is a no-op


async def test_jetstream_keeps_its_store_where_the_keywords_say(tmp_path: Path) -> None:
    async with Server.from_kwargs(port=0, jetstream=True, store_dir=str(tmp_path)) as server:
        assert server.client_url == f"nats://127.0.0.1:{server.port}"  # the wildcard host, reached locally
        client = await nats.connect(server.client_url)
        kv = await client.jetstream().create_key_value(bucket="settings")
        await kv.put("colour", b"blue")
        assert (await kv.get("colour")).value == b"blue"
        await client.close()
    assert any(path.name == "KV_settings" for path in tmp_path.rglob("*"))


def test_keywords_are_options_fields_only() -> None:
    with pytest.raises(TypeError, match="'colour'"):
        Server.from_kwargs(colour="blue")


def cli_refusal(conf: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """What `pynatsd -c conf` prints before exiting 1, without its `pynatsd: ` prefix."""
    with pytest.raises(SystemExit) as exited:
        main(["-c", str(conf)])
    assert exited.value.code == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("pynatsd: ")
    return err.removeprefix("pynatsd: ")


@pytest.mark.parametrize(
    "text",
    [
        "port: 4222\nlisten {\n",  # a syntax error
        "colour: blue\n",  # a key pynatsd does not know
        "tls { cert_file: ./missing-cert.pem, key_file: ./missing-key.pem }\n",
        "authorization { users: [{user: a, password: b, permissions: {allow_responses: {colour: 1}}}] }\n",
    ],
    ids=["syntax", "unknown key", "tls file", "permissions"],
)
def test_a_configuration_file_is_refused_as_the_command_line_refuses_it(
    text: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = tmp_path / "server.conf"
    conf.write_text(text)
    with pytest.raises((ValueError, OSError)) as refused:
        Server.from_config(conf)
    assert str(refused.value) == cli_refusal(conf, capsys)


async def test_a_configuration_file_with_overrides(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = tmp_path / "server.conf"
    configured_port = free_port()
    conf.write_text(f"port: {configured_port}\nmax_payload: 2048\nserver_name: embedded\n")
    with pytest.raises(SystemExit):
        main(["-c", str(conf), "-t"])
    digest = capsys.readouterr().err.rsplit("(", 1)[1].rstrip(")\n")
    server = Server.from_config(conf, host="127.0.0.1", port=0)
    assert server.options.config_digest == digest  # the digest `pynatsd -t` prints for the same file
    async with server:
        assert server.port != configured_port
        client = await nats.connect(server.client_url)
        assert client.max_payload == 2048 and client._server_info["server_name"] == "embedded"
        await client.close()


def test_import_pynatsd_loads_no_server_until_named() -> None:
    probe = (
        "import json, sys\n"
        "already = set(sys.modules)\n"
        "import pynatsd\n"
        "loaded = set(sys.modules) - already\n"
        "first = sorted(m for m in loaded if m.split('.')[0] in ('pynatsd', 'asyncio', 'typing'))\n"
        "named = {name: getattr(pynatsd, name) is not None for name in pynatsd.__all__}\n"
        "print(json.dumps([first, named, pynatsd.Server.__module__, pynatsd.Options.__module__]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO_ROOT, check=True
    )
    first, named, server_module, options_module = json.loads(out.stdout)
    assert first == ["pynatsd", "pynatsd.extensions"]
    assert named == dict.fromkeys(pynatsd.__all__, True)
    assert (server_module, options_module) == ("pynatsd.server", "pynatsd.base.options")
    with pytest.raises(AttributeError, match="no attribute 'Sever'"):
        _ = pynatsd.Sever  # type: ignore[attr-defined]


async def test_a_start_that_fails_stops_what_it_had_started(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = Server.from_kwargs(
            host="127.0.0.1", port=port, http_port=-1, jetstream=True, store_dir=str(tmp_path)
        )
        with pytest.raises(OSError):
            await server.start()
    assert server.http_port > 0 and refuses_connections(server.http_port)  # monitoring started first
    assert not server.listening


async def test_reload_rereads_the_configuration_file(tmp_path: Path) -> None:
    conf = tmp_path / "server.conf"
    conf.write_text("max_payload: 2048\n")
    async with Server.from_config(conf, host="127.0.0.1", port=0) as server:
        conf.write_text("max_payload: 4096\n")
        server.reload()
        assert server.options.max_payload == 4096


async def test_a_start_failing_at_its_leafnode_port_closes_its_gateway_port(tmp_path: Path) -> None:
    """The gateway listener opens before the leafnode port: when that one cannot be bound, the start's
    undo closes the gateway port too (it stayed open in the embedding process)."""
    gateway_port = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        leaf_port = taken.getsockname()[1]
        conf = tmp_path / "server.conf"
        conf.write_text(
            f"gateway {{ name: A, listen: 127.0.0.1:{gateway_port} }}\n"
            f"leafnodes {{ listen: 127.0.0.1:{leaf_port} }}\n"
        )
        server = Server.from_config(conf, host="127.0.0.1", port=0)
        with pytest.raises(LeafListenError, match="Error listening on leafnode port"):
            await server.start()
    assert refuses_connections(gateway_port)
    assert not server.listening
