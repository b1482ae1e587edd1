"""The ack reply subjects a mirror or source on another server reads its deliveries' positions from."""

from __future__ import annotations

from pynatsd.jetstream.remote_sourcing import ack_reply_info


def test_both_ack_reply_forms_are_read() -> None:
    # nats-server's 9-token form: stream, consumer, delivery count, stream seq, delivery seq, time, pending
    assert ack_reply_info(b"$JS.ACK.ORIGIN.JS_SRC_x-y.1.7.3.1795789152007639775.12") == (
        b"JS_SRC_x-y",
        7,
        3,
        1,
        1795789152007639775,
        12,
    )
    # the 12-token form: domain and account hash first, a random token last
    assert ack_reply_info(b"$JS.ACK.hub.ACCHASH.ORIGIN.C.2.9.4.100.0.tok") == (b"C", 9, 4, 2, 100, 0)


def test_other_replies_are_not_positions() -> None:
    for reply in (
        b"_INBOX.abc",
        b"$JS.ACK.S.C.1.2.3.4",  # 8 tokens
        b"$JS.ACK.d.h.S.C.1.2.3.4",  # 10 tokens
        b"$JS.ACK.S.C.1.x.3.4.5",
        b"$JS.NAK.S.C.1.2.3.4.5",
    ):
        assert ack_reply_info(reply) is None, reply
