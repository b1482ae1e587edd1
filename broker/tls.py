"""TLS contexts for the client port (and the https monitoring port) built from Options."""

from __future__ import annotations

import ssl

from broker.options import Options


def server_context(options: Options) -> ssl.SSLContext | None:
    """The server-side SSLContext for `options`, or None when TLS is off.

    `tls_verify` requires and verifies client certificates against `tls_ca_cert` (mutual TLS).
    """
    if not (options.tls or options.tls_cert):
        return None
    if not options.tls_cert or not options.tls_key:
        raise ValueError("TLS requires both a certificate and a key (tls_cert/tls_key)")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(options.tls_cert, options.tls_key)
    if options.tls_ca_cert:
        ctx.load_verify_locations(options.tls_ca_cert)
    if options.tls_verify:
        if not options.tls_ca_cert:
            raise ValueError("tls_verify needs a CA certificate (tls_ca_cert) to check clients against")
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx
