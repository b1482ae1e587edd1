"""Stream imports in config mode, on pynatsd and nats-server alike: what an importer's subscribers receive
of what the exporter publishes (prefix and `to` mappings, overlapping wildcards, queue groups), what they
must never receive (other subjects, other accounts, denied subjects, chains of imports)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import nats
import pytest

from tests.accounts.harness import KINDS, Peer, by_sid, msg, serve

CONFIG = """
accounts {
  A { users: [{user: a, password: a}]
      exports: [{stream: "foo.>"}, {stream: "ev.*.x"}, {stream: "priv.>", accounts: [B]}] }
  B { users: [{user: b, password: b},
              {user: bd, password: bd, permissions: {subscribe: {deny: "p.foo.secret"}}}]
      imports: [{stream: {account: A, subject: "foo.>"}, prefix: p},
                {stream: {account: A, subject: "ev.*.x"}, to: "events.*.y"},
                {stream: {account: A, subject: "priv.one"}, to: "mine"}] }
  C { users: [{user: c, password: c}]
      imports: [{stream: {account: A, subject: "foo.bar"}}]
      exports: [{stream: "foo.>"}] }
  D { users: [{user: d, password: d}], imports: [{stream: {account: C, subject: "foo.>"}, prefix: d}] }
}
"""


@pytest.mark.parametrize("kind", KINDS)
def test_prefix_and_overlapping_wildcards(kind: str, tmp_path: Path) -> None:
    with serve(kind, tmp_path, CONFIG) as server:
        a, b = Peer(server.port, "a"), Peer(server.port, "b")
        b.do(b"SUB p.foo.> 1\r\nSUB p.> 2\r\nSUB p.foo.x 3\r\nSUB p.*.y 4\r\n")
        b.do(b"SUB foo.> 5\r\nSUB p.bar.> 6\r\n")
        a.do(b"PUB foo.bar 3\r\nabc\r\nPUB foo.x 1\r\nx\r\nPUB foo.y 1\r\ny\r\n")
        a.do(b"PUB foo.a.y 1\r\nz\r\nPUB bar.q 1\r\nq\r\n")
        got = by_sid(b.received())
    assert got == {
        b"1": [msg("p.foo.bar", "1", "abc"), msg("p.foo.x", "1", "x"), msg("p.foo.y", "1", "y"),
               msg("p.foo.a.y", "1", "z")],
        b"2": [msg("p.foo.bar", "2", "abc"), msg("p.foo.x", "2", "x"), msg("p.foo.y", "2", "y"),
               msg("p.foo.a.y", "2", "z")],
        b"3": [msg("p.foo.x", "3", "x")],
        b"4": [msg("p.foo.y", "4", "y")],
    }  # fmt: skip


@pytest.mark.parametrize("kind", KINDS)
def test_to_mappings_and_private_export(kind: str, tmp_path: Path) -> None:
    with serve(kind, tmp_path, CONFIG) as server:
        a, b = Peer(server.port, "a"), Peer(server.port, "b")
        b.do(b"SUB events.> 1\r\nSUB mine 2\r\nSUB priv.> 3\r\n")
        a.do(b"PUB ev.k.x 1\r\n1\r\nPUB ev.k.z 1\r\n2\r\nPUB priv.one 1\r\n3\r\nPUB priv.two 1\r\n4\r\n")
        got = by_sid(b.received())
    assert got == {b"1": [msg("events.k.y", "1", "1")], b"2": [msg("mine", "2", "3")]}


@pytest.mark.parametrize("kind", KINDS)
def test_reply_subject_kept_and_headers_kept(kind: str, tmp_path: Path) -> None:
    with serve(kind, tmp_path, CONFIG) as server:
        a, b = Peer(server.port, "a"), Peer(server.port, "b")
        plain = Peer(server.port, "b", headers=False)
        b.do(b"SUB p.foo.* 1\r\n")
        plain.do(b"SUB p.foo.* 9\r\n")
        a.do(b"HPUB foo.h rep.ly 12 14\r\nNATS/1.0\r\n\r\nhi\r\n")
        got, stripped = b.received(), plain.received()
    assert got == [(b"HMSG", b"p.foo.h", b"1", b"rep.ly", b"NATS/1.0\r\n\r\n", b"hi")]
    assert stripped == [msg("p.foo.h", "9", "hi", "rep.ly")]


@pytest.mark.parametrize("kind", KINDS)
def test_no_leakage(kind: str, tmp_path: Path) -> None:
    """Nothing crosses without an import: not the importer's own publishes to the exporter, not other
    accounts, not through a chain of imports (C imports from A and exports; D imports from C)."""
    with serve(kind, tmp_path, CONFIG) as server:
        a, b, c, d = (Peer(server.port, u) for u in "abcd")
        a.do(b"SUB foo.> 1\r\nSUB p.> 2\r\n")
        c.do(b"SUB foo.> 1\r\nSUB p.> 2\r\n")
        d.do(b"SUB > 1\r\n")
        b.do(b"PUB p.foo.bar 1\r\nb\r\nPUB foo.bar 1\r\nB\r\n")
        got_a = a.do(b"PUB foo.bar 1\r\na\r\nPUB foo.baz 1\r\nz\r\n")  # its own, echoed
        got_c, got_d = c.received(), d.received()
        c.do(b"PUB foo.c 1\r\nc\r\n")
        got_d2 = d.received()
    assert got_a == [msg("foo.bar", "1", "a"), msg("foo.baz", "1", "z")]
    assert got_c == [msg("foo.bar", "1", "a")]  # C imports foo.bar only, under the same subject
    assert got_d == []  # D's import of C is not fed by C's import of A
    assert got_d2 == [msg("d.foo.c", "1", "c")]


@pytest.mark.parametrize("kind", KINDS)
def test_subscribe_deny_applies_to_the_mapped_subject(kind: str, tmp_path: Path) -> None:
    with serve(kind, tmp_path, CONFIG) as server:
        a, bd = Peer(server.port, "a"), Peer(server.port, "bd")
        bd.do(b"SUB p.foo.* 1\r\n")
        a.do(b"PUB foo.secret 1\r\ns\r\nPUB foo.open 1\r\no\r\n")
        got = bd.received()
    assert got == [msg("p.foo.open", "1", "o")]


@pytest.mark.parametrize("kind", KINDS)
def test_unsubscribe_and_auto_unsubscribe(kind: str, tmp_path: Path) -> None:
    """UNSUB stops imported messages. An auto-unsubscribe limit counts them in pynatsd; nats-server's
    shadow subscription is a copy made at SUB time, before `UNSUB sid max` sets the limit, so there the
    imported messages keep coming past it (pynatsd is stricter on purpose: the client asked for two)."""
    with serve(kind, tmp_path, CONFIG) as server:
        a, b = Peer(server.port, "a"), Peer(server.port, "b")
        b.do(b"SUB p.foo.x 1\r\nSUB p.foo.x 2\r\nUNSUB 2 2\r\nSUB p.foo.x 3\r\nUNSUB 3\r\n")
        a.do(b"PUB foo.x 1\r\n1\r\nPUB foo.x 1\r\n2\r\nPUB foo.x 1\r\n3\r\n")
        got = by_sid(b.received())
    assert got == {
        b"1": [msg("p.foo.x", "1", "1"), msg("p.foo.x", "1", "2"), msg("p.foo.x", "1", "3")],
        b"2": [msg("p.foo.x", "2", "1"), msg("p.foo.x", "2", "2")]
        + ([msg("p.foo.x", "2", "3")] if kind == "nats-server" else []),
    }


@pytest.mark.parametrize("kind", KINDS)
def test_queue_group_in_the_importer(kind: str, tmp_path: Path) -> None:
    """An importer's queue group gets each message once, beside the exporter's own group of the same name."""
    with serve(kind, tmp_path, CONFIG) as server:
        a, b1, b2 = Peer(server.port, "a"), Peer(server.port, "b"), Peer(server.port, "b")
        b1.do(b"SUB p.foo.q workers 1\r\n")
        b2.do(b"SUB p.foo.q workers 1\r\n")
        a.do(b"SUB foo.q own 7\r\n")
        got_a = a.do(b"".join(b"PUB foo.q 1\r\n%d\r\n" % i for i in range(10)))
        got_b = b1.received() + b2.received()
    assert sorted(f[5] for f in got_b) == [b"%d" % i for i in range(10)]
    assert {f[1] for f in got_b} == {b"p.foo.q"}
    assert len(got_a) == 10


@pytest.mark.parametrize("kind", KINDS)
def test_importer_closing_drops_its_shadows(kind: str, tmp_path: Path) -> None:
    with serve(kind, tmp_path, CONFIG) as server:
        a = Peer(server.port, "a", no_responders=True)
        b = Peer(server.port, "b")
        b.do(b"SUB p.foo.req 1\r\n")
        a.do(b"SUB _INBOX.> 5\r\n")
        asked = a.do(b"PUB foo.req _INBOX.1 1\r\nq\r\n")
        b.close()
        for _ in range(50):  # until the server has seen the close
            after = a.do(b"PUB foo.req _INBOX.2 1\r\nq\r\n")
            if after:
                break
            time.sleep(0.05)
    assert asked == []  # the importer's subscriber counts as interest: no 503
    assert after == [(b"HMSG", b"_INBOX.2", b"5", b"", b"NATS/1.0 503\r\nNats-Subject: foo.req\r\n\r\n", b"")]


@pytest.mark.parametrize("kind", KINDS)
def test_jetstream_stream_captures_imported_messages(kind: str, tmp_path: Path) -> None:
    """A JetStream stream in the importing account stores what the import delivers (its subscription is
    shadowed like a client's), also after a reload."""
    text = f"""
jetstream {{ store_dir: "{tmp_path / kind}" }}
accounts {{
  A {{ users: [{{user: a, password: a}}], exports: [{{stream: "foo.>"}}] }}
  B {{ users: [{{user: b, password: b}}], jetstream: enabled,
      imports: [{{stream: {{account: A, subject: "foo.>"}}, prefix: p}}] }}
}}
"""

    async def stored_after(port: int, publish: bytes, expected: int) -> int:
        nc = await nats.connect(f"nats://b:b@127.0.0.1:{port}")
        js = nc.jetstream()
        if expected == 2:
            await js.add_stream(name="IMPORTED", subjects=["p.foo.>"])
        with Peer(port, "a") as a:
            a.do(publish)
        stored = 0
        for _ in range(50):
            stored = (await js.stream_info("IMPORTED")).state.messages
            if stored >= expected:
                break
            await asyncio.sleep(0.05)
        await nc.close()
        return stored

    publish = b"PUB foo.x 1\r\n1\r\nPUB foo.y 1\r\n2\r\nPUB bar 1\r\n3\r\n"
    with serve(kind, tmp_path, text) as server:
        first = asyncio.run(stored_after(server.port, publish, 2))
        os.kill(server.proc.pid, signal.SIGHUP)
        time.sleep(0.5)
        second = asyncio.run(stored_after(server.port, publish, 4))
    assert (first, second) == (2, 4)


@pytest.mark.parametrize("kind", KINDS)
def test_account_token_position(kind: str, tmp_path: Path) -> None:
    """An export whose subject names its importer at a token: each account imports its own branch only."""
    text = """
accounts {
  A { users: [{user: a, password: a}],
      exports: [{stream: "acc.*.feed", account_token_position: 2},
                {service: "acc.*.svc", account_token_position: 2}] }
  B { users: [{user: b, password: b}],
      imports: [{stream: {account: A, subject: "acc.B.feed"}, to: feed},
                {service: {account: A, subject: "acc.B.svc"}, to: svc}] }
}
"""
    with serve(kind, tmp_path, text) as server:
        a, b = Peer(server.port, "a"), Peer(server.port, "b")
        b.do(b"SUB feed 1\r\n")
        a.do(b"SUB acc.*.svc 1\r\n")
        b.do(b"PUB svc 1\r\nq\r\n")
        got_a = a.do(b"PUB acc.B.feed 1\r\nb\r\nPUB acc.C.feed 1\r\nc\r\n")
        got_b = b.received()
    assert [f[1] for f in got_a] == [b"acc.B.svc"]
    assert got_b == [msg("feed", "1", "b")]
