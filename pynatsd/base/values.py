"""Values as nats-server's configuration spells them: durations (`"2s"`, `"1m30s"`, a number of seconds),
and the error a bad value raises (named with its key, as nats-server's messages do)."""

from __future__ import annotations

import re
from typing import Any

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


class ConfigValueError(ValueError):
    """One invalid key or value (its position is added by the schema)."""


def parse_duration(key: str, value: Any) -> float:
    """Seconds from a number or a Go duration string ("2m", "1h30m", "500ms")."""
    if isinstance(value, bool):
        raise ConfigValueError(f"{key}: expected a duration, got {value!r}")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        pos, total = 0, 0.0
        for m in _DURATION_PART.finditer(text):
            if m.start() != pos:
                break
            total += float(m.group(1)) * _UNITS[m.group(2)]
            pos = m.end()
        if text and pos == len(text):
            return total
    raise ConfigValueError(f"{key}: invalid duration {value!r}")


def to_int(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigValueError(f"{key}: expected an integer, got {value!r}")
    return value


def to_str(key: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ConfigValueError(f"{key}: expected a string, got {value!r}")
    return value


def to_bool(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigValueError(f"{key}: expected a boolean, got {value!r}")
    return value
