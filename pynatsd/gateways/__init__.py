"""Gateways: clusters joined into a supercluster, over nats-server 2.15's gateway protocol.

Layout: `pynatsd.config.gateway` (the `gateway {}` block, as `GatewayOptions`), `connection` (one gateway
connection, outbound or inbound: a route connection speaking the gateway dialect), `manager` (the gateway
listener, the outbound connections with retry, our cluster's interest, gossip over the routes).

Interface for monitoring (stable): `Node.gateway_manager` -> `GatewayManager | None`, with `name`,
`options` (`GatewayOptions`), `url`, `urls`, `outbound: dict[str, Gateway]` (remote gateway name -> the
connection), `inbound: dict[int, Gateway]`. A `Gateway` has the `Route` fields (`rid`, `remote_id`,
`host`, `port`, `start`, `last_activity`, `rtt`, `in_msgs`, `out_msgs`, `in_bytes`, `out_bytes`,
`pending_bytes`) and `name` (the remote gateway), `outbound`, `accounts` (outbound: the remote's interest
per account, its `mode`: Optimistic, Transitioning or Interest-Only), `interest_count()`.
"""

from pynatsd.config.gateway import gateway_options

__all__ = ["gateway_options"]
