"""The base layer: typed options, values and formats, logging, listeners, TLS, ids, hashes."""
