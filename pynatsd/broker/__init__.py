"""pynatsd's asyncio layer: server, client connections, delivery policy, outbound queues, auth, TLS."""
