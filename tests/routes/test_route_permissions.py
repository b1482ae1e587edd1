"""Route permissions (`cluster { permissions { import, export } }`), pynatsd beside nats-server.

One server (the restricted one) runs with route permissions, its peer without; every pair of kinds, the
all-nats-server pair being the reference: the same nats-py actions must give the same outcomes. Import
decides which of the restricted server's interest goes to its peer (so what it receives), export which of
the peer's interest it takes and what it sends (its deny filtering a wildcard interest's messages).
Absent messages are proven by a sentinel published after them on the same route (one order per account).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
import socket
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
import pytest_asyncio

from tests.routes.conftest import connect, routez, wait_logged, wait_routed
from tests.servers import ServerProcess, free_port, require, start_server

PERMISSIONS = """
    permissions {
      import { allow: ["imp.>", "_INBOX.>"], deny: "imp.secret" }
      export: { allow: "exp.>", deny: ["exp.secret"] }
    }
"""
IMPORT = {"allow": ["imp.>", "_INBOX.>"], "deny": ["imp.secret"]}
EXPORT = {"allow": ["exp.>"], "deny": ["exp.secret"]}
# (restricted, peer, which one solicits): the all-nats-server pairs are the reference
PAIRS = [
    ("nats-server", "nats-server", "peer"),
    ("pynatsd", "nats-server", "peer"),
    ("nats-server", "pynatsd", "peer"),
    ("pynatsd", "pynatsd", "peer"),
    # the restricted server soliciting (its pool and pinned routes opened by it)
    ("nats-server", "nats-server", "restricted"),
    ("pynatsd", "nats-server", "restricted"),
]


@pytest.fixture(scope="module", params=PAIRS, ids=lambda p: f"{p[0]}-restricted-{p[1]}-peer-{p[2]}-solicits")
def pair(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    """The restricted server (a config file) and its peer (flags), one of them soliciting the route."""
    require("nats-server")
    restricted_kind, peer_kind, solicits = request.param
    rport, port, http, peer_route, peer_port, peer_http = _ports(6)
    conf = tmp_path_factory.mktemp("routeperms") / "restricted.conf"
    routes = f"routes: [nats://127.0.0.1:{peer_route}]" if solicits == "restricted" else ""
    conf.write_text(f"cluster {{\n  name: P\n  listen: 127.0.0.1:{rport}\n{routes}\n{PERMISSIONS}\n}}\n")
    restricted = start_server(restricted_kind, ["-c", str(conf)], port=port, http_port=http)
    wait_logged(restricted, "Listening for route connections")
    peer_args = ["--cluster", f"nats://127.0.0.1:{peer_route}", "--cluster_name", "P"]
    if solicits == "peer":
        peer_args += ["--routes", f"nats://127.0.0.1:{rport}"]
    peer = start_server(peer_kind, peer_args, port=peer_port, http_port=peer_http)
    restricted.extra["route_port"] = rport
    yield restricted, peer
    peer.stop()
    restricted.stop()


def _ports(n: int) -> list[int]:
    """`n` distinct free ports (free_port asked twice in a row may give the same one)."""
    ports: list[int] = []
    while len(ports) < n:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


@pytest_asyncio.fixture
async def clients(pair: tuple[ServerProcess, ServerProcess]) -> AsyncIterator[tuple[nats.NATS, nats.NATS]]:
    """A client of the restricted server and one of its peer, once the route carries messages."""
    restricted, peer = pair
    a, b = await connect(restricted), await connect(peer)
    await wait_routed(b, a, subject="imp.ready")  # the route is up once an imported subject crosses
    yield a, b
    await a.close()
    await b.close()


async def _outcome(
    pub: nats.NATS,
    sub: nats.NATS,
    subscriptions: list[tuple[str, str]],
    published: list[str],
    sentinel: str,
) -> dict[str, list[str]]:
    """What each of `subscriptions` ((subject, queue or "")) on `sub`'s server receives of `published`
    (each once, from `pub`'s server): the subjects, in order. The sentinel, subscribed last and published
    last, crosses after the interest and after every message."""
    got: dict[str, list[str]] = {f"{s} {q}".strip(): [] for s, q in subscriptions}
    done = asyncio.Event()
    subs = []
    for subject, queue in subscriptions:
        key = f"{subject} {queue}".strip()

        async def take(msg: Any, key: str = key) -> None:
            if msg.subject in published:  # (not the sentinel, nor a late probe of an earlier check)
                got[key].append(msg.subject)

        subs.append(await sub.subscribe(subject, queue=queue, cb=take))

    async def end(msg: Any) -> None:
        if msg.data == b"end":
            done.set()

    subs.append(await sub.subscribe(sentinel, cb=end))
    await wait_routed(pub, sub, subject=sentinel)  # our interest has crossed (it went before the sentinel's)
    for subject in published:
        await pub.publish(subject, b"x")
    await pub.publish(sentinel, b"end")
    await pub.flush()
    await asyncio.wait_for(done.wait(), 10)
    for s in subs:
        await s.unsubscribe()
    return got


async def test_export_decides_what_the_peer_gets(clients: tuple[nats.NATS, nats.NATS]) -> None:
    a, b = clients
    got = await _outcome(
        a,
        b,
        [
            ("exp.one", ""),
            ("other.one", ""),
            ("exp.secret", ""),
            ("exp.>", ""),
            ("exp.q", "g"),
            ("other.q", "g"),
        ],
        ["exp.one", "other.one", "exp.secret", "exp.two", "exp.q", "exp.q", "other.q"],
        "exp.sentinel",
    )
    assert got == {
        "exp.one": ["exp.one"],
        "other.one": [],  # not exported: the peer's interest is ignored
        "exp.secret": [],  # denied
        "exp.>": ["exp.one", "exp.two", "exp.q", "exp.q"],  # the wildcard's denied subject is not sent
        "exp.q g": ["exp.q", "exp.q"],
        "other.q g": [],
    }


async def test_import_decides_what_the_restricted_server_asks_for(
    clients: tuple[nats.NATS, nats.NATS],
) -> None:
    a, b = clients
    published = ["imp.one", "other.one", "imp.secret", "imp.two", "imp.q"]
    got = await _outcome(
        b,
        a,
        [("imp.one", ""), ("other.one", ""), ("imp.secret", ""), (">", ""), ("imp.q", "g")],
        published,
        "imp.sentinel",
    )
    assert got == {
        "imp.one": ["imp.one"],
        "other.one": [],  # not imported: no interest sent
        "imp.secret": [],  # denied import
        ">": ["imp.one", "imp.q"],  # not within the allow list as written: it sees what the others asked for
        "imp.q g": ["imp.q"],
    }
    # A wildcard inside the allow list is asked for as written: the peer sends all it matches, the denied
    # subject too (the deny limits the interest sent, not the messages received).
    got = await _outcome(b, a, [("imp.>", "")], published, "imp.sentinel")
    assert got == {"imp.>": ["imp.one", "imp.secret", "imp.two", "imp.q"]}


async def test_request_reply_needs_the_inbox_on_the_way_back(clients: tuple[nats.NATS, nats.NATS]) -> None:
    a, b = clients
    seen: list[str] = []

    async def answer(msg: Any) -> None:
        seen.append(msg.subject)
        await msg.respond(b"pong")

    hidden = await b.subscribe("other.svc", cb=answer)  # (its RS+ goes before the probes')
    on_peer = await b.subscribe("exp.svc", cb=answer)
    here = await a.subscribe("imp.svc", cb=answer)
    await wait_routed(a, b, subject="exp.svc.ready")
    await wait_routed(b, a, subject="imp.svc.ready")
    # the restricted server imports _INBOX.>: its client's reply comes back
    reply = await a.request("exp.svc", b"ping", timeout=10)
    assert reply.data == b"pong"
    # the peer's inbox is not exported to it: the request arrives, the reply is not sent back
    with pytest.raises(nats.errors.TimeoutError):
        await b.request("imp.svc", b"ping", timeout=1)
    # a responder whose interest was not exported to the restricted server: nobody there to answer
    with pytest.raises(nats.errors.NoRespondersError):
        await a.request("other.svc", b"ping", timeout=10)
    assert seen == ["exp.svc", "imp.svc"]
    await hidden.unsubscribe()
    await on_peer.unsubscribe()
    await here.unsubscribe()


@pytest.mark.parametrize("peer_kind", ["nats-server", "pynatsd"])
async def test_a_peer_resends_interest_its_restricted_peer_exports_after_a_reload(
    peer_kind: str, tmp_path: Path
) -> None:
    """nats-server reloads its route permissions and says so in an INFO: the peer sends the interest the
    new export takes and the old did not (then it crosses)."""
    require("nats-server")
    rport, port, peer_route, peer_port = _ports(4)
    conf = tmp_path / "restricted.conf"

    def text(export: str) -> str:
        return f"cluster {{ name: P, listen: 127.0.0.1:{rport}, permissions {{ export: {export} }} }}\n"

    conf.write_text(text('"exp.>"'))
    restricted = start_server("nats-server", ["-c", str(conf)], port=port)
    peer_args = ["--cluster", f"nats://127.0.0.1:{peer_route}", "--cluster_name", "P"]
    peer = start_server(peer_kind, [*peer_args, "--routes", f"nats://127.0.0.1:{rport}"], port=peer_port)
    a = b = None
    try:
        a, b = await connect(restricted), await connect(peer)
        received = asyncio.Event()

        async def take(_: Any) -> None:
            received.set()

        await b.subscribe("later.x", cb=take)  # kept throughout: its RS+ is sent once, refused
        got = await _outcome(a, b, [("later.x", "")], ["later.x"], "exp.sentinel")
        assert got == {"later.x": []} and not received.is_set()
        conf.write_text(text('["exp.>", "later.>"]'))
        restricted.proc.send_signal(signal.SIGHUP)
        wait_logged(restricted, "Reloaded server configuration")
        for _ in range(100):  # until the peer's resent interest has crossed
            await a.publish("later.x", b"")
            await a.flush()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(received.wait(), 0.1)
            if received.is_set():
                break
        assert received.is_set(), "the peer never resent its interest"
    finally:
        for c in (a, b):
            if c is not None:
                await c.close()
        peer.stop()
        restricted.stop()


async def test_only_permitted_interest_is_sent_or_taken_in_every_account(
    pair: tuple[ServerProcess, ServerProcess], clients: tuple[nats.NATS, nats.NATS]
) -> None:
    """Each side's /routez lists the interest it holds for the other: the restricted server's within its
    import (the system account's internal subscriptions, on their pinned route, too), the peer's within
    the restricted server's export."""
    restricted, peer = pair
    a, b = clients
    held = [await a.subscribe(s) for s in ("imp.held", "other.held")]
    held += [await b.subscribe(s) for s in ("exp.held", "other.held", "exp.secret")]
    await wait_routed(b, a, subject="imp.held.done")  # (after the held interest, on the same routes)
    await wait_routed(a, b, subject="exp.held.done")

    def listed(server: ServerProcess) -> set[str]:
        return {s for r in routez(server)["routes"] for s in r.get("subscriptions_list", [])}

    from_restricted, from_peer = listed(peer), listed(restricted)
    assert "imp.held" in from_restricted and "exp.held" in from_peer
    assert all(s.startswith(("imp.", "_INBOX.")) and s != "imp.secret" for s in from_restricted)
    assert all(s.startswith("exp.") and s != "exp.secret" for s in from_peer)
    for sub in held:
        await sub.unsubscribe()


def _route_info(port: int) -> dict[str, Any]:
    """The INFO a server sends a connection to its route port."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        data = b""
        while b"\r\n" not in data:
            chunk = sock.recv(4096)
            assert chunk, data
            data += chunk
    line = data.split(b"\r\n", 1)[0]
    assert line.startswith(b"INFO ")
    return dict(json.loads(line[5:]))


def _routez(server: ServerProcess) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.http_port}/routez", timeout=5) as resp:
        return dict(json.load(resp))


def test_info_and_routez_show_the_permissions(pair: tuple[ServerProcess, ServerProcess]) -> None:
    restricted, peer = pair
    info = _route_info(int(str(restricted.extra["route_port"])))
    assert (info["import"], info["export"]) == (IMPORT, EXPORT)
    own = _routez(restricted)
    assert (own["import"], own["export"]) == (IMPORT, EXPORT)
    assert all("import" not in r for r in own["routes"])  # its peer has none
    seen = _routez(peer)
    assert "import" not in seen
    assert [(r["import"], r["export"]) for r in seen["routes"]] == [(IMPORT, EXPORT)] * len(seen["routes"])


# -- config errors, as `nats-server -t` words them -----------------------------------------------------
CONFIG_ERRORS = {
    "invalid import subject": 'permissions { import { allow: "foo bar" } }',
    "queue group in export": 'permissions { export: "foo bar" }',
    "unknown subject permission field": 'permissions { import { allow: "a", denny: "b" } }',
    "dynamic responses": "permissions { allow_responses: true }",
    "unknown permissions field": "permissions { bogus: 1 }",
    "not a map": 'permissions: "foo"',
    "not subjects": "permissions { import: 5 }",
    "deprecated in authorization": 'authorization { user: a, password: b, permissions { import: "foo" } }',
    # no route user of its own permissions: nats-server takes one route user only
    "route users": 'authorization { users: [ {user: a, password: b, permissions { import: "foo" }} ] }',
}
_PREFIX = re.compile(r"^(nats-server|pynatsd): (\S+:\d+:\d+: )?")


def _check(kind: str, conf: Path) -> tuple[int, str]:
    from tests.config.test_differential import _run

    result = _run(kind, ["-t", "-c", str(conf)])
    first = (result.stdout + result.stderr).strip().splitlines()[0]
    return result.returncode, _PREFIX.sub("", first)


@pytest.mark.parametrize("case", list(CONFIG_ERRORS))
def test_malformed_permissions_are_refused_in_nats_server_words(case: str, tmp_path: Path) -> None:
    require("nats-server")
    conf = tmp_path / "c.conf"
    conf.write_text(f"cluster {{\n  port: -1\n  {CONFIG_ERRORS[case]}\n}}\n")
    expected = _check("nats-server", conf)
    assert expected[0] == 1
    assert _check("pynatsd", conf) == expected


def test_short_forms_aliases_and_the_deprecated_place_are_read() -> None:
    from pynatsd.base.options import Options
    from pynatsd.config.parser import parse
    from pynatsd.config.schema import apply_config

    def read(block: str) -> tuple[dict[str, Any] | None, list[str]]:
        opts = Options()
        warnings = apply_config(opts, parse(f"cluster {{ port: -1, {block} }}", "t"))
        assert opts.cluster is not None
        return opts.cluster.permissions, [str(w) for w in warnings]

    short = {"publish": {"allow": ["a.>"], "deny": []}, "subscribe": {"allow": ["b", "c"], "deny": []}}
    assert read('permissions { publish: "a.>", sub: ["b", "c"] }') == (short, [])
    legacy = 'authorization { user: u, password: p, permissions { import: "a.>", export: ["b", "c"] } }'
    perms, warnings = read(legacy)
    assert perms == short and len(warnings) == 1 and "is deprecated" in warnings[0]
    # there, dynamic responses are taken as a user's and dropped: the blanket import allow is turned off
    perms, _ = read("authorization { user: u, password: p, permissions { allow_responses: true } }")
    assert perms == {"publish": {"allow": [], "deny": []}}
    # the block's own permissions win over the deprecated ones, whichever comes first
    perms, _ = read(f'permissions {{ import: "x" }}, {legacy}')
    assert perms == {"publish": {"allow": ["x"], "deny": []}}
