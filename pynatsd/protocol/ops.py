"""Client ops: what the parser hands to its `OpHandler`, one typed call per op.

The parser calls the handler's method for each complete op as it parses (as httptools calls its
protocol's `on_url`/`on_header`): no op object is built on the hot path, and mypy checks every argument
of every op from the wire to the broker. The parser knows nothing of how the broker frames deliveries.

For tests, tracing and tools, `OpRecorder` is a handler that records each call as a typed op value
(`Pub`, `Sub`, …); `Parser.feed` returns them when the parser was made without a handler.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class OpHandler(Protocol):
    """What a parser drives. Each method is one complete client op, in wire order."""

    def on_connect(self, options: dict[str, object]) -> None: ...

    def on_pub(self, subject: bytes, reply: bytes | None, size: bytes, payload: bytes) -> None:
        """`size` is the size field as the client spelled it (`2`, or `02`): nats-server's MSG repeats it."""

    def on_hpub(
        self, subject: bytes, reply: bytes | None, sizes: bytes, headers: bytes, payload: bytes
    ) -> None:
        """`sizes` is `<header size> <total size>` as sent; `headers` the raw header block
        (`NATS/1.0…\\r\\n\\r\\n`), `payload` what follows it."""

    def on_sub(self, subject: bytes, queue: bytes | None, sid: bytes) -> None: ...

    def on_unsub(self, sid: bytes, max_msgs: int | None) -> None:
        """`max_msgs` is None when absent, -1 when given but not a valid size."""

    def on_ping(self) -> None: ...

    def on_pong(self) -> None: ...

    def on_ok(self) -> None: ...

    def on_err(self, text: str) -> None:
        """A client-sent `-ERR`."""

    def on_info(self, info: dict[str, object]) -> None:
        """A client-sent INFO (nats-server ignores it)."""


@dataclass(frozen=True, slots=True)
class Connect:
    options: dict[str, object]


@dataclass(frozen=True, slots=True)
class Pub:
    subject: bytes
    reply: bytes | None
    size: bytes
    payload: bytes


@dataclass(frozen=True, slots=True)
class HPub:
    subject: bytes
    reply: bytes | None
    sizes: bytes
    headers: bytes
    payload: bytes


@dataclass(frozen=True, slots=True)
class Sub:
    subject: bytes
    queue: bytes | None
    sid: bytes


@dataclass(frozen=True, slots=True)
class Unsub:
    sid: bytes
    max_msgs: int | None


@dataclass(frozen=True, slots=True)
class Ping:
    pass


@dataclass(frozen=True, slots=True)
class Pong:
    pass


@dataclass(frozen=True, slots=True)
class Ok:
    pass


@dataclass(frozen=True, slots=True)
class Err:
    text: str


@dataclass(frozen=True, slots=True)
class Info:
    info: dict[str, object]


Op = Connect | Pub | HPub | Sub | Unsub | Ping | Pong | Ok | Err | Info


class OpRecorder:
    """An `OpHandler` that records every op as a value (tests, tracing, tools)."""

    def __init__(self) -> None:
        self.ops: list[Op] = []

    def take(self) -> list[Op]:
        """The ops recorded since the last call."""
        ops, self.ops = self.ops, []
        return ops

    def on_connect(self, options: dict[str, object]) -> None:
        self.ops.append(Connect(options))

    def on_pub(self, subject: bytes, reply: bytes | None, size: bytes, payload: bytes) -> None:
        self.ops.append(Pub(subject, reply, size, payload))

    def on_hpub(
        self, subject: bytes, reply: bytes | None, sizes: bytes, headers: bytes, payload: bytes
    ) -> None:
        self.ops.append(HPub(subject, reply, sizes, headers, payload))

    def on_sub(self, subject: bytes, queue: bytes | None, sid: bytes) -> None:
        self.ops.append(Sub(subject, queue, sid))

    def on_unsub(self, sid: bytes, max_msgs: int | None) -> None:
        self.ops.append(Unsub(sid, max_msgs))

    def on_ping(self) -> None:
        self.ops.append(Ping())

    def on_pong(self) -> None:
        self.ops.append(Pong())

    def on_ok(self) -> None:
        self.ops.append(Ok())

    def on_err(self, text: str) -> None:
        self.ops.append(Err(text))

    def on_info(self, info: dict[str, object]) -> None:
        self.ops.append(Info(info))


def describe(op: Op) -> str:
    """An op as nats-server traces it: `PUB foo reply 5`, `SUB foo q 1` (CONNECT/INFO: see the caller)."""
    match op:
        case Pub(subject, reply, size, _):
            parts: list[bytes | None] = [b"PUB", subject, reply, size]
        case HPub(subject, reply, sizes, _, _):
            parts = [b"HPUB", subject, reply, sizes]
        case Sub(subject, queue, sid):
            parts = [b"SUB", subject, queue, sid]
        case Unsub(sid, max_msgs):
            parts = [b"UNSUB", sid, None if max_msgs is None else b"%d" % max_msgs]
        case Ping():
            return "PING"
        case Pong():
            return "PONG"
        case Ok():
            return "+OK"
        case Err(text):
            return f"-ERR {text}"
        case Connect() | Info():
            raise ValueError("CONNECT and INFO are traced with their secrets redacted by the caller")
    return " ".join(p.decode("utf-8", "replace") for p in parts if p is not None)
