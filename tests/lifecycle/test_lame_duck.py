"""SIGUSR2 lame duck mode end to end, on pynatsd and on the reference nats-server alike: the listener
closes, protocol-1 clients get an INFO with `ldm: true` (nats-py's lame duck callback fires), monitoring keeps
answering, the remaining clients are closed after the grace period, and the process exits 0."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path

import aiohttp
import nats
import pytest

from tests.conftest import need_tool
from tests.servers import ServerProcess, free_port, nats_server_binary, start_server

# nats-server refuses a lame_duck_duration under 30s; with two clients it closes them a second apart anyway.
CONFIG = 'lame_duck_duration: "30s"\nlame_duck_grace_period: "500ms"\n'


async def _read_all(reader: asyncio.StreamReader) -> bytes:
    data = b""
    while chunk := await reader.read(65536):
        data += chunk
    return data


@pytest.mark.parametrize("kind", ["pynatsd", "nats-server"])
async def test_sigusr2_lame_duck_mode(kind: str, tmp_path: Path) -> None:
    if kind == "nats-server":
        need_tool(nats_server_binary() is not None, "nats-server")
    conf = tmp_path / "ldm.conf"
    conf.write_text(CONFIG)
    pid_file = tmp_path / "server.pid"
    http_port = free_port()
    server = start_server(kind, ["-c", str(conf), "-P", str(pid_file)], http_port=http_port, log_dir=tmp_path)
    try:
        lame_duck, disconnected = asyncio.Event(), asyncio.Event()
        events: list[str] = []

        async def on_lame_duck() -> None:
            events.append("lame_duck")
            lame_duck.set()

        async def on_disconnect() -> None:
            events.append("disconnected")
            disconnected.set()

        nc = await nats.connect(
            server.url,
            lame_duck_mode_cb=on_lame_duck,
            disconnected_cb=on_disconnect,
            allow_reconnect=False,
        )
        # A protocol-0 client: it gets no async INFO, only the close.
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b'CONNECT {"verbose":false}\r\nPING\r\n')
        greeting = await reader.readuntil(b"PONG\r\n")
        assert greeting.startswith(b"INFO ")

        server.proc.send_signal(signal.SIGUSR2)
        await asyncio.wait_for(lame_duck.wait(), 10)

        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection("127.0.0.1", server.port)
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{http_port}/varz") as resp:
                assert resp.status == 200
                assert json.loads(await resp.text())["port"] == server.port
            async with session.get(f"http://127.0.0.1:{http_port}/healthz") as resp:
                assert resp.status == 500
                assert json.loads(await resp.text())["status"] == "error"

        rest = await asyncio.wait_for(_read_all(reader), 15)
        assert b'"ldm"' not in rest
        writer.close()
        await asyncio.wait_for(disconnected.wait(), 15)
        assert events == ["lame_duck", "disconnected"]
        await nc.close()
        assert await asyncio.to_thread(server.proc.wait, 15) == 0
        log = server.log()
        assert "Entering lame duck mode, stop accepting new clients" in log
        assert "Traceback" not in log
        assert pid_file.exists() == (kind == "nats-server")  # nats-server leaves it behind, pynatsd not
    finally:
        server.stop(signal.SIGKILL)


async def test_lame_duck_without_clients_exits_at_once(tmp_path: Path) -> None:
    conf = tmp_path / "ldm.conf"
    conf.write_text('lame_duck_duration: "1h"\nlame_duck_grace_period: "1h"\n')
    server = start_server("pynatsd", ["-c", str(conf)], log_dir=tmp_path)
    try:
        server.proc.send_signal(signal.SIGUSR2)
        assert await asyncio.to_thread(server.proc.wait, 15) == 0
        assert "Entering lame duck mode" in server.log()
    finally:
        server.stop(signal.SIGKILL)


async def test_sigterm_does_not_cut_lame_duck_mode_short_but_sigint_does(tmp_path: Path) -> None:
    """As nats-server: during lame duck mode SIGTERM is logged and ignored (systemd's stop sends it right
    after the SIGUSR2), SIGINT still stops at once."""
    conf = tmp_path / "ldm.conf"
    conf.write_text('lame_duck_duration: "1h"\nlame_duck_grace_period: "1h"\n')
    server = start_server("pynatsd", ["-c", str(conf)], log_dir=tmp_path)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"CONNECT {}\r\nPING\r\n")
        await reader.readuntil(b"PONG\r\n")
        server.proc.send_signal(signal.SIGUSR2)
        await _log_shows(server, "Entering lame duck mode")
        server.proc.send_signal(signal.SIGTERM)
        await _log_shows(server, 'Trapped "terminated" signal')
        # A shutdown would have run before this PING is read: the client is still served.
        writer.write(b"PING\r\n")
        assert await asyncio.wait_for(reader.readuntil(b"PONG\r\n"), 10) == b"PONG\r\n"
        assert server.proc.poll() is None
        server.proc.send_signal(signal.SIGINT)
        assert await asyncio.to_thread(server.proc.wait, 15) == 0
        assert await asyncio.wait_for(reader.read(), 10) == b""
        writer.close()
    finally:
        server.stop(signal.SIGKILL)


async def _log_shows(server: ServerProcess, text: str, timeout: float = 15.0) -> None:
    async with asyncio.timeout(timeout):
        while text not in server.log():
            await asyncio.sleep(0.02)
