"""Client authentication for the simple mechanisms of the command line: one user/password or a token.

`Authenticator.authenticate` returns the client's identity `(user, account)` or None (a violation).
Secrets are compared in constant time.
"""

from __future__ import annotations

import hmac
from typing import TYPE_CHECKING

from broker.options import Options
from protocol.connect import ConnectOptions

if TYPE_CHECKING:
    from broker.connection import Connection

DEFAULT_ACCOUNT = "$G"


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())


class Authenticator:
    """Checks CONNECT credentials against the configured user/password or token."""

    def __init__(self, options: Options) -> None:
        self.username = options.username
        self.password = options.password
        self.token = options.authorization

    @property
    def required(self) -> bool:
        return bool(self.username or self.token)

    def authenticate(self, conn: Connection, opts: ConnectOptions) -> tuple[str, str] | None:
        if self.token:
            return ("", DEFAULT_ACCOUNT) if _same(opts.auth_token, self.token) else None
        if self.username:
            ok = _same(opts.user, self.username) & _same(opts.password, self.password)
            return (opts.user, DEFAULT_ACCOUNT) if ok else None
        return ("", DEFAULT_ACCOUNT)
