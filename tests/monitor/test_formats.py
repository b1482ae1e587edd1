"""pynatsd.base.formats: Go's duration/time formats and parameter parsing."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from pynatsd.base.formats import go_duration, parse_bool, parse_int, rfc3339nano, uptime


def test_rfc3339nano() -> None:
    assert rfc3339nano(datetime(2026, 1, 2, 3, 4, 5, 120000, tzinfo=UTC)) == "2026-01-02T03:04:05.12Z"
    assert rfc3339nano(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)) == "2026-01-02T03:04:05Z"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (7.9, "7s"),
        (64, "1m4s"),
        (3 * 3600 + 4, "3h0m4s"),
        (86400 + 3661, "1d1h1m1s"),
        (366 * 86400, "1y1d0h0m0s"),
    ],
)
def test_uptime(seconds: float, text: str) -> None:
    assert uptime(seconds) == text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (5e-7, "500ns"),
        (0.000847, "847µs"),
        (0.0012345, "1.2345ms"),
        (1.5, "1.5s"),
        (90, "1m30s"),
        (3723, "1h2m3s"),
    ],
)
def test_go_duration(seconds: float, text: str) -> None:
    assert go_duration(seconds) == text


def test_parse_errors_use_go_texts() -> None:
    assert parse_bool("subs", "true") and not parse_bool("subs", "0")
    bad_bool = r"Error decoding boolean for 'subs': strconv.ParseBool: parsing \"x\""
    with pytest.raises(ValueError, match=bad_bool):
        parse_bool("subs", "x")
    assert parse_int("limit", "12") == 12
    with pytest.raises(ValueError, match=r"Error decoding int for 'limit': strconv.Atoi: parsing \"1_0\""):
        parse_int("limit", "1_0")
