"""Event ids (NUIDs): nats-server's shape, distinct, also across a renewal of the prefix."""

from __future__ import annotations

import re

from pynatsd.base.ids import Nuid, event_id

_NUID = re.compile(r"[0-9A-Za-z]{22}")


def test_event_ids_are_distinct_nuids() -> None:
    ids = [event_id() for _ in range(10_000)]
    assert all(_NUID.fullmatch(i) for i in ids)
    assert len(set(ids)) == len(ids)


def test_nuid_renews_its_prefix_when_the_sequence_runs_out() -> None:
    nuid = Nuid()
    first = nuid.next()
    nuid._seq = Nuid._MAX_SEQ - 1  # the next step passes the end
    renewed = nuid.next()
    assert _NUID.fullmatch(renewed) and renewed[:12] != first[:12]
