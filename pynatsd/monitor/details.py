"""A subscription as nats-server's monitoring shows it (connz, routez, subsz)."""

from __future__ import annotations

from typing import Any

from pynatsd.broker.delivery import max_msgs, sid_bytes


def subscription_detail(sub: Any, cid: int, account: str | None = None) -> dict[str, Any]:
    """One subscription as nats-server's SubDetail: under a connection or route (`cid`: its id), or in
    /subsz with its `account`."""
    detail: dict[str, Any] = {}
    if account is not None:
        detail["account"] = account
        detail["account_tag"] = account
    detail["subject"] = sub.subject.decode("utf-8", "replace")
    if sub.queue:
        detail["qgroup"] = sub.queue.decode("utf-8", "replace")
    detail["sid"] = sid_bytes(sub).decode("utf-8", "replace")
    detail["msgs"] = sub.delivered
    limit = max_msgs(sub)
    if limit:
        detail["max"] = limit
    detail["cid"] = cid
    return detail
