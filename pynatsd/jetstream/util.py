"""Small helpers: NATS header blocks, Go-style timestamps, filters as one regex."""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime
from typing import Any

# Go's encoding/json escapes these; clients never care, byte-level comparisons do.
_GO_ESCAPES = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"})


def encode(body: dict[str, Any]) -> bytes:
    """A JSON document as nats-server's encoding/json writes it (compact, `<>&` escaped)."""
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).translate(_GO_ESCAPES).encode()


def get_header(hdrs: bytes | None, key: bytes) -> bytes | None:
    """The value of `key` in a raw header block (first occurrence, exact case, as nats-server reads)."""
    if not hdrs:
        return None
    needle = b"\r\n" + key + b":"
    i = hdrs.find(needle)
    if i < 0:
        return None
    start = i + len(needle)
    end = hdrs.find(b"\r\n", start)
    return hdrs[start:end].strip()


_GO_DURATION = re.compile(r"[-+]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:ns|us|\u00b5s|\u03bcs|ms|s|m|h))+|[-+]?0")
_GO_DURATION_PART = re.compile(r"([0-9]+\.?[0-9]*|\.[0-9]+)(ns|us|\u00b5s|\u03bcs|ms|s|m|h)")
_GO_UNIT_NS = {"ns": 1, "us": 1_000, "\u00b5s": 1_000, "\u03bcs": 1_000, "ms": 1_000_000, "s": 10**9}
_GO_UNIT_NS.update(m=60 * 10**9, h=3600 * 10**9)


def go_duration_ns(text: str) -> float | None:
    """A Go duration ("90s", "1h30m", "-1.5h", "0") in nanoseconds as time.ParseDuration reads it; None
    when it is not one."""
    if not _GO_DURATION.fullmatch(text):
        return None
    ns = 0.0
    for number, unit in _GO_DURATION_PART.findall(text):
        ns += float(number) * _GO_UNIT_NS[unit]
    return -ns if text.startswith("-") else ns


def parse_msg_ttl(raw: bytes) -> int:
    """A Nats-TTL header's value in whole seconds as nats-server reads it: "never" (-1), a Go duration of at
    least 1s ("90s", "1h30m") or a number of seconds; ValueError (invalid per-message TTL) otherwise."""
    text = raw.decode("utf-8", "replace")
    if text.lower() == "never":
        return -1
    ns = go_duration_ns(text)
    if ns is not None:
        if ns < 1e9:
            raise ValueError("invalid per-message TTL")
        return int(ns // 1e9)
    if not text.isascii() or not text.isdigit():  # nats-server's parseInt64: digits only
        raise ValueError("invalid per-message TTL")
    return int(text)


def headers(status: bytes = b"", pairs: list[tuple[bytes, bytes]] | None = None) -> bytes:
    """A raw header block: `NATS/1.0[ status]` and `key: value` lines."""
    parts = [b"NATS/1.0" + (b" " + status if status else b"") + b"\r\n"]
    for k, v in pairs or ():
        parts.append(k + b": " + v + b"\r\n")
    parts.append(b"\r\n")
    return b"".join(parts)


def now_ns() -> int:
    return time.time_ns()


def rfc3339(ns: int) -> str:
    """Go's time.RFC3339Nano in UTC: nanoseconds without trailing zeros; 0 -> Go's zero time."""
    if ns <= 0:
        return "0001-01-01T00:00:00Z"
    secs, frac = divmod(ns, 1_000_000_000)
    base = datetime.fromtimestamp(secs, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    if frac:
        base += "." + f"{frac:09d}".rstrip("0")
    return base + "Z"


_second: list[tuple[int, bytes]] = [(-1, b"")]  # the last second formatted, and its text


def rfc3339_bytes(ns: int) -> bytes:
    """rfc3339() as bytes, formatting each second once (a batch of messages shares a few seconds)."""
    if ns <= 0:
        return b"0001-01-01T00:00:00Z"
    secs, frac = divmod(ns, 1_000_000_000)
    last, text = _second[0]
    if secs != last:
        text = datetime.fromtimestamp(secs, UTC).strftime("%Y-%m-%dT%H:%M:%S").encode()
        _second[0] = (secs, text)
    if frac:
        return (b"%s.%09d" % (text, frac)).rstrip(b"0") + b"Z"
    return text + b"Z"


def parse_rfc3339(text: str) -> int:
    """Nanoseconds since the epoch of an RFC 3339 time (any offset, up to nanosecond precision)."""
    main, frac, tz = text, "", "+00:00"
    if text.endswith("Z"):
        main = text[:-1]
    else:
        for sign in ("+", "-"):
            j = text.rfind(sign, 19)
            if j > 0:
                main, tz = text[:j], text[j:]
                break
    if "." in main:
        main, frac = main.split(".", 1)
    dt = datetime.fromisoformat(main + tz)
    return int(dt.timestamp()) * 1_000_000_000 + int((frac + "000000000")[:9] or 0)


def filters_regex(filters: list[bytes]) -> re.Pattern[bytes]:
    """One regex for the subjects any of the filters match (all subjects without filters), for scans of a
    stream's subjects (pending counts, filtered purges, stream info): 300k subjects against `s.*.x`,
    interpreted, took 708 ms with subjects.matches, 285 ms with the regex."""
    if not filters:
        return re.compile(rb".*", re.S)
    alternatives = []
    for f in filters:
        parts = [rb"[^.]+" if t == b"*" else rb".+" if t == b">" else re.escape(t) for t in f.split(b".")]
        alternatives.append(rb"\.".join(parts))
    return re.compile(b"|".join(alternatives), re.S)
