"""Gateways over TLS (`gateway { tls {} }`): the handshake first, both ways, mutual with `verify`, each
kind of server on either side; a cluster whose certificate another CA signed never joins."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest

from tests.gateways.conftest import Member, Supercluster
from tests.routes.conftest import wait_routed
from tests.routes.test_tls import route_certs

PAIRS = [("pynatsd", "nats-server"), ("nats-server", "pynatsd"), ("pynatsd", "pynatsd")]
PAIRS.append(("nats-server", "nats-server"))  # the reference


def _tls(certs: dict[str, str], ca: str) -> str:
    return (
        f'tls {{ cert_file: "{certs["cert"]}", key_file: "{certs["key"]}", ca_file: "{ca}", verify: true, '
        "timeout: 3 }"
    )


def _connected(member: Member, other: str) -> bool:
    gatewayz = member.gatewayz()
    return "connection" in gatewayz["outbound_gateways"].get(other, {}) and bool(
        gatewayz["inbound_gateways"].get(other)
    )


@pytest.fixture(scope="module", params=PAIRS, ids="-".join)
def supercluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Supercluster]:
    """A and B over mutual TLS; C, whose certificate another CA signed (it trusts A's), dials A."""
    directory: Path = tmp_path_factory.mktemp("gateway-tls")
    (directory / "ours").mkdir()
    (directory / "foreign").mkdir()
    ours, foreign = route_certs(directory / "ours"), route_certs(directory / "foreign", "another CA")
    first, second = request.param
    sc = Supercluster(
        {"A": [first], "B": [second], "C": [second]},
        gateway_block={
            "A": _tls(ours, ours["ca"]),
            "B": _tls(ours, ours["ca"]),
            "C": _tls(foreign, ours["ca"]),
        },
        names={"A": ["B"], "B": ["A"], "C": ["A"]},
        connected=False,
    )
    deadline = time.monotonic() + 30
    while not (_connected(sc["A"][0], "B") and _connected(sc["B"][0], "A")):
        assert time.monotonic() < deadline, (sc["A"][0].gatewayz(), sc["B"][0].gatewayz())
        time.sleep(0.1)
    yield sc
    sc.close()


@pytest.mark.asyncio
async def test_pub_sub_across_tls_gateways(supercluster: Supercluster) -> None:
    a = await nats.connect(supercluster["A"][0].url, allow_reconnect=False)
    b = await nats.connect(supercluster["B"][0].url, allow_reconnect=False)
    try:
        await wait_routed(a, b)
        await wait_routed(b, a)
    finally:
        await a.close()
        await b.close()


def test_a_cluster_of_another_ca_never_joins(supercluster: Supercluster) -> None:
    """A refuses C's certificate in the handshake, as nats-server's: A logs a TLS handshake error, and
    neither A's /gatewayz nor C's shows a connection between them."""
    a, c = supercluster["A"][0], supercluster["C"][0]
    deadline = time.monotonic() + 15
    while "handshake error" not in (a.process.log() if a.process else "").lower():
        assert time.monotonic() < deadline, a.process.log() if a.process else ""
        time.sleep(0.05)
    assert "C" not in a.gatewayz()["inbound_gateways"]
    assert "connection" not in c.gatewayz()["outbound_gateways"].get("A", {})
