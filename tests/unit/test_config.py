"""Unit tests for the nats-server configuration parser."""

from __future__ import annotations

from pathlib import Path

import pytest

from pynatsd.config.parser import ConfigError, parse, parse_file


def test_separators_and_comments() -> None:
    text = """
    # comment
    port: 4222
    host = "127.0.0.1"   // trailing comment
    server_name srv-1
    debug: true; trace: off, logtime yes
    """
    assert parse(text) == {
        "port": 4222,
        "host": "127.0.0.1",
        "server_name": "srv-1",
        "debug": True,
        "trace": False,
        "logtime": True,
    }


def test_bare_urls_keep_their_double_slash() -> None:
    """nats-server's unquoted strings end at blanks only, so `//` inside a URL is not a comment."""
    text = (
        "cluster {\n  routes: [nats-route://127.0.0.1:6222, nats://h:7222] // two seeds\n}\nurl: nats://x:1"
    )
    assert parse(text) == {
        "cluster": {"routes": ["nats-route://127.0.0.1:6222", "nats://h:7222"]},
        "url": "nats://x:1",
    }


def test_blocks_arrays_and_nesting() -> None:
    text = """
    authorization {
      users = [
        {user: alice, password: "s3cr3t", permissions: {publish: ["a.>", "b"], subscribe: "c.*"}}
        {user: bob, password: bob}
      ]
      timeout: 2.5
    }
    listen: 127.0.0.1:4333
    """
    cfg = parse(text)
    users = cfg["authorization"]["users"]
    assert users[0] == {
        "user": "alice",
        "password": "s3cr3t",
        "permissions": {"publish": ["a.>", "b"], "subscribe": "c.*"},
    }
    assert users[1] == {"user": "bob", "password": "bob"}
    assert cfg["authorization"]["timeout"] == 2.5
    assert cfg["listen"] == "127.0.0.1:4333"


@pytest.mark.parametrize(
    ("raw", "value"),
    [("1k", 1000), ("2m", 2_000_000), ("1g", 10**9), ("1kb", 1024), ("4MB", 4 * 1024**2),
     ("1ki", 1024), ("2kib", 2048), ("3gb", 3 * 1024**3), ("-5", -5), ("1.5", 1.5),
     ("10s", "10s"), ("1h30m", "1h30m"), ("on", True), ("No", False)],
)  # fmt: skip
def test_numbers_units_and_bools(raw: str, value: object) -> None:
    assert parse(f"x: {raw}")["x"] == value


def test_quoted_strings_and_escapes() -> None:
    cfg = parse('a: "x\\ty\\"z"\nb: \'single # not comment\'\n"quoted key": 1')
    assert cfg == {"a": 'x\ty"z', "b": "single # not comment", "quoted key": 1}


def test_variables_from_blocks_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYNATSD_TEST_PORT", "4999")
    text = """
    pw: "top"
    port: $PYNATSD_TEST_PORT
    authorization { inner: "in", user: u, password: $pw, other: $inner }
    """
    cfg = parse(text)
    assert cfg["port"] == 4999
    assert cfg["authorization"]["password"] == "top"
    assert cfg["authorization"]["other"] == "in"


def test_include_relative_to_including_file(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "auth.conf").write_text("users = [{user: a, password: b}]\n")
    (tmp_path / "main.conf").write_text("port: 1\nauthorization {\n  include 'sub/auth.conf'\n}\n")
    cfg = parse_file(tmp_path / "main.conf")
    assert cfg == {"port": 1, "authorization": {"users": [{"user": "a", "password": "b"}]}}


@pytest.mark.parametrize(
    ("text", "where", "message"),
    [
        ("port: 1\nx: $NOPE_NOT_SET_42", "2:4", "variable reference for 'NOPE_NOT_SET_42' can not be found"),
        ("a {\n  b: 1\n", "3:1", "missing '}'"),
        ("a: [1, 2", "1:9", "missing ']'"),
        ("a: [1, }", "1:8", "unexpected '}' in array"),
        ('a: "abc\n', "1:4", "unterminated quoted string"),
        ("a:\n", "1:3", "missing value for key 'a'"),
        ("}", "1:1", "unexpected '}'"),
        ('a: "\\q"', "1:5", "invalid escape character"),
    ],
)
def test_error_messages_have_line_and_column(text: str, where: str, message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        parse(text, "t.conf")
    assert str(exc.value).startswith(f"t.conf:{where}: ")
    assert message in str(exc.value)


def test_missing_include_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "m.conf").write_text("include nothere.conf\n")
    with pytest.raises(ConfigError, match=r"m.conf:1:1: error opening include file 'nothere.conf'"):
        parse_file(tmp_path / "m.conf")


def test_unquoted_bcrypt_hash_is_a_string() -> None:
    # nats-server special-cases `$2a$`: a hash, not a variable reference (other `$` values still are).
    text = "a: $2a$11$PWIFAL8RsWyGI3jVZtO9Nu8.6jOxzxfZo7c/W0eLk017hjgUKWrhy\nb: 1"
    assert parse(text) == {"a": "$2a$11$PWIFAL8RsWyGI3jVZtO9Nu8.6jOxzxfZo7c/W0eLk017hjgUKWrhy", "b": 1}
    with pytest.raises(ConfigError, match="variable reference for '2b\\$11\\$abc' can not be found"):
        parse("a: $2b$11$abc")


def test_positions_and_used_variables() -> None:
    cfg = parse("x: 1\nblock {\n    key: $x\n}\n")
    assert (cfg.where["x"].line, cfg.where["x"].col) == (1, 1)
    assert (cfg.where["block"].line, cfg.where["block"].col) == (2, 1)
    assert (cfg["block"].where["key"].line, cfg["block"].where["key"].col) == (3, 5)
    assert cfg.used == {"x"} and cfg["block"].used == set()
