"""The broker core (asyncio): the Broker (clients, account sublists, the flush scheduler), client
connections, the delivery policy, outbound queues and the stall gate, internal clients, tracing. It imports
nothing above it (tests/unit/test_layers.py)."""
