"""Gossip: a cluster that names one gateway learns the others (nats-server's full mesh of gateways),
with the newcomer and the cluster it names of either kind; the all-nats-server row is the reference."""

from __future__ import annotations

import nats
import pytest

from tests.gateways.conftest import Supercluster

MIXES = {
    "pynatsd-newcomer": {"A": ["nats-server"], "B": ["nats-server"], "C": ["pynatsd"]},
    "pynatsd-named": {"A": ["pynatsd"], "B": ["nats-server"], "C": ["nats-server"]},
    "pynatsd-told": {"A": ["nats-server"], "B": ["pynatsd"], "C": ["nats-server"]},
    "reference": {"A": ["nats-server"], "B": ["nats-server"], "C": ["nats-server"]},
}


@pytest.mark.parametrize("mix", list(MIXES))
async def test_newcomer_learns_every_gateway(mix: str) -> None:
    """C names only A; A tells C of B; C connects to B and B back to C; then C's messages reach B."""
    sc = Supercluster(MIXES[mix], names={"C": ["A"]})  # waits until every pair is connected
    try:
        outbound = sc["C"][0].gatewayz()["outbound_gateways"]
        assert outbound["A"]["configured"] is True
        assert outbound["B"]["configured"] is False  # learned through gossip
        nc_b = await nats.connect(sc["B"][0].url)
        nc_c = await nats.connect(sc["C"][0].url)
        try:
            sub = await nc_b.subscribe("to.b")
            await nc_b.flush()
            sc.wait_interest(sc["C"][0], "B", "to.b")
            await nc_c.publish("to.b", b"hi")
            await nc_c.flush()
            assert (await sub.next_msg(timeout=5)).data == b"hi"
        finally:
            await nc_b.close()
            await nc_c.close()
    finally:
        sc.close()
