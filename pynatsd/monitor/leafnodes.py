"""The leaf nodes' part of monitoring: /leafz and /varz's `leaf` block, with nats-server's field names and
order (its `Leafz`, `LeafInfo`, `LeafNodeOptsVarz`). Reads the interface documented in pynatsd.leafnodes
(`Node.leafnodes`, `Options.leafnodes`)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from pynatsd.base.formats import go_duration, rfc3339nano
from pynatsd.monitor.cluster import link_timeouts

if TYPE_CHECKING:
    from pynatsd.leafnodes.leaf import LeafConnection
    from pynatsd.node import Node


def leafz(server: Node, now: datetime, subs: bool, account: str) -> dict[str, Any]:
    """/leafz: the registered leaf node connections (`account`: only those bound to it)."""
    leafs = [leaf_info(leaf, subs) for leaf in server.leafnodes if not account or leaf.account == account]
    return {"server_id": server.server_id, "now": rfc3339nano(now), "leafnodes": len(leafs), "leafs": leafs}


def leaf_info(leaf: LeafConnection, subs: bool) -> dict[str, Any]:
    info: dict[str, Any] = {
        "id": leaf.cid,
        "name": leaf.remote_name,
        "is_spoke": leaf.spoke,
        "account": leaf.account,
        "ip": leaf.host,
        "port": leaf.port,
        "rtt": go_duration(round(leaf.rtt, 6)) if leaf.rtt is not None else "0s",
        "in_msgs": leaf.in_msgs,
        "out_msgs": leaf.out_msgs,
        "in_bytes": leaf.in_bytes,
        "out_bytes": leaf.out_bytes,
        "subscriptions": leaf.num_subs,
    }
    if subs and leaf.num_subs:
        info["subscriptions_list"] = [subject.partition(" ")[0] for subject in leaf.subjects()]
    info["compression"] = "not supported"  # pynatsd neither asks for nor accepts compression
    return info


def varz_leaf(server: Node) -> dict[str, Any]:
    """/varz `leaf`: empty without a `leafnodes {}` block."""
    options = server.options.leafnodes
    if options is None:
        return {}
    block: dict[str, Any] = {}
    manager = server.leaf_manager
    port = manager.options.port if manager is not None else options.port
    if port:  # the listener's settings (a leaf without one shows its remotes only)
        block["host"] = options.host
        block["port"] = port
        block["auth_timeout"], block["tls_timeout"] = link_timeouts(options.tls, options.auth_timeout)
    remotes: list[dict[str, Any]] = []
    for remote in options.remotes:
        entry: dict[str, Any] = {"local_account": remote.account or "$G"}
        entry["urls"] = [urlsplit(u).netloc.rpartition("@")[2] for u in remote.urls]
        if remote.deny_imports or remote.deny_exports:
            deny: dict[str, Any] = {}
            if remote.deny_exports:
                deny["exports"] = remote.deny_exports
            if remote.deny_imports:
                deny["imports"] = remote.deny_imports
            entry["deny"] = deny
        remotes.append(entry)
    if remotes:
        block["remotes"] = remotes
    return block
