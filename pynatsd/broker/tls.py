"""TLS contexts for the client port (and the https monitoring port) built from Options."""

from __future__ import annotations

import contextlib
import socket
import ssl
import struct
from collections.abc import Coroutine, Generator
from typing import Any, Generic, TypeVar, cast

from pynatsd.broker.options import Options

T = TypeVar("T")

# nats-server's wording for a TLS setup without its certificate or key.
NO_CERT = "TLS Server certificate must be present and valid"
NO_KEY = "TLS Server private key must be present and valid"


def tls_configured(options: Options) -> bool:
    return bool(options.tls or options.tls_verify or options.tls_cert)


def server_context(options: Options, verify_clients: bool = True) -> ssl.SSLContext | None:
    """The server-side SSLContext for `options`, or None when TLS is off.

    `tls_verify` requires and verifies client certificates against `tls_ca_cert` (mutual TLS); pass
    `verify_clients=False` for the https monitoring port, which, as nats-server's, never asks for one.
    """
    if not tls_configured(options):
        return None
    if not options.tls_cert:
        raise ValueError(NO_CERT)
    if not options.tls_key:
        raise ValueError(NO_KEY)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(options.tls_cert, options.tls_key)
    if options.tls_ca_cert:
        ctx.load_verify_locations(options.tls_ca_cert)
    if options.tls_verify and verify_clients:
        if not options.tls_ca_cert:
            raise ValueError("tls_verify needs a CA certificate (tls_ca_cert) to check clients against")
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def session_info(transport: Any) -> tuple[str, str]:
    """(version, cipher suite) of a TLS transport as /connz shows them ("1.3", "TLS_AES_256_GCM_SHA384");
    empty strings for a plain one. TLS 1.2 suites keep OpenSSL's names (Go uses IANA's)."""
    sslobj = transport.get_extra_info("ssl_object") if transport is not None else None
    if sslobj is None:
        return "", ""
    version = sslobj.version() or ""
    cipher = sslobj.cipher()
    return version.removeprefix("TLSv"), cipher[0] if cipher else ""


_LINGER_ABORT = struct.pack("ii", 1, 0)
_LINGER_DEFAULT = struct.pack("ii", 0, 0)


def abortive_close(sock: Any, on: bool) -> None:
    """Makes closing `sock` (a transport's "socket" extra info) send a reset (SO_LINGER 0) or, again,
    a normal FIN.

    Used while a mutual-TLS handshake runs: a client refused for its (missing) certificate must see an
    error. nats-server sends it a TLS alert, which asyncio's SSL layer drops when it closes; with a plain
    close the client would read a clean end of stream after its handshake (nats-py even reports success).
    """
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_ABORT if on else _LINGER_DEFAULT)


def monitor_context(options: Options) -> ssl.SSLContext | None:
    """The context of the https monitoring port (`https_port`), None for plain http; errors as nats-server's.

    Raises ValueError when both ports are set or https is asked for without a TLS certificate.
    """
    if options.http_port and options.https_port:
        raise ValueError(
            f"can't specify both HTTP ({options.http_port}) and HTTPs ({options.https_port}) ports"
        )
    if not options.https_port:
        return None
    ctx = server_context(options, verify_clients=False)
    if ctx is None:
        raise ValueError("TLS cert and key required for HTTPS")
    return ctx


def check(options: Options) -> None:
    """Builds every TLS context `options` asks for; raises ValueError or OSError (bad files) early."""
    server_context(options)
    monitor_context(options)


class StartedCoroutine(Generic[T]):
    """A coroutine run now up to its first suspension; awaiting this object runs the rest.

    `loop.start_tls` replaces the transport's protocol in the synchronous part of its body; starting
    it eagerly lets `connection_made` hand the transport over before the loop reads a byte from it.
    """

    def __init__(self, coro: Coroutine[Any, Any, T]) -> None:
        self._coro = coro
        self._done = False
        self._result: T | None = None
        try:
            self._yielded: Any = coro.send(None)
        except StopIteration as stop:
            self._done, self._result = True, stop.value

    def __await__(self) -> Generator[Any, None, T]:
        if self._done:
            return cast(T, self._result)
        try:
            yield self._yielded  # the future the coroutine waits on: the awaiting task waits on it
        except BaseException:
            self._coro.close()
            raise
        return (yield from self._coro.__await__())
