"""JetStream requests nothing listens for (a pull from a missing consumer, a direct get on a stream without
direct gets): nats-server has no subscription for them, so its requester hears "no responders" exactly as
for any subject nobody subscribes to: only a client that asked for it in CONNECT, and only on its own reply
subscription. Raw sockets against both servers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import nats
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


@pytest.mark.parametrize("kind", ["pynatsd", "nats-server"])
async def test_a_domain_kv_put_to_no_bucket_hears_no_responders(kind: str, tmp_path: Path) -> None:
    """`$JS.<domain>.API.$KV.<bucket>.<key>` (nats.go's put in a domain) to a bucket that does not exist:
    nothing stores it, so the requester hears no responders (nats-py: NoRespondersError), not a timeout;
    a bucket that exists takes the put."""
    if kind == "nats-server":
        need_tool(nats_server_binary() is not None, "nats-server")
    conf = tmp_path / "js.conf"
    conf.write_text(f'jetstream {{ store_dir: "{tmp_path / "store"}", domain: hub }}\n')
    srv = start_server(kind, ["-c", str(conf)])
    try:
        nc = await nats.connect(srv.url, allow_reconnect=False)
        with pytest.raises(nats.errors.NoRespondersError):
            await nc.request("$JS.hub.API.$KV.NOPE.key", b"v", timeout=5)
        await nc.jetstream(domain="hub").create_key_value(bucket="CFG")
        ack = json.loads((await nc.request("$JS.hub.API.$KV.CFG.key", b"v", timeout=5)).data)
        assert (ack["stream"], ack["seq"], ack["domain"]) == ("KV_CFG", 1, "hub")
        await nc.close()
    finally:
        srv.stop()
