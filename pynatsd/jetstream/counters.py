"""Counter streams (`allow_msg_counter`, nats-server 2.12): each publish carries a `Nats-Incr: <integer>`
header and no payload; the stream stores the subject's new total as `{"val":"<total>"}` and answers it in
the PubAck's `val`. Totals are arbitrary-precision integers, as nats-server's big.Int: never overflow.

A source's copy into a counter stream carries its origin's total: the stream adds the difference from the
last total it saw of that origin stream and subject, and keeps those totals in the
`Nats-Counter-Sources: {"<stream>":{"<subject>":"<total>"}}` header of each message it stores."""

from __future__ import annotations

import decimal
import json
import re
from typing import Any

from pynatsd.jetstream import errors
from pynatsd.jetstream.errors import ApiError
from pynatsd.jetstream.util import encode, get_header

INCR = b"Nats-Incr"
SOURCES = b"Nats-Counter-Sources"
# Go's big.Int.SetString(s, 10): an optional sign and decimal digits, nothing else (no "_", no spaces).
_INTEGER = re.compile(rb"[+-]?[0-9]+\Z")
# Exact integer arithmetic at any size: Python's int() refuses strings past 4300 digits, a header may hold
# a million; decimal converts in linear time and, with this precision, never rounds an integer sum.
_EXACT = decimal.Context(prec=decimal.MAX_PREC, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)
# Expected-* headers and rollups make no sense on an increment: nats-server refuses them as invalid.
_INCOMPATIBLE = (
    b"Nats-Rollup",
    b"Nats-Expected-Stream",
    b"Nats-Expected-Last-Msg-Id",
    b"Nats-Expected-Last-Subject-Sequence-Subject",
    b"Nats-Expected-Last-Sequence",
    b"Nats-Expected-Last-Subject-Sequence",
)


def check_config(cfg: dict[str, Any]) -> None:
    """What a counter stream cannot be combined with (nats-server's checkStreamCfg words)."""
    if not cfg.get("allow_msg_counter"):
        return
    if cfg["discard"] == "new":
        raise errors.stream_invalid_config("counter stream cannot use discard new")
    if cfg.get("allow_msg_ttl"):
        raise errors.stream_invalid_config("counter stream cannot use message TTLs")
    if cfg.get("allow_msg_schedules"):
        raise errors.stream_invalid_config("counter stream cannot use message schedules")
    if cfg["retention"] != "limits":
        raise errors.stream_invalid_config("counter stream can only use limits retention")


def incr_of(hdrs: bytes, payload: bytes, counter: bool, sourced: bool) -> bytes | None:
    """A publish's Nats-Incr value, checked as nats-server checks it (None when empty); raises ApiError."""
    raw = _raw_value(hdrs, INCR)
    if not raw:
        return None
    if _INTEGER.match(raw) is None:
        raise incr_invalid()
    if sourced:  # stored as its origin wrote it
        return raw
    if not counter:
        raise errors._e(400, 10168, "message counters is disabled")
    if payload:
        raise errors._e(400, 10170, "message counter has payload")
    for name in _INCOMPATIBLE:
        if get_header(hdrs, name):
            raise incr_invalid()
    return raw


def incr_invalid() -> ApiError:
    return errors._e(400, 10171, "message counter increment is invalid")


def incr_missing() -> ApiError:
    return errors._e(400, 10169, "message counter increment is missing")


def broken() -> ApiError:
    return errors._e(400, 10172, "message counter is broken")


def _value_of(body: bytes) -> decimal.Decimal:
    """The total in a stored `{"val":"..."}` body (Go's json: the key matched without case); raises
    `broken` when the body is no such object."""
    try:
        doc = json.loads(body)
    except ValueError:
        raise broken() from None
    if not isinstance(doc, dict):
        raise broken()
    val: Any = ""
    for key, value in doc.items():
        if key.lower() == "val":
            val = value
    if not isinstance(val, str):
        raise broken()
    if _INTEGER.match(val.encode()) is None:
        return decimal.Decimal(0)  # what Go's failed SetString leaves in a fresh big.Int
    return decimal.Decimal(val)


def _text(value: decimal.Decimal) -> str:
    return str(value) if value else "0"  # never "-0"


def _raw_value(hdrs: bytes, key: bytes) -> bytes:
    """A header's value as nats-server slices it: leading spaces skipped, trailing ones kept."""
    needle = b"\r\n" + key + b":"
    i = hdrs.find(needle)
    if i < 0:
        return b""
    end = hdrs.find(b"\r\n", i + len(needle))
    return hdrs[i + len(needle) : end].lstrip(b" ")


def apply(
    last: tuple[bytes | None, bytes] | None, subject: bytes, hdrs: bytes, payload: bytes, incr: bytes
) -> tuple[bytes, bytes, bytes]:
    """The headers and body to store for an increment of `subject` whose last stored message is `last`
    (headers, body), and the new total; raises ApiError."""
    total = decimal.Decimal(0)
    sources: dict[str, dict[str, str]] = {}
    if last is not None:
        total = _value_of(last[1])
        raw_sources = get_header(last[0], SOURCES)
        if raw_sources:
            try:
                loaded = json.loads(raw_sources)
            except ValueError:
                raise broken() from None
            if not isinstance(loaded, dict) or not all(
                isinstance(v, dict) and all(isinstance(x, str) for x in v.values()) for v in loaded.values()
            ):
                raise broken()
            sources = loaded
    step = decimal.Decimal(incr.decode())
    origin = get_header(hdrs, b"Nats-Stream-Source")
    if origin:  # a source's copy: its body is the origin's total; count what changed since the last one
        fields = origin.decode(errors="replace").split(" ")
        origin_subject = fields[4] if len(fields) >= 5 else subject.decode(errors="replace")
        origin_total = _value_of(payload)
        of_stream = sources.setdefault(fields[0], {})
        previous = of_stream.get(origin_subject, "")
        of_stream[origin_subject] = _text(origin_total)
        before = decimal.Decimal(previous) if _INTEGER.match(previous.encode()) else decimal.Decimal(0)
        step = _EXACT.subtract(origin_total, before)
        hdrs = set_header(hdrs, INCR, _text(step).encode())
    total = _EXACT.add(total, step)
    text = _text(total).encode()
    if sources:
        ordered = {name: dict(sorted(subjects.items())) for name, subjects in sorted(sources.items())}
        hdrs = set_header(hdrs, SOURCES, encode(ordered))  # Go writes a map's keys sorted
    return hdrs, b'{"val":"%s"}' % text, text


def set_header(hdrs: bytes, key: bytes, value: bytes) -> bytes:
    """`key`'s first value replaced (its line kept in place), or the header added last, as nats-server's
    setHeader does."""
    needle = b"\r\n" + key + b":"
    i = hdrs.find(needle)
    if i < 0:
        end = hdrs[:-2] if hdrs.endswith(b"\r\n\r\n") else hdrs
        return end + key + b": " + value + b"\r\n\r\n"
    start = i + len(needle)
    if hdrs[start : start + 1] == b" ":
        start += 1
    end_at = hdrs.find(b"\r", start)
    return hdrs[:start] + value + hdrs[end_at:]
