"""The client listener's socket: dual-stack for the default host, as nats-server's Go listener."""

from __future__ import annotations

import errno
import socket


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
