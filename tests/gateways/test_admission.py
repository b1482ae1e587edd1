"""Who may connect over a gateway: `authorization` and `reject_unknown_cluster`, on a receiving cluster
of either kind, dialed by the other kind; the all-nats-server rows are the reference."""

from __future__ import annotations

import time

import pytest

from tests.gateways.conftest import Member, Supercluster

PAIRS = [("pynatsd", "nats-server"), ("nats-server", "pynatsd"), ("nats-server", "nats-server")]
AUTH = "authorization { user: gw, password: s3cret, timeout: 1 }"


def _wait_logged(member: Member, text: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while member.process is None or text.lower() not in member.process.log().lower():
        if time.monotonic() > deadline:
            log = member.process.log() if member.process else ""
            raise AssertionError(f"{member.kind} never logged {text!r}:\n{log[-3000:]}")
        time.sleep(0.1)


@pytest.mark.parametrize(("receiver", "dialer"), PAIRS)
def test_authorized_gateway_connects(receiver: str, dialer: str) -> None:
    sc = Supercluster(
        {"A": [receiver], "B": [dialer]},
        gateway_block={"A": AUTH, "B": AUTH},
        credentials={"A": "gw:s3cret", "B": "gw:s3cret"},
    )
    try:
        assert sc["A"][0].gatewayz()["inbound_gateways"]["B"][0]["connection"]
    finally:
        sc.close()


@pytest.mark.parametrize(("receiver", "dialer"), PAIRS)
def test_wrong_password_is_refused(receiver: str, dialer: str) -> None:
    sc = Supercluster(
        {"A": [receiver], "B": [dialer]},
        gateway_block={"A": AUTH},
        credentials={"A": "gw:wrong"},
        connected=False,
    )
    try:
        _wait_logged(sc["B"][0], "Authorization Violation")
        assert "B" not in sc["A"][0].gatewayz()["inbound_gateways"]
    finally:
        sc.close()


@pytest.mark.parametrize(("receiver", "dialer"), PAIRS)
def test_unknown_cluster_is_rejected(receiver: str, dialer: str) -> None:
    """A names no other cluster and rejects unknown ones: B, dialing it, is told so."""
    sc = Supercluster(
        {"A": [receiver], "B": [dialer]},
        gateway_block={"A": "reject_unknown_cluster: true"},
        connected=False,
        silent=("A",),
    )
    try:
        _wait_logged(sc["B"][0], 'Connection to gateway "A" rejected')
        assert "B" not in sc["A"][0].gatewayz()["inbound_gateways"]
    finally:
        sc.close()
