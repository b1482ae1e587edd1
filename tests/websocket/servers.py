"""pynatsd or nats-server as a subprocess with a `websocket {}` block, ready on both ports."""

from __future__ import annotations

import socket
import time
from pathlib import Path

from tests.servers import ServerProcess, free_port, start_server


def wait_listening(port: int, server: ServerProcess, timeout: float = 15.0) -> None:
    """Both servers accept on the client port before the WebSocket one is bound: wait for it too."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if server.proc.poll() is not None or time.monotonic() > deadline:
                server.stop()
                raise RuntimeError(
                    f"{server.kind}: no websocket listener on {port}\n{server.log()}"
                ) from None
            time.sleep(0.05)


def start_ws_server(
    kind: str, conf_dir: Path, block: str = "no_tls: true", top: str = "", http_port: int | None = None
) -> tuple[ServerProcess, int]:
    """`kind` started with `-c` a config of `top` lines and `websocket { port: <free>, <block> }`; returns the
    server and its WebSocket port."""
    ws_port = free_port()
    conf = conf_dir / f"{kind}-{ws_port}.conf"
    conf.write_text(f"{top}\nwebsocket {{\n  port: {ws_port}\n  {block}\n}}\n")
    server = start_server(kind, ["-c", str(conf)], http_port=http_port)
    wait_listening(ws_port, server)
    return server, ws_port
