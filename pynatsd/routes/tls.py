"""TLS for routes, as nats-server's: mutual TLS, the handshake first (before INFO), each side presenting
its certificate and verifying the other's against the block's CA (the system's without one)."""

from __future__ import annotations

import os
import ssl
from typing import Any


def route_contexts(tls: dict[str, Any]) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(accepting side, soliciting side) contexts for a route `tls {}` block; ValueError when its files
    cannot be used."""
    cert, key, ca = tls["cert_file"], tls["key_file"], tls.get("ca_file", "")
    for path in (cert, key, ca):
        if path and not os.path.exists(path):  # nats-server's wording, with the path
            raise ValueError(
                f"error parsing X509 certificate/key pair: open {path}: no such file or directory"
            )
    contexts = (ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT))
    for ctx, purpose in zip(contexts, (ssl.Purpose.CLIENT_AUTH, ssl.Purpose.SERVER_AUTH), strict=True):
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            ctx.load_cert_chain(cert, key)
            if ca:
                ctx.load_verify_locations(ca)
            else:
                ctx.load_default_certs(purpose)
        except ssl.SSLError as exc:
            raise ValueError(f"error parsing X509 certificate/key pair: {exc.reason or exc}") from None
        ctx.verify_mode = ssl.CERT_REQUIRED  # routes always verify their peer
    return contexts
