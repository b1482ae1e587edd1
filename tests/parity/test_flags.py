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


def _help_rows(text: str) -> list[tuple[list[str], bool]]:
    """(spellings, takes a value) for each flag row of a --help text laid out as nats-server's."""
    rows = []
    for line in text.splitlines():
        left = line.strip().split("  ")[0]
        if line.startswith("    ") and left.startswith("-"):
            rows.append((re.findall(r"--?[A-Za-z_]+", left.split("<")[0]), "<" in left))
    return rows


def _shown(kind: str) -> set[str]:
    return {spelling for spellings, _ in _help_rows(run(kind, "--help").stdout) for spelling in spellings}


def test_help_shows_nats_server_spellings() -> None:
    """The groups and spellings of nats-server's --help, none of click's internal names (--check_config,
    --debug_trace, `BOOLEAN`); only the profiling port, which pynatsd refuses, is left out."""
    text = run("pynatsd", "--help").stdout
    for group in ("Server", "Logging", "JetStream", "Authorization", "TLS", "Cluster", "Common"):
        assert f"\n{group} Options:\n" in text
    assert "(default: 4222)" in text and "(default: 0.0.0.0)" in text
    assert "BOOLEAN" not in text and "--check_config" not in text and "--debug_trace" not in text
    assert _shown("pynatsd") == _shown("nats-server") - {"--profile"}


def test_every_flag_the_help_shows_works() -> None:
    """Each spelling in the help is one nats-server defines, and sets its option in pynatsd: booleans
    alone, the others with a value (an integer where the flag takes one)."""
    rows = _help_rows(cli.usage())
    assert len(rows) > 40
    for spellings, takes_value in rows:
        for spelling in spellings:
            flag = next(f for f in cli.FLAGS if spelling in f.spellings)
            value = ("1" if flag.integer else "v") if takes_value else None
            args = [spelling] if value is None else [spelling, value]
            done = run("nats-server", *args, "-v")
            assert "flag provided but not defined" not in done.stderr + done.stdout, spelling
            ctx = cli.command.make_context("pynatsd", cli.normalize_argv(args))
            expected = True if value is None else int(value) if flag.integer else value
            assert ctx.params[flag.dest] == expected, spelling
