"""The client listener's sockets: dual-stack for the default host and as many descriptors as the system
allows, as nats-server's Go listener has them."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import resource
import socket
import urllib.parse
from collections.abc import Coroutine
from typing import Any

from pynatsd.base.logging import get_logger
from pynatsd.base.values import ConfigValueError


def dual_stack_socket(host: str, port: int) -> socket.socket | None:
    """For the default host (0.0.0.0, or none): one socket on [::] that takes IPv4 clients too, as
    nats-server's Go listener does, so clients reach it on [::1] as well; None (bind 0.0.0.0 as asked)
    where IPv6 is missing or disabled. A port in use is an error either way."""
    if host not in ("", "0.0.0.0") or not socket.has_ipv6:
        return None
    try:
        sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    except OSError:
        return None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(("::", port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise
        return None
    return sock


def unmapped_ip(ip: str) -> str:
    """`::ffff:1.2.3.4` (an IPv4 client of the dual-stack listener) as `1.2.3.4`, as nats-server shows it."""
    return ip[7:] if ip.startswith("::ffff:") and "." in ip else ip


def peer_closed(transport: asyncio.BaseTransport) -> bool:
    """True when the peer of `transport` has closed or reset its end (a peek reads end of file), without
    consuming anything the connection has yet to read."""
    sock = transport.get_extra_info("socket")
    if sock is None:
        return False
    try:
        peek = socket.fromfd(sock.fileno(), socket.AF_INET, socket.SOCK_STREAM)  # a dup of the descriptor
    except OSError:
        return False  # e.g. no descriptor left to dup: assume it is open
    with peek:
        try:
            return peek.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except (BlockingIOError, InterruptedError):
            return False  # open, nothing to read
        except OSError:
            return True  # reset by the peer


def raise_fd_limit() -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard limit, as the Go runtime does for nats-server at start (the
    common soft limit of 1,024 would otherwise cap the connections); returns the (old, new) soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY:
        try:
            with open("/proc/sys/fs/nr_open") as f:  # the kernel's ceiling for a process
                target = int(f.read())
        except (OSError, ValueError):
            return soft, soft
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (OSError, ValueError):
            return soft, soft
        return soft, target
    return soft, soft


def interface_addresses() -> list[str]:
    """Every address of every network interface (IPv4 by ioctl, IPv6 from /proc); Linux, best effort."""
    import fcntl
    import struct

    v4: dict[str, list[str]] = {}
    v6: dict[str, list[str]] = {}
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _index, name in socket.if_nameindex():
            with contextlib.suppress(OSError):
                req = struct.pack("256s", name.encode()[:15])
                raw = fcntl.ioctl(s.fileno(), 0x8915, req)  # SIOCGIFADDR
                v4.setdefault(name, []).append(socket.inet_ntoa(raw[20:24]))
    with contextlib.suppress(OSError), open("/proc/net/if_inet6") as f:
        for line in f:
            fields = line.split()
            if len(fields) >= 6:
                v6.setdefault(fields[5], []).append(str(ipaddress.IPv6Address(bytes.fromhex(fields[0]))))
    names = list(dict.fromkeys([*v4, *v6]))
    return [addr for name in names for addr in (*v4.get(name, []), *v6.get(name, []))]


def listener_urls(scheme: str, listener: asyncio.base_events.Server) -> list[str]:
    """URLs of every socket of `listener`; a wildcard address lists every interface's address."""
    urls: list[str] = []
    for sock in listener.sockets:
        for url in socket_urls(scheme, sock.getsockname()):
            if url not in urls:
                urls.append(url)
    return urls


def socket_urls(scheme: str, sockname: Any) -> list[str]:
    """`scheme://host:port` for a bound address; for 0.0.0.0 or ::, one per interface address (nats-server's
    resolveHostPorts)."""
    host, port = str(sockname[0]), int(sockname[1])
    hosts = interface_addresses() if ipaddress.ip_address(host).is_unspecified else [host]
    return [f"{scheme}://[{h}]:{port}" if ":" in h else f"{scheme}://{h}:{port}" for h in hosts or [host]]


def peer_address(transport: asyncio.BaseTransport) -> tuple[str, int] | None:
    """The connected peer's (ip, port) as clients see it (an IPv4-mapped IPv6 address unmapped); None
    when the transport has none (a socket pair, a closed socket)."""
    peer: object = transport.get_extra_info("peername")
    if not isinstance(peer, tuple) or len(peer) < 2:
        return None
    return unmapped_ip(str(peer[0])), int(peer[1])


def redacted_url(url: str) -> str:
    """`url` for a log line: a password in it shown as `xxxxx` (nats-server's redactURLString)."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{parts.username}:xxxxx@{host}"))


async def start_or_exit(start: Coroutine[Any, Any, None], what: str) -> None:
    """Start a feature's listener (WebSocket, MQTT) or stop the server as nats-server does: a check that
    needed the whole configuration fails with `nats-server: <why>`, a port that cannot be bound with
    `Unable to listen for <what> connections: <why>`."""
    try:
        await start
    except ConfigValueError as exc:
        get_logger().critical("nats-server: %s", exc)
        raise SystemExit(1) from None
    except OSError as exc:
        get_logger().critical("Unable to listen for %s connections: %s", what, exc)
        raise SystemExit(1) from None
