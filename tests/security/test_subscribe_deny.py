"""Subscribe-deny at delivery (issue 16, item 1): a user allowed `>` but denied `foo.secret` and `bar.>`
may subscribe to wildcards that overlap the denied subjects, and receives none of the denied messages,
on every wildcard form and in queue groups. Checked on pynatsd and nats-server side by side."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest

from tests.servers import ServerProcess, server_with_config

CONF = """
authorization {
  users = [
    {user: sender, password: s}
    {user: limited, password: l, permissions: {
        subscribe: {allow: [">"], deny: ["foo.secret", "bar.>"]}
    }}
  ]
}
"""
SUBJECTS = ["foo.secret", "foo.ok", "bar.x", "bar.x.y", "bar", "baz.secret"]
DENIED = {"foo.secret", "bar.x", "bar.x.y"}
# (subject, queue) subscriptions of the limited user, and what each may match.
SUBSCRIPTIONS = [
    ("foo.*", None),
    ("foo.>", None),
    (">", None),
    ("*.*", None),
    ("bar.*", None),
    ("foo.*", "q"),
    (">", "q2"),
]


@pytest.fixture(params=["pynatsd", "nats-server"], scope="module")
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    conf = tmp_path_factory.mktemp(request.param) / "deny.conf"
    with server_with_config(request.param, conf, CONF) as proc:
        yield proc


def _matches(pattern: str, subject: str) -> bool:
    p, s = pattern.split("."), subject.split(".")
    for i, token in enumerate(p):
        if token == ">":
            return len(s) > i
        if i >= len(s) or (token != "*" and token != s[i]):
            return False
    return len(p) == len(s)


async def _received(server: ServerProcess) -> dict[tuple[str, str | None], list[str]]:
    limited = await nats.connect(server.url, user="limited", password="l", allow_reconnect=False)
    sender = await nats.connect(server.url, user="sender", password="s", allow_reconnect=False)
    got: dict[tuple[str, str | None], list[str]] = {}
    try:
        for subject, queue in SUBSCRIPTIONS:
            bucket = got.setdefault((subject, queue), [])

            async def on_msg(msg: nats.aio.msg.Msg, bucket: list[str] = bucket) -> None:
                bucket.append(msg.subject)

            await limited.subscribe(subject, queue=queue or "", cb=on_msg)
        await limited.flush()
        for subject in SUBJECTS:
            await sender.publish(subject, b"x")
        await sender.flush()
        await limited.flush()
        # Callbacks run as tasks: wait until nothing more arrives for a while (a loaded machine is slow).
        seen, quiet = -1, 0
        while quiet < 3:
            await asyncio.sleep(0.1)
            total = sum(map(len, got.values()))
            seen, quiet = total, quiet + 1 if total == seen else 0
    finally:
        await sender.close()
        await limited.close()
    return got


async def test_denied_subjects_never_reach_overlapping_wildcards(server: ServerProcess) -> None:
    got = await _received(server)
    for (pattern, queue), subjects in got.items():
        expected = [s for s in SUBJECTS if _matches(pattern, s) and s not in DENIED]
        if queue and server.kind == "nats-server":
            # nats-server now and then delivers nothing to a queue subscription of a user with deny rules
            # (seen 2 runs in ~10 here); what it must never do is deliver a denied subject.
            assert set(subjects) <= set(expected), (pattern, queue)
        else:
            assert subjects == expected, (pattern, queue)


async def test_pynatsd_delivers_what_nats_server_delivers(tmp_path: Path) -> None:
    results = []
    for kind in ("pynatsd", "nats-server"):
        with server_with_config(kind, tmp_path / f"{kind}.conf", CONF) as proc:
            got = await _received(proc)
            if kind == "nats-server" and not any(got.values()):
                # The reference delivered nothing at all (seen once in a loaded CI run): that run is no
                # reference; a second one on the same server is.
                got = await _received(proc)
            results.append(got)
    ours, theirs = results
    plain = [key for key in ours if key[1] is None]
    assert {k: ours[k] for k in plain} == {k: theirs[k] for k in plain}
    for key in ours.keys() - plain:  # queue subscriptions: see the test above
        assert set(theirs[key]) <= set(ours[key]), key


async def test_a_literal_subscription_to_a_denied_subject_is_refused(server: ServerProcess) -> None:
    errors: list[Exception] = []

    async def on_error(exc: Exception) -> None:
        errors.append(exc)

    limited = await nats.connect(
        server.url, user="limited", password="l", allow_reconnect=False, error_cb=on_error
    )
    try:
        await limited.subscribe("bar.x")
        await limited.flush()
        await asyncio.sleep(0.2)
    finally:
        await limited.close()
    assert [str(e) for e in errors] == ['nats: permissions violation for subscription to "bar.x"']
