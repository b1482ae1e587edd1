"""The config-file parser and its schema, one module per block (cluster, websocket, jetstream)."""
