"""Imports and exports in `accounts {}`: what nats-server refuses at start pynatsd refuses too, with the same
words; what pynatsd does not implement it refuses by name (never runs with it ignored); a reload replaces
the links."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.accounts.harness import KINDS, Peer, msg, refusal, require, serve

USERS = "users: [{user: %s, password: %s}]"


def _accounts(**blocks: str) -> str:
    body = "\n".join(
        f"  {name} {{\n    {USERS % (name.lower(), name.lower())}\n    {spec}\n  }}"
        for name, spec in blocks.items()
    )
    return "accounts {\n" + body + "\n}\n"


REFUSED = {
    "no export": (
        _accounts(A="", B='imports: [{stream: {account: A, subject: "foo"}}]'),
        'Error adding stream import "foo": stream import not authorized',
    ),
    "private stream": (
        _accounts(A="exports: [{stream: foo, accounts: [C]}]", C="",
                  B='imports: [{stream: {account: A, subject: "foo"}}]'),
        'Error adding stream import "foo": stream import not authorized',
    ),
    "private service": (
        _accounts(A="exports: [{service: svc, accounts: [C]}]", C="",
                  B="imports: [{service: {account: A, subject: svc}}]"),
        'Error adding service import "svc": service import not authorized',
    ),
    "service import of a stream export": (
        _accounts(A="exports: [{stream: svc}]", B="imports: [{service: {account: A, subject: svc}}]"),
        "service import not authorized",
    ),
    "import wider than the export": (
        _accounts(A='exports: [{stream: "foo.bar"}]',
                  B='imports: [{stream: {account: A, subject: "foo.*"}}]'),
        "stream import not authorized",
    ),
    "mapping that drops a wildcard": (
        _accounts(A='exports: [{stream: "foo.*"}, {service: "svc.*"}]',
                  B='imports: [{stream: {account: A, subject: "foo.*"}, to: bar}, '
                    '{service: {account: A, subject: "svc.*"}, to: ask}]'),
        'failed to create mapping transform for stream import subject from "foo.*" to "bar": invalid mapping '
        "destination: not using all of the token wildcard(s) in bar",
    ),
    "account token position not on a wildcard": (
        _accounts(A='exports: [{stream: "acc.x.feed", account_token_position: 2}]'),
        'Error adding stream export "acc.x.feed": sublist: invalid subject',
    ),
    "account token position naming another account": (
        _accounts(A='exports: [{stream: "acc.*.feed", account_token_position: 2}]',
                  B='imports: [{stream: {account: A, subject: "acc.C.feed"}}]', C=""),
        'Error adding stream import "acc.C.feed": stream import not authorized',
    ),
    "account token position left open": (
        _accounts(A='exports: [{service: "acc.*.svc", account_token_position: 2}]',
                  B='imports: [{service: {account: A, subject: "acc.*.svc"}}]'),
        'Error adding service import "acc.*.svc": service import not authorized',
    ),
    "undefined account": (
        _accounts(B="imports: [{stream: {account: Z, subject: foo}}]"),
        '"Z" account not defined for stream import',
    ),
    "undefined account in a private export": (
        _accounts(A="exports: [{service: svc, accounts: [Z]}]"),
        '"Z" account not defined for service export',
    ),
    "service cycle": (
        _accounts(A="exports: [{service: svc}], imports: [{service: {account: B, subject: svc}}]",
                  B="exports: [{service: svc}], imports: [{service: {account: A, subject: svc}}]"),
        'Error adding service import "svc": import forms a cycle',
    ),
    "stream cycle": (
        _accounts(A="exports: [{stream: foo}], imports: [{stream: {account: B, subject: foo}}]",
                  B="exports: [{stream: foo}], imports: [{stream: {account: A, subject: foo}}]"),
        'Error adding stream import "foo": import forms a cycle',
    ),
    "response type of a stream": (
        _accounts(A="exports: [{stream: foo, response_type: stream}]"),
        "Detected response directive on non-service",
    ),
    "unknown response type": (
        _accounts(A="exports: [{service: foo, response_type: bogus}]"),
        'Unknown response type: "bogus"',
    ),
    "import without subject": (
        _accounts(A="exports: [{stream: foo}]", B="imports: [{stream: {account: A}}]"),
        "Expect an account name and a subject",
    ),
}  # fmt: skip


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", list(REFUSED))
def test_refused_alike(kind: str, case: str, tmp_path: Path) -> None:
    text, phrase = REFUSED[case]
    assert phrase in refusal(kind, tmp_path, text)


def test_prefix_and_to_refused(tmp_path: Path) -> None:
    """A stream import with both `prefix` and `to`: nats-server refuses it only when its map iteration
    happens to see `to` after the stream (otherwise the prefix wins and `to` is dropped); pynatsd always
    refuses it, with nats-server's words."""
    text = _accounts(
        A="exports: [{stream: foo}]", B="imports: [{stream: {account: A, subject: foo}, prefix: p, to: t}]"
    )
    assert "Stream import can not have a 'prefix' and a 'to' property" in refusal("pynatsd", tmp_path, text)


# nats-server runs these; pynatsd has no latency tracking, message tracing or shared requester details,
# and refuses to run without them rather than ignore them.
NOT_IMPLEMENTED = {
    "latency": _accounts(A='exports: [{service: svc, latency: "lat.svc"}]'),
    "share": _accounts(A="exports: [{service: svc}]",
                       B="imports: [{service: {account: A, subject: svc}, share: true}]"),
    "allow trace": _accounts(A="exports: [{stream: foo}]",
                             B="imports: [{stream: {account: A, subject: foo}, allow_trace: true}]"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(NOT_IMPLEMENTED))
def test_not_implemented_is_refused_by_name(case: str, tmp_path: Path) -> None:
    require("nats-server")
    with serve("nats-server", tmp_path, NOT_IMPLEMENTED[case]):
        pass  # the reference runs it
    out = refusal("pynatsd", tmp_path, NOT_IMPLEMENTED[case])
    assert "pynatsd does not support" in out


@pytest.mark.parametrize("kind", KINDS)
def test_valid_links_pass_the_config_test(kind: str, tmp_path: Path) -> None:
    require(kind)
    from tests.config.test_differential import _run

    conf = tmp_path / "ok.conf"
    conf.write_text(
        _accounts(
            A='exports: [{stream: "foo.>"}, '
            '{service: "svc.*", response_type: chunked, response_threshold: "5s"}]',
            B='imports: [{stream: {account: A, subject: "foo.*"}, to: "bar.*"}, '
            '{service: {account: A, subject: "svc.*"}, to: "s.$1"}]',
        )
    )
    result = _run(kind, ["-t", "-c", str(conf)])
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("kind", KINDS)
def test_reload_replaces_links(kind: str, tmp_path: Path) -> None:
    """A reload that withdraws an export (and the import of it) ends the sharing for clients already
    subscribed; one that adds an import starts it for them."""
    before = _accounts(
        A='exports: [{stream: "foo.>"}]', B='imports: [{stream: {account: A, subject: "foo.>"}}]'
    )
    after = _accounts(
        A='exports: [{stream: "bar.>"}]', B='imports: [{stream: {account: A, subject: "bar.>"}}]'
    )
    with serve(kind, tmp_path, before) as server:
        a, b = Peer(server.port, "a"), Peer(server.port, "b")
        b.do(b"SUB foo.x 1\r\nSUB bar.x 2\r\n")
        a.do(b"PUB foo.x 1\r\n1\r\nPUB bar.x 1\r\n2\r\n")
        first = b.received()
        (tmp_path / f"{kind}.conf").write_text(after)
        os.kill(server.proc.pid, signal.SIGHUP)
        second: list[tuple[bytes, ...]] = []
        for _ in range(50):
            second = a.do(b"PUB foo.x 1\r\n3\r\nPUB bar.x 1\r\n4\r\n") + b.received()
            if second and second[-1][1] == b"bar.x":
                break
            time.sleep(0.05)
    assert first == [msg("foo.x", "1", "1")]
    assert second == [msg("bar.x", "2", "4")]
