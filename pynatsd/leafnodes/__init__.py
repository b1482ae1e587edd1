"""Leaf nodes: pynatsd at the edge of a NATS system, or as the hub of other servers' leaf nodes, over
nats-server 2.15's leafnode protocol.

Layout: `pynatsd.config.leafnodes` (the `leafnodes {}` block, as `LeafNodeOptions`), `leaf` (one leaf
connection either way round: handshake, interest, messages), `manager` (the leafnode listener, the
remotes with their reconnects, authorization and account binding, the interest each connection is told,
loop detection). Leaf ops are parsed and encoded by `pynatsd.protocol.route` (the route grammar under the
names LS+/LS-/LMSG, no account named). Who receives a message is decided by the one delivery policy
(`pynatsd.broker.delivery`): a leaf connection is a `delivery.Client` whose subscriptions are the other
side's interest in its account (`is_leaf`; `spoke` on a remote's connection to its hub).

Interface for monitoring (stable): `Server.leafnodes` -> list of `LeafConnection`, registered ones, each
with `cid: int`, `account: str` (the local account it is bound to), `remote_id`, `remote_name`,
`remote_cluster`, `remote_account: str`, `spoke: bool`, `remote: LeafRemote | None` (None: accepted),
`url: str`, `host: str`, `port: int`, `start`, `last_activity` (datetime), `rtt: float | None`,
`in_msgs`, `out_msgs`, `in_bytes`, `out_bytes`, `num_subs: int`, `subjects() -> list[str]`.
"""
