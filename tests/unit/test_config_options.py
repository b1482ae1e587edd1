"""Unit tests for mapping parsed configuration onto Options."""

from __future__ import annotations

from pathlib import Path

import pytest

from pynatsd.base.options import Options
from pynatsd.config.parser import parse
from pynatsd.config.schema import ConfigValueError, apply_config, parse_duration
from tests.security.certs import make_certs


def _opts(text: str) -> tuple[Options, list[str]]:
    opts = Options()
    warnings = apply_config(opts, parse(text))
    return opts, warnings


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("2m", 120.0), ("10s", 10.0), ("1h30m", 5400.0), ("500ms", 0.5), (3, 3.0), (1.5, 1.5)],
)
def test_durations(value: object, seconds: float) -> None:
    assert parse_duration("k", value) == seconds


@pytest.mark.parametrize("value", ["", "10x", "s", "1m junk", True])
def test_bad_durations(value: object) -> None:
    with pytest.raises(ConfigValueError, match="k: "):
        parse_duration("k", value)


def test_core_fields() -> None:
    opts, warnings = _opts(
        """
        listen: 127.0.0.1:4333
        server_name: "s1"
        http: 8333
        max_payload: 2MB
        max_connections: 0
        ping_interval: "30s"
        ping_max: 3
        write_deadline: "5s"
        lame_duck_duration: "1m"
        no_header_support: true
        debug: yes
        """
    )
    assert warnings == []
    assert (opts.host, opts.port, opts.server_name, opts.http_port) == ("127.0.0.1", 4333, "s1", 8333)
    assert opts.max_payload == 2 * 1024 * 1024
    assert opts.max_connections == -1
    assert (opts.ping_interval, opts.ping_max, opts.write_deadline) == (30.0, 3, 5.0)
    assert opts.lame_duck_duration == 60.0
    assert opts.no_header_support and opts.debug


def test_authorization_and_tls_blocks(tmp_path: Path) -> None:
    # The certificate files must exist now: the tls block is checked when the file is read, as by nats-server.
    certs = make_certs(tmp_path)
    opts, _ = _opts(
        f"""
        authorization {{ user: alice, password: pw, timeout: 3 }}
        tls {{ cert_file: "{certs["server"]}", key_file: "{certs["server_key"]}", ca_file: "{certs["ca"]}"
               verify: true, handshake_first: true }}
        """
    )
    assert (opts.username, opts.password, opts.auth_timeout) == ("alice", "pw", 3.0)
    assert opts.tls and opts.tls_verify and opts.tls_handshake_first
    assert (opts.tls_cert, opts.tls_key, opts.tls_ca_cert) == (
        certs["server"],
        certs["server_key"],
        certs["ca"],
    )


def test_unknown_keys_and_typos_are_errors() -> None:
    # nats-server refuses any unknown key (it used to be a warning here, with a hint for near-misses).
    with pytest.raises(ConfigValueError, match='<string>:1:1: unknown field "cluster_thing"'):
        _opts("cluster_thing: 1")
    with pytest.raises(ConfigValueError, match='unknown field "max_paylaod"'):
        _opts("max_paylaod: 10")


def test_wrong_type_is_an_error() -> None:
    with pytest.raises(ConfigValueError, match="port: expected an integer"):
        _opts('port: "abc"')
