"""Fairness under a flood of JetStream API requests (issue 30 item 6): while two connections pipeline
STREAM.INFO with `subjects_filter: ">"` over a stream of many subjects, or consumer creates with a
wildcard filter, a new client's CONNECT -> PONG and an idle client's PING -> PONG stay within the bound
of the other floods. Before, every request of a read was worked out in that loop turn (20k subjects:
seconds per turn under the flood); now they are queued, one a turn, a stream info's subjects counted in
slices."""

from __future__ import annotations

import json
import socket
import statistics
import threading

import pytest

from tests.fairness.test_flood_latency import (
    BOUND,
    MEDIAN_BOUND,
    _connect,
    _latencies_during,
    _op_flood,
    _read_until,
)
from tests.servers import ServerProcess, start_server

SUBJECTS = 20_000
INFO = b'{"subjects_filter":">"}'
CREATE = json.dumps(
    {"stream_name": "S", "config": {"filter_subject": "s.*", "inactive_threshold": 500_000_000}}
).encode()
FLOODS = {
    "stream info": b"PUB $JS.API.STREAM.INFO.S _none %d\r\n%s\r\n" % (len(INFO), INFO),
    "consumer create": b"PUB $JS.API.CONSUMER.CREATE.S _none %d\r\n%s\r\n" % (len(CREATE), CREATE),
}


def _fill(server: ServerProcess) -> int:
    """A memory stream `S` with SUBJECTS subjects; the subject total its STREAM.INFO reports."""
    body = b'{"name":"S","subjects":["s.>"],"storage":"memory"}'
    with _connect(server.port) as sock:
        _read_until(sock, b"\r\n")
        sock.sendall(
            b'CONNECT {"verbose":false}\r\nSUB r 1\r\nPUB $JS.API.STREAM.CREATE.S r %d\r\n%s\r\n'
            % (len(body), body)
        )
        _read_until(sock, b"MSG r 1")
        sock.sendall(b"".join(b"PUB s.%d 1\r\nx\r\n" % i for i in range(SUBJECTS)))
        sock.sendall(b"SUB info 2\r\nPUB $JS.API.STREAM.INFO.S info %d\r\n%s\r\n" % (len(INFO), INFO))
        return _total(sock)


def _total(sock: socket.socket) -> int:
    data = b""
    while True:
        data += sock.recv(1 << 20)
        _, sep, rest = data.partition(b"MSG info 2 ")
        if not sep or b"\r\n" not in rest:
            continue
        size_text, _, body = rest.partition(b"\r\n")
        size = int(size_text)
        if len(body) >= size:
            return int(json.loads(body[:size]).get("total", 0))


# What keeps this fair, the API's request queue and its sliced subject counting (jetstream/api.py), is
# never compiled: the interpreted pass would prove it again (7 s); it keeps the parser's and delivery's
# floods (test_flood_latency.py).
@pytest.mark.compiled_pass_only
@pytest.mark.slow
@pytest.mark.parametrize("flood", list(FLOODS))
@pytest.mark.parametrize("kind", ["pynatsd", "nats-server"])
def test_no_jetstream_request_flood_delays_other_clients(kind: str, flood: str, tmp_path: object) -> None:
    server = start_server(kind, ["-js", "-sd", str(tmp_path)])
    stop = threading.Event()
    try:
        total = _fill(server)
        assert total > 0
        connect = b'CONNECT {"verbose":false}\r\n'
        floods = [
            threading.Thread(
                target=_op_flood, args=(server.port, connect, FLOODS[flood] * 20, stop), daemon=True
            )
            for _ in range(2)
        ]
        handshakes, pings = _latencies_during(server, floods, stop)
    finally:
        server.stop()
    medians = statistics.median(handshakes), statistics.median(pings)
    report = (
        f"{kind}, {flood}: handshake median {medians[0] * 1000:.1f} ms, max {max(handshakes) * 1000:.1f} ms;"
        f" ping median {medians[1] * 1000:.1f} ms, max {max(pings) * 1000:.1f} ms"
    )
    print(report)
    # The median holds the 100 ms; single samples only the file's bound (nats-server's own worst
    # handshake passed 100 ms on this 2-core machine when it was loaded).
    assert max(medians) <= MEDIAN_BOUND, report
    assert max(handshakes) < BOUND and max(pings) < BOUND, report
