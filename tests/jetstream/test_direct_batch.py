"""Direct gets, batched and single, byte for byte against nats-server: the same frames (headers in the same
order and spelling, statuses, end-of-batch), only the timestamps' values aside."""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest

from tests.servers import ServerProcess, jetstream_pair

Frame = tuple[bytes, bytes, bytes, bytes]  # op, subject, headers (timestamps blanked), payload
_STAMP = re.compile(rb"Nats-Time-Stamp: [^\r]*")
ANSWERS_TIMEOUT = 10.0  # seconds until every request got its first answer (milliseconds unloaded)

MESSAGES: list[tuple[str, bytes | None, bytes]] = [
    ("dg.a", None, b"one"),
    ("dg.b", b"NATS/1.0\r\nX-A: 1\r\n\r\n", b"two"),
    ("dg.a", None, b"three"),
    ("dg.b", None, b"four"),  # deleted below: a hole at sequence 4
    ("dg.c", b"NATS/1.0\r\nX-B: 2\r\nX-C: 3\r\n\r\n", b"five"),
    ("dg.a", None, b""),
]

# (subject suffix after DIRECT.GET., headers, body)
REQUESTS: list[tuple[str, bytes | None, Any]] = [
    ("DG", None, {"seq": 1, "batch": 3}),
    ("DG", None, {"seq": 2, "batch": 100}),
    ("DG", None, {"seq": 3, "batch": 4, "next_by_subj": "dg.b"}),
    ("DG", None, {"seq": 1, "batch": 3, "next_by_subj": "dg.*"}),
    ("DG", None, {"next_by_subj": "dg.a", "batch": 5}),
    ("DG", None, {"seq": 1, "batch": 10, "max_bytes": 12}),
    ("DG", None, {"seq": 1, "batch": 1}),
    ("DG", None, {"seq": 999, "batch": 5}),
    ("DG", None, {"seq": 4, "batch": 2}),
    ("DG", None, {"seq": 4}),
    ("DG", None, {"seq": 5}),
    ("DG", None, {"seq": 1, "batch": 2, "no_hdr": True}),
    ("DG", None, {"start_time": "2000-01-01T00:00:00Z", "batch": 2}),
    ("DG", None, {"next_by_subj": "dg.c"}),
    ("DG", None, {"last_by_subj": "dg.a"}),
    ("DG", None, b""),
    ("DG", None, b"nope"),
    ("DG", None, {}),
    ("DG", None, {"last_by_subj": "dg.a", "batch": 2}),
    ("DG", None, {"seq": 1, "last_by_subj": "dg.a"}),
    ("DG", None, {"seq": 1, "start_time": "2000-01-01T00:00:00Z"}),
    ("DG", b"NATS/1.0\r\nNats-Required-Api-Level: 99\r\n\r\n", {"seq": 1}),
    ("DG.dg.a", None, b""),
    ("DG.dg.b", None, {"seq": 1}),
    ("DG.dg.zzz", None, b""),
    ("NOPE", None, {"seq": 1, "batch": 2}),
    # multi_last: the last message of each matching subject, in sequence order, then an EOB with the ceiling
    ("DG", None, {"multi_last": ["dg.*"]}),
    ("DG", None, {"multi_last": ["dg.a", "dg.c", "dg.zzz"]}),
    ("DG", None, {"multi_last": ["dg.>"], "batch": 2}),
    ("DG", None, {"multi_last": ["dg.*"], "max_bytes": 5}),
    ("DG", None, {"multi_last": ["dg.*"], "seq": 4}),
    ("DG", None, {"multi_last": ["dg.*"], "seq": 999}),
    ("DG", None, {"multi_last": ["dg.*"], "up_to_seq": 3}),
    ("DG", None, {"multi_last": ["dg.b"], "up_to_seq": 2, "batch": 1}),
    ("DG", None, {"multi_last": ["dg.*"], "up_to_time": "2000-01-01T00:00:00Z"}),
    ("DG", None, {"multi_last": ["dg.*"], "up_to_time": "2200-01-01T00:00:00Z"}),
    ("DG", None, {"multi_last": ["nope.*"]}),
    ("DG", None, {"multi_last": ["dg.a"], "up_to_seq": 1, "up_to_time": "2999-01-01T00:00:00Z"}),
    ("DG", None, {"multi_last": ["dg.a"], "next_by_subj": "dg.a"}),
    ("DG", None, {"multi_last": ["dg.a"], "last_by_subj": "dg.a"}),
    ("DG", None, {"multi_last": "dg.a"}),
    ("DG", None, {"multi_last": ["dg.a"], "up_to_time": "yesterday"}),
    ("DG.dg.a", None, {"multi_last": ["dg.a"]}),
]


class Wire:
    """A raw connection that keeps every frame it reads."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.buf = b""
        self._read_line()  # INFO
        self.sock.sendall(b'CONNECT {"verbose":false,"headers":true,"no_responders":true}\r\nSUB r.> 1\r\n')

    def _fill(self, timeout: float) -> bool:
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(65536)
        except TimeoutError:
            return False
        if not data:
            raise EOFError
        self.buf += data
        return True

    def _read_line(self) -> bytes:
        while b"\r\n" not in self.buf:
            self._fill(5)
        line, _, self.buf = self.buf.partition(b"\r\n")
        return line

    def frames(self, idle: float = 0.4) -> Iterator[Frame]:
        """Frames until the server stays quiet for `idle` seconds."""
        while True:
            while b"\r\n" in self.buf:
                line = self.buf.split(b"\r\n", 1)[0]
                op, *args = line.split(b" ")
                if op in (b"PING", b"PONG", b"+OK"):
                    self.buf = self.buf[len(line) + 2 :]
                    if op == b"PING":
                        self.sock.sendall(b"PONG\r\n")
                    continue
                assert op in (b"MSG", b"HMSG"), line
                hlen = int(args[-2]) if op == b"HMSG" else 0
                total = int(args[-1])
                start = len(line) + 2
                if len(self.buf) < start + total + 2:
                    break
                body = self.buf[start : start + total]
                self.buf = self.buf[start + total + 2 :]
                yield op, args[0], _STAMP.sub(b"Nats-Time-Stamp: T", body[:hlen]), body[hlen:]
            if not self._fill(idle):
                return

    def send(self, subject: bytes, reply: bytes, hdrs: bytes | None, body: bytes) -> None:
        if hdrs is None:
            self.sock.sendall(b"PUB %s %s %d\r\n%s\r\n" % (subject, reply, len(body), body))
        else:
            n = len(hdrs)
            frame = b"HPUB %s %s %d %d\r\n%s%s\r\n" % (subject, reply, n, n + len(body), hdrs, body)
            self.sock.sendall(frame)


def session(port: int) -> list[tuple[str, list[Frame]]]:
    wire = Wire(port)
    config = {"name": "DG", "subjects": ["dg.>"], "allow_direct": True}
    wire.send(b"$JS.API.STREAM.CREATE.DG", b"r.create", None, json.dumps(config).encode())
    assert b'"error"' not in next(wire.frames())[3]  # the stream exists before anything is published
    for subject, hdrs, payload in MESSAGES:
        wire.send(subject.encode(), b"r.ack", hdrs, payload)
        assert b'"seq"' in next(wire.frames())[3]  # stored, in this order
    wire.send(b"$JS.API.STREAM.MSG.DELETE.DG", b"r.del", None, b'{"seq":4}')
    assert b'"success":true' in next(wire.frames())[3]
    # The gets only read, so they go out together and their answers are told apart by their reply subjects
    # (r.<n>): one quiet window for the session instead of one per request (21 s before, 26 x 2 x 0.4 s).
    sent = []
    for n, (target, hdrs, body) in enumerate(REQUESTS):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        wire.send(b"$JS.API.DIRECT.GET." + target.encode(), b"r.%d" % n, hdrs, data)
        sent.append(f"{target} {data!r}")
    replies = [b"r.%d" % n for n in range(len(REQUESTS))]
    answers: dict[bytes, list[Frame]] = {reply: [] for reply in replies}
    deadline = time.monotonic() + ANSWERS_TIMEOUT
    while time.monotonic() < deadline and not all(answers.values()):  # every request answers at least once
        for frame in wire.frames(idle=0.1):
            answers.setdefault(frame[1], []).append(frame)
    for frame in wire.frames():  # then whatever more comes until the server stays quiet
        answers.setdefault(frame[1], []).append(frame)
    wire.sock.close()
    assert list(answers) == replies, f"frames to other subjects: {answers.keys() - set(replies)}"
    return list(zip(sent, answers.values(), strict=True))


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    """Fresh ones for each test (the conftest's are shared by the module)."""
    with jetstream_pair(tmp_path) as pair:
        yield pair


def test_direct_get_frames_match_nats_server(servers: tuple[ServerProcess, ServerProcess]) -> None:
    ref, ours = servers
    expected = session(ref.port)
    got = session(ours.port)
    diffs = [
        f"{what}:\n  nats-server {want}\n  pynatsd     {have}"
        for (what, want), (_, have) in zip(expected, got, strict=True)
        if have != want
    ]
    assert not diffs, "\n".join(diffs)
    # The script exercises what it claims: batches end with an EOB, cut ones included.
    eobs = [frames[-1][2] for _, frames in expected if frames and b"204 EOB" in frames[-1][2]]
    assert len(eobs) >= 7


async def _multi_last_answers(port: int) -> list[tuple[str, int]]:
    """Per request, the status of its last frame and how many frames it got, on a stream of 1025 subjects:
    one past the cap of one `multi_last` answer."""
    nc = await nats.connect(f"nats://127.0.0.1:{port}", allow_reconnect=False)
    try:
        config = {"name": "CAP", "subjects": ["cap.>"], "allow_direct": True, "storage": "memory"}
        await nc.request("$JS.API.STREAM.CREATE.CAP", json.dumps(config).encode(), timeout=5)
        for n in range(1025):
            await nc.publish(f"cap.{n}", b"x")
        await nc.flush()
        info: dict[str, Any] = {}
        while info.get("state", {}).get("messages") != 1025:
            info = json.loads((await nc.request("$JS.API.STREAM.INFO.CAP", b"", timeout=5)).data)
        answers = []
        steps = (["cap.*"], ["cap.1", "cap.>"], ["cap.1", "cap.2", "cap.1", "nope"], "purge", ["cap.*"])
        for filters in steps:
            if filters == "purge":  # one subject fewer: exactly at the cap
                await nc.request("$JS.API.STREAM.PURGE.CAP", b'{"filter":"cap.0"}', timeout=5)
                continue
            inbox = nc.new_inbox()
            sub = await nc.subscribe(inbox)
            request = json.dumps({"multi_last": filters}).encode()
            await nc.publish("$JS.API.DIRECT.GET.CAP", request, reply=inbox)
            frames = 0
            while True:
                msg = await sub.next_msg(timeout=10)
                frames += 1
                status = (msg.headers or {}).get("Status", "")
                if status:
                    answers.append((status, frames))
                    break
            await sub.unsubscribe()
        return answers
    finally:
        await nc.close()


async def test_multi_last_cap_as_nats_server(servers: tuple[ServerProcess, ServerProcess]) -> None:
    """Past 1024 subjects a `multi_last` answer is one 413; at the cap, every message and the EOB."""
    ref, ours = servers
    expected = await _multi_last_answers(ref.port)
    assert expected == [("413", 1), ("413", 1), ("204", 3), ("204", 1025)]
    assert await _multi_last_answers(ours.port) == expected
