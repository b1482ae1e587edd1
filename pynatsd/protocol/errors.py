"""Typed protocol errors and the one source of truth for every `-ERR` text pynatsd sends.

Texts match nats-server byte for byte (see shared/docs/nats-protocol.md §3). An error either closes the
connection (after its `-ERR`, or silently when `err_text` is None) or leaves it open.
"""

from __future__ import annotations

from typing import Any

# Errors after which the server closes the connection.
UNKNOWN_OPERATION = "Unknown Protocol Operation"
MAX_CONTROL_LINE = "maximum control line exceeded"
MAX_PAYLOAD = "Maximum Payload Violation"
AUTHORIZATION_VIOLATION = "Authorization Violation"
AUTHENTICATION_TIMEOUT = "Authentication Timeout"
AUTHENTICATION_EXPIRED = "User Authentication Expired"
ACCOUNT_AUTHENTICATION_EXPIRED = "Account Authentication Expired"
AUTHENTICATION_REVOKED = "User Authentication Revoked"
MAX_ACCOUNT_CONNECTIONS = "maximum account active connections exceeded"
INVALID_CLIENT_PROTOCOL = "invalid client protocol"
NO_RESPONDERS_REQUIRES_HEADERS = "no responders requires headers support"
MAX_CONNECTIONS = "maximum connections exceeded"
STALE_CONNECTION = "Stale Connection"
SECURE_CONNECTION_TLS_REQUIRED = "Secure Connection - TLS Required"

# Errors after which the connection stays open.
INVALID_SUBJECT = "Invalid Subject"
INVALID_PUBLISH_SUBJECT = "Invalid Publish Subject"
MAX_SUBSCRIPTIONS = "maximum subscriptions exceeded"


def quote(name: str) -> str:
    """Quote a subject as Go's %q does (the form nats-server uses in permission errors)."""
    out = ['"']
    for ch in name:
        if ch == '"' or ch == "\\":
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def publish_violation(subject: str) -> str:
    return f"Permissions Violation for Publish to {quote(subject)}"


def publish_reply_violation(reply: str) -> str:
    return f"Permissions Violation for Publish with Reply of {quote(reply)}"


def subscribe_violation(subject: str, queue: str | None = None) -> str:
    if queue:
        return f"Permissions Violation for Subscription to {quote(subject)} using queue {quote(queue)}"
    return f"Permissions Violation for Subscription to {quote(subject)}"


class ProtocolError(Exception):
    """A client broke the protocol.

    `err_text` is what goes inside `-ERR '…'` (None: close without a word); `closes` says whether the
    connection is dropped. The ops before the error in the same read have already reached the parser's
    handler; a parser without a handler (recording ops) leaves them in `ops`.
    """

    err_text: str | None = None
    closes: bool = True

    def __init__(self, detail: str = "", log_text: str | None = None) -> None:
        super().__init__(detail or self.err_text or type(self).__name__)
        self.detail = detail
        self.ops: list[Any] = []
        self.log_text = log_text  # what nats-server logs as an error for it (None: err_text, if any)


class UnknownOperation(ProtocolError):
    err_text = UNKNOWN_OPERATION


PROTO_SNIPPET_SIZE = 32  # nats-server's: how much of the offending bytes its parser error shows


def unknown_operation(buf: bytes, pos: int, detail: str = "unknown op") -> UnknownOperation:
    """The error for an op nats-server's parser does not know, at `pos` in the read `buf`, with its log
    line (`Client parser ERROR, state=0, i=<pos>: proto='"<snippet>"...'`: the state, its parser's own,
    is its op-start state)."""
    stop = pos + PROTO_SNIPPET_SIZE
    if pos >= len(buf):
        snippet = '""'
    else:
        snippet = quote(buf[pos : stop if stop <= len(buf) else len(buf) - 1].decode("latin-1"))
    return UnknownOperation(detail, f"Client parser ERROR, state=0, i={pos}: proto='{snippet}...'")


class MaxControlLineExceeded(ProtocolError):
    err_text = MAX_CONTROL_LINE


class MaxPayloadExceeded(ProtocolError):
    err_text = MAX_PAYLOAD


def max_payload_exceeded(size: int, limit: int) -> MaxPayloadExceeded:
    """A payload over the limit, logged with both sizes as nats-server does."""
    return MaxPayloadExceeded(f"payload of {size} bytes", f"maximum payload exceeded: {size} vs {limit}")


class BadArguments(ProtocolError):
    """Wrong argument count or a bad size in PUB/HPUB/SUB/UNSUB: nats-server closes silently."""


class InvalidJSON(ProtocolError):
    """CONNECT or INFO whose JSON does not decode: closed silently."""


class HeadersNotNegotiated(ProtocolError):
    """HPUB on a connection that did not negotiate headers: closed silently."""


class ClientSentError(ProtocolError):
    """The client sent `-ERR`: nats-server logs it and closes silently."""


class AuthorizationViolation(ProtocolError):
    err_text = AUTHORIZATION_VIOLATION


class InvalidClientProtocol(ProtocolError):
    err_text = INVALID_CLIENT_PROTOCOL


class NoRespondersRequiresHeaders(ProtocolError):
    err_text = NO_RESPONDERS_REQUIRES_HEADERS
