"""TLS contexts for the client port (and the https monitoring port) built from Options."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import ssl
import struct
from collections.abc import Callable, Coroutine, Generator
from typing import Any, Generic, TypeVar, cast

from pynatsd.base.options import Options

T = TypeVar("T")

# nats-server's wording for a TLS setup without its certificate or key.
NO_CERT = "TLS Server certificate must be present and valid"
NO_KEY = "TLS Server private key must be present and valid"


def tls_configured(options: Options) -> bool:
    return bool(options.tls or options.tls_verify or options.tls_cert or options.tls_certs)


def server_context(options: Options, verify_clients: bool = True) -> ssl.SSLContext | None:
    """The server-side SSLContext for `options`, or None when TLS is off.

    `tls_verify` requires and verifies client certificates against `tls_ca_cert` (mutual TLS), or the
    system's CAs without one, as nats-server; pass
    `verify_clients=False` for the https monitoring port, which, as nats-server's, never asks for one.
    """
    if not tls_configured(options):
        return None
    pairs = options.tls_certs or [(options.tls_cert, options.tls_key)]
    if not pairs[0][0]:
        raise ValueError(NO_CERT)
    if not pairs[0][1]:
        raise ValueError(NO_KEY)
    ctx = _context(options, *pairs[0], verify_clients)
    if len(pairs) > 1:
        _select_by_sni(
            ctx, [(_names(cert), _context(options, cert, key, verify_clients)) for cert, key in pairs[1:]]
        )
    return ctx


def _context(options: Options, cert: str, key: str, verify_clients: bool) -> ssl.SSLContext:
    """One certificate's context with the configured versions, ciphers, curves and client verification."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls13 = options.tls_min_version == "1.3"
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3 if tls13 else ssl.TLSVersion.TLSv1_2
    if options.tls_ciphers:  # TLS 1.2 suites; TLS 1.3's are not configurable (nor in Go)
        try:
            ctx.set_ciphers(":".join(options.tls_ciphers))
        except ssl.SSLError:
            raise ValueError(f"no cipher suite of {options.tls_ciphers} is available in OpenSSL") from None
    if options.tls_curves:
        # Python's ssl sets a single group (no set1_groups_list): the most preferred one.
        ctx.set_ecdh_curve(options.tls_curves[0])
    for path in (cert, key, options.tls_ca_cert):
        if path and not os.path.exists(path):  # nats-server's wording, with the path
            raise ValueError(
                f"error parsing X509 certificate/key pair: open {path}: no such file or directory"
            )
    try:
        ctx.load_cert_chain(cert, key)
        if options.tls_ca_cert:
            ctx.load_verify_locations(options.tls_ca_cert)
        elif options.tls_verify and verify_clients:  # as Go: the system's CAs (SSL_CERT_FILE, ...)
            ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)
    except ssl.SSLError as exc:  # not a certificate or key, or a mismatched pair
        raise ValueError(f"error parsing X509 certificate/key pair: {exc.reason or exc}") from None
    if options.tls_verify and verify_clients:
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def _names(cert_file: str) -> list[str]:
    """The DNS names (subjectAltName, else the common name) a certificate file is for."""
    decode = getattr(getattr(ssl, "_ssl"), "_test_decode_cert", None)  # noqa: B009 (private, stable)
    info: dict[str, Any] = decode(cert_file) if decode else {}
    names = [v for k, v in info.get("subjectAltName", ()) if k == "DNS"]
    if not names:
        names = [v for rdn in info.get("subject", ()) for k, v in rdn if k == "commonName"]
    return [n.lower() for n in names]


def _select_by_sni(default: ssl.SSLContext, others: list[tuple[list[str], ssl.SSLContext]]) -> None:
    """With several certificates (`tls { certs = [...] }`), the one whose names match the client's SNI
    serves it; the first one otherwise (Go picks the same way)."""

    def matches(name: str, pattern: str) -> bool:
        if pattern.startswith("*."):
            return name.partition(".")[2] == pattern[2:]
        return name == pattern

    def pick(sock: ssl.SSLObject | ssl.SSLSocket, server_name: str | None, _: ssl.SSLContext) -> None:
        if server_name:
            for names, ctx in others:
                if any(matches(server_name.lower(), n) for n in names):
                    sock.context = ctx
                    return

    default.sni_callback = pick


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


def socket_of(transport: asyncio.BaseTransport) -> object:
    """The socket under `transport` (its "socket" extra info), for abortive_close."""
    sock: object = transport.get_extra_info("socket")
    return sock


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


def peer_context(tls: dict[str, Any], server_side: bool, verify: bool) -> ssl.SSLContext:
    """One side's context for a route, leafnode or gateway `tls {}` block (`cert_file`, `key_file`,
    `ca_file`; a soliciting leaf may have no certificate). `verify`: the peer's certificate is required
    and checked against `ca_file` (the system's CAs without one); without it a server asks for none and
    a client (`insecure`) checks neither chain nor name. ValueError when the files cannot be used."""
    cert, key, ca = tls.get("cert_file", ""), tls.get("key_file", ""), tls.get("ca_file", "")
    for path in (cert, key, ca):
        if path and not os.path.exists(path):  # nats-server's wording, with the path
            raise ValueError(
                f"error parsing X509 certificate/key pair: open {path}: no such file or directory"
            )
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if server_side else ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        if cert:
            ctx.load_cert_chain(cert, key)
        if ca:
            ctx.load_verify_locations(ca)
        elif verify:
            ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH if server_side else ssl.Purpose.SERVER_AUTH)
    except ssl.SSLError as exc:
        raise ValueError(f"error parsing X509 certificate/key pair: {exc.reason or exc}") from None
    if verify:
        ctx.verify_mode = ssl.CERT_REQUIRED
    elif not server_side:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def route_contexts(tls: dict[str, Any]) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(accepting side, soliciting side) contexts for a route `tls {}` block (routes always verify their
    peer); ValueError when its files cannot be used."""
    return peer_context(tls, True, True), peer_context(tls, False, True)


class AcceptTls(asyncio.Protocol):
    """An accepted connection's protocol while its TLS handshake (TLS first: gateways) runs; then it
    hands the TLS transport to `make()`'s protocol. Unlike `create_server(ssl=...)`, whose failed
    handshakes go unlogged, a refused peer is logged as nats-server does (`TLS <kind> handshake error`)."""

    def __init__(
        self,
        make: Callable[[], asyncio.Protocol],
        ctx: ssl.SSLContext,
        timeout: float,
        kind: str,
        log: Callable[..., None],
    ) -> None:
        self._make, self._ctx, self._timeout, self._kind, self._log = make, ctx, timeout, kind, log
        self._early: list[bytes] = []  # what came in after the handshake, before the hand-over
        self._task: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        loop = asyncio.get_running_loop()
        raw = cast(asyncio.Transport, transport)
        started = StartedCoroutine(
            loop.start_tls(raw, self, self._ctx, server_side=True, ssl_handshake_timeout=self._timeout)
        )
        abortive_close(socket_of(raw), True)  # a refused peer sees a reset, not a clean end
        self._task = loop.create_task(self._finish(raw, started))

    async def _finish(
        self, raw: asyncio.Transport, started: StartedCoroutine[asyncio.Transport | None]
    ) -> None:
        peer = raw.get_extra_info("peername")
        where = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else "?"
        try:
            tls = await started
        except (TimeoutError, OSError) as exc:
            self._log("%s - TLS %s handshake error: %s", where, self._kind, exc)
            raw.close()
            return
        if tls is None:
            raw.close()
            return
        abortive_close(socket_of(tls), False)
        protocol = self._make()
        tls.set_protocol(protocol)
        protocol.connection_made(tls)
        for data in self._early:
            protocol.data_received(data)
        self._early = []

    def data_received(self, data: bytes) -> None:
        self._early.append(data)

    def connection_lost(self, exc: Exception | None) -> None:
        pass  # during the handshake its waiter fails too, and _finish logs why
