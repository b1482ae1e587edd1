"""JetStream requests nothing listens for (a pull from a missing consumer, a direct get on a stream without
direct gets): nats-server has no subscription for them, so its requester hears "no responders" exactly as
for any subject nobody subscribes to: only a client that asked for it in CONNECT, and only on its own reply
subscription. Raw sockets against both servers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import need_tool
from tests.servers import ServerProcess, nats_server_binary, start_server
from tests.wire import WireClient

UNHEARD = (b"$JS.API.CONSUMER.MSG.NEXT.NOSTREAM.C", b"$JS.API.DIRECT.GET.NOSTREAM")
ACCOUNT_INFO = b'"type":"io.nats.jetstream.api.v1.account_info_response"'


@pytest.fixture(scope="module", params=["pynatsd", "nats-server"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    kind = str(request.param)
    if kind == "nats-server":
        need_tool(nats_server_binary() is not None, "nats-server")
    store = tmp_path_factory.mktemp(f"js-{kind}")
    proc = start_server(kind, ["-js", "-sd", str(store)])
    yield proc
    proc.stop()


def requester(server: ServerProcess, no_responders: bool) -> WireClient:
    client = WireClient(server.port)
    flag = b"true" if no_responders else b"false"
    client.exchange(
        b'CONNECT {"verbose":false,"headers":true,"no_responders":%s}\r\nSUB _INBOX.r.* 1\r\n' % flag
    )
    return client


def test_no_status_for_a_requester_that_did_not_ask(server: ServerProcess) -> None:
    with requester(server, no_responders=False) as quiet:
        for n, subject in enumerate(UNHEARD):
            quiet.send(b"PUB %s _INBOX.r.%d 0\r\n\r\n" % (subject, n))
        # An answered request after them: whatever the unheard ones caused comes before its answer.
        quiet.send(b"PUB $JS.API.INFO _INBOX.r.info 0\r\n\r\n")
        before, closed = quiet.read_until(ACCOUNT_INFO)
    assert not closed
    assert b"503" not in before and before.count(b"MSG ") == 1, before


def test_the_status_goes_to_the_requester_alone(server: ServerProcess) -> None:
    with requester(server, no_responders=True) as asker, requester(server, no_responders=True) as bystander:
        expected = b""
        for n, subject in enumerate(UNHEARD):
            asker.send(b"PUB %s _INBOX.r.%d 0\r\n\r\n" % (subject, n))
            status = b"NATS/1.0 503\r\nNats-Subject: %s\r\n\r\n" % subject
            expected += b"HMSG _INBOX.r.%d 1 %d %d\r\n%s\r\n" % (n, len(status), len(status), status)
        got, _ = asker.read_until(b"Nats-Subject: " + UNHEARD[-1] + b"\r\n\r\n\r\n")
        assert got == expected
        # The bystander subscribes to the same reply subjects: it hears nothing of the asker's requests.
        assert bystander.exchange(b"") == (b"", False)
