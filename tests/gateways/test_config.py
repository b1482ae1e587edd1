"""The `gateway {}` block: what nats-server's validation refuses at start, pynatsd refuses too, with
nats-server's words (pynatsd already at `-t`, which nats-server does not validate)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.config.test_differential import KINDS, _run
from tests.config.test_schema import errors_of

INVALID = {
    "no name": ("gateway { listen: 127.0.0.1:-1 }", "gateway has no name"),
    "no port": ("gateway { name: A }", 'gateway "A" has no port specified (select -1 for random port)'),
    "remote without URL": ("gateway { name: A, listen: 127.0.0.1:-1, gateways: [{name: B}] }", "has no URL"),
    "remote without name": (
        'gateway { name: A, listen: 127.0.0.1:-1, gateways: [{url: "nats://127.0.0.1:1"}] }',
        "gateway in the list 0 has no name",
    ),
    "name with a space": (
        'gateway { name: "A B", listen: 127.0.0.1:-1 }',
        "gateway name cannot contain spaces",
    ),
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", list(INVALID))
def test_invalid_gateway_stops_the_server(kind: str, case: str, tmp_path: Path) -> None:
    text, words = INVALID[case]
    conf = tmp_path / "c.conf"
    conf.write_text(text)
    result = _run(kind, ["-c", str(conf), "-a", "127.0.0.1", "-p", "-1"])
    assert result.returncode == 1, result.stdout + result.stderr
    assert words.lower() in (result.stdout + result.stderr).lower()


@pytest.mark.parametrize("case", list(INVALID))
def test_invalid_gateway_is_refused_at_parse_time(case: str) -> None:
    text, words = INVALID[case]
    assert words.lower() in errors_of(text).lower()


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("tls { handshake_first: true }", '"handshake_first": pynatsd does not support'),
        ("tls { pinned_certs: [] }", '"pinned_certs": pynatsd does not support'),
        ("tls { verify: true }", "gateway tls: cert_file and key_file are required"),
        (
            'gateways: [{name: B, url: "nats://127.0.0.1:1", tls { verify: true }}]',
            '"verify": pynatsd does not support',
        ),
    ],
)
def test_tls_keys_not_implemented_are_refused_by_name(text: str, words: str) -> None:
    assert words in errors_of(f"gateway {{ name: A, listen: 127.0.0.1:-1, {text} }}")
