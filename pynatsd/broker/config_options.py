"""Maps a parsed configuration onto `Options`: kept as the stable import path of the schema's entry
points, which live in `pynatsd.broker.config_schema` (one schema for start, `-t` and reload)."""

from __future__ import annotations

from pynatsd.broker.config_schema import (
    ConfigErrors,
    ConfigValueError,
    ConfigWarning,
    apply_config,
    parse_duration,
)

__all__ = ["ConfigErrors", "ConfigValueError", "ConfigWarning", "apply_config", "parse_duration"]
