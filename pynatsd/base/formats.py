"""Value formats of nats-server's monitoring JSON (pure functions)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

_INT = re.compile(r"[+-]?[0-9]+")


def rfc3339nano(when: datetime) -> str:
    """Go's time.RFC3339Nano in UTC: fractional seconds without trailing zeros, `Z` suffix."""
    when = when.astimezone(UTC)
    base = when.strftime("%Y-%m-%dT%H:%M:%S")
    frac = f"{when.microsecond:06d}".rstrip("0")
    return f"{base}.{frac}Z" if frac else f"{base}Z"


def uptime(seconds: float) -> str:
    """nats-server's uptime/idle format: `7s`, `3m4s`, `2h3m4s`, `1d2h3m4s`, `1y2d3h4m5s`."""
    secs = int(max(seconds, 0))
    mins, hrs = secs // 60, secs // 3600
    days = hrs // 24
    years = days // 365
    if years:
        return f"{years}y{days % 365}d{hrs % 24}h{mins % 60}m{secs % 60}s"
    if days:
        return f"{days}d{hrs % 24}h{mins % 60}m{secs % 60}s"
    if hrs:
        return f"{hrs}h{mins % 60}m{secs % 60}s"
    if mins:
        return f"{mins}m{secs % 60}s"
    return f"{secs}s"


def _fraction(value: int, unit: int) -> str:
    whole, rest = divmod(value, unit)
    if not rest:
        return str(whole)
    digits = len(str(unit)) - 1
    return f"{whole}.{rest:0{digits}d}".rstrip("0")


def go_duration(seconds: float) -> str:
    """Go's time.Duration.String(): `0s`, `512ns`, `847µs`, `1.25ms`, `2.5s`, `1m30s`, `1h2m3s`."""
    ns = round(seconds * 1e9)
    if ns == 0:
        return "0s"
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    if ns < 1_000:
        return f"{sign}{ns}ns"
    if ns < 1_000_000:
        return f"{sign}{_fraction(ns, 1_000)}µs"
    if ns < 1_000_000_000:
        return f"{sign}{_fraction(ns, 1_000_000)}ms"
    hours, rest = divmod(ns, 3_600_000_000_000)
    mins, rest = divmod(rest, 60_000_000_000)
    secs = _fraction(rest, 1_000_000_000) + "s"
    if hours:
        return f"{sign}{hours}h{mins}m{secs}"
    if mins:
        return f"{sign}{mins}m{secs}"
    return f"{sign}{secs}"


def parse_bool(name: str, value: str) -> bool:
    """Go's strconv.ParseBool, with nats-server's error text."""
    if value in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if value in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    raise ValueError(
        f"Error decoding boolean for '{name}': strconv.ParseBool: parsing \"{value}\": invalid syntax"
    )


def parse_int(name: str, value: str) -> int:
    """Go's strconv.Atoi, with nats-server's error text."""
    if not _INT.fullmatch(value):
        raise ValueError(
            f"Error decoding int for '{name}': strconv.Atoi: parsing \"{value}\": invalid syntax"
        )
    return int(value)
