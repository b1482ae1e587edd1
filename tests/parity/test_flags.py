"""Command-line flags: the same words accepted, and refused with the same message, as nats-server."""

from __future__ import annotations

import re

import pytest

from pynatsd import cli
from tests.parity.conftest import KINDS, Spawn, run
from tests.servers import free_port


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--debug", "true"], 'unrecognized command: "true"'),
        (["-V", "foo"], 'unrecognized command: "foo"'),
        (["--trace=yes"], 'invalid boolean value "yes" for -trace: parse error'),
        (["-D=on"], 'invalid boolean value "on" for -D: parse error'),
        (["--log_size_limit", "1KB"], 'invalid value "1KB" for flag -log_size_limit: parse error'),
        (["--max_traced_msg_len=x"], 'invalid value "x" for flag -max_traced_msg_len: parse error'),
        (["--http_host", "127.0.0.1"], "flag provided but not defined: -http_host"),
    ],
)
def test_refused_like_nats_server(args: list[str], message: str) -> None:
    """Go's flag package: `--debug true` sets debug and leaves `true` as a (bad) command; booleans take
    only strconv.ParseBool's words after `=`; there is no --http_host flag."""
    for kind in KINDS:
        done = run(kind, "-p", str(free_port()), *args)
        assert message in done.stdout + done.stderr, (kind, done)
    assert run("pynatsd", "-p", str(free_port()), *args).returncode != 0


@pytest.mark.parametrize(
    "args", [["--trace=true"], ["-D=false"], ["--debug=1"], ["-V=T"], ["--max_traced_msg_len", "16"]]
)
def test_accepted_like_nats_server(spawn: Spawn, args: list[str]) -> None:
    for kind in KINDS:
        spawn(kind, "-a", "127.0.0.1", "-p", str(free_port()), *args)


@pytest.mark.parametrize(
    "args",
    [
        ["--no_advertise"],
        ["--connect_retries", "3"],
        ["--cluster_advertise", "127.0.0.1:6222"],
        ["--cluster_name", "c1"],
        ["--cluster", "nats://127.0.0.1:-1", "--cluster_name", "c1"],
    ],
)
def test_cluster_flags_are_accepted_like_nats_server(spawn: Spawn, args: list[str]) -> None:
    """The cluster flags (pynatsd.routes) start both servers; without --cluster they configure nothing."""
    for kind in KINDS:
        spawn(kind, "-a", "127.0.0.1", "-p", str(free_port()), *args)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--routes", "nats://:bad"], "error parsing route url"),
        (["--cluster", "nats://127.0.0.1:x"], "could not parse port"),
        (["--cluster", "nats://user@127.0.0.1:-1"], "expected cluster password to be set"),
    ],
)
def test_bad_cluster_flags_stop_pynatsd(args: list[str], message: str) -> None:
    done = run("pynatsd", "-p", str(free_port()), *args)
    assert done.returncode == 1 and message in done.stderr, done


def test_help_tls() -> None:
    done = run("pynatsd", "--help_tls")
    assert done.returncode == 0
    for key in ("tls {", "cert_file", "key_file", "ca_file", "verify", "--tlscert"):
        assert key in done.stdout


def test_version_command_word() -> None:
    """`nats-server version` (a word after the flags) prints the version, as -v does."""
    assert run("pynatsd", "version").stdout == run("pynatsd", "-v").stdout != ""


def test_every_nats_server_flag_is_known() -> None:
    """Each flag nats-server's --help lists is parsed by pynatsd: honoured, or refused by name; never
    `flag provided but not defined`."""
    listed = set(re.findall(r"(?:^|[ ,])(--?[A-Za-z_]+)", run("nats-server", "--help").stdout, re.M))
    assert len(listed) > 50
    for flag in sorted(listed):
        assert flag.lstrip("-") in cli._BOOL_FLAGS or flag.lstrip("-") in cli._VALUE_FLAGS, flag


def test_profile_port_is_refused() -> None:
    done = run("pynatsd", "-p", str(free_port()), "--profile", "6060")
    assert done.returncode == 1 and "--profile" in done.stderr and "not supported" in done.stderr
