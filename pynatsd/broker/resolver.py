"""The `full` account resolver's $SYS services: account JWT updates pushed over NATS and lookups.

In the system account, as nats-server's DirAccResolver: `$SYS.REQ.CLAIMS.UPDATE` (the JWT in the
payload, as `nsc push` sends it), `$SYS.REQ.ACCOUNT.<account>.CLAIMS.UPDATE` and the older
`$SYS.ACCOUNT.<account>.CLAIMS.UPDATE` store a verified account JWT in the directory and apply it to
the account's live connections (revoked users are closed, permissions follow);
`$SYS.REQ.ACCOUNT.<account>.CLAIMS.LOOKUP` answers with the stored JWT (empty when unknown).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pynatsd.broker import jwt
from pynatsd.broker.internal import InternalClient
from pynatsd.broker.logging import get_logger

if TYPE_CHECKING:
    from pynatsd.broker.server import Server

log = get_logger()

_UPDATE_SUBJECTS = (b"$SYS.REQ.ACCOUNT.*.CLAIMS.UPDATE", b"$SYS.ACCOUNT.*.CLAIMS.UPDATE")
_CLAIMS_UPDATE = b"$SYS.REQ.CLAIMS.UPDATE"
_LOOKUP = b"$SYS.REQ.ACCOUNT.*.CLAIMS.LOOKUP"
_HTTP_OK, _HTTP_ERROR = 200, 500


class ResolverService:
    """Subscribes the resolver's requests in the system account (see the module docstring)."""

    def __init__(self, server: Server, system_account: str) -> None:
        self.server = server
        self.client = InternalClient(server, system_account, "resolver")
        self._seq = 0

    def start(self) -> None:
        for subject in _UPDATE_SUBJECTS:
            self.client.subscribe(subject, self._on_account_update)
        self.client.subscribe(_CLAIMS_UPDATE, self._on_claims_update)
        self.client.subscribe(_LOOKUP, self._on_lookup)

    def stop(self) -> None:
        self.client.close()

    def _on_account_update(
        self, subject: bytes, reply: bytes | None, headers: bytes | None, payload: bytes
    ) -> None:
        tokens = subject.decode().split(".")
        # $SYS.REQ.ACCOUNT.<acc>.CLAIMS.UPDATE or $SYS.ACCOUNT.<acc>.CLAIMS.UPDATE
        self._update(reply, payload, tokens[3] if len(tokens) == 6 else tokens[2])

    def _on_claims_update(
        self, subject: bytes, reply: bytes | None, headers: bytes | None, payload: bytes
    ) -> None:
        self._update(reply, payload, None)

    def _update(self, reply: bytes | None, payload: bytes, expected: str | None) -> None:
        """Verify and store one account JWT, then apply it to the account's connections."""
        auth = self.server.auth.jwt
        if auth is None or auth.store is None:  # a reload left operator mode or the directory resolver
            return
        token = payload.decode(errors="replace").strip()
        try:
            claims = jwt.decode(token, "account")
        except jwt.JwtError as err:
            self._respond(reply, "n/a", "jwt update resulted in error", str(err))
            return
        name = claims.subject
        if expected is not None and name != expected:
            self._respond(
                reply, expected, "jwt update resulted in error", "subject does not match jwt content"
            )
            return
        if claims.issuer in auth.strict_operators:
            self._respond(
                reply, name, "jwt update resulted in error", "operator requires issuer to be a signing key"
            )
            return
        try:
            auth.store.save(name, token)
        except (OSError, jwt.JwtError) as err:
            self._respond(reply, name, "jwt update resulted in error", str(err))
            return
        self._respond(reply, name, "jwt updated", None)
        self._apply(name)

    def _apply(self, account: str) -> None:
        """The account's live connections checked again against the new JWT (nats-server's
        updateAccountClaims): revoked users are closed, the others get its permissions."""
        auth = self.server.auth
        for conn in list(self.server.clients.values()):
            if conn.account == account and conn.authenticator() is auth:
                conn.revalidate(auth, auth)
        if self.server.links is not None:  # its imports, and the imports of its exports
            self.server.links.refresh(account)

    def _on_lookup(self, subject: bytes, reply: bytes | None, headers: bytes | None, payload: bytes) -> None:
        auth = self.server.auth.jwt
        if reply is None or auth is None or auth.store is None:
            return
        tokens = subject.decode().split(".")
        if len(tokens) != 6:
            return
        token = auth.store.load(tokens[3])
        self.client.publish(reply, None, None, token.encode() if token else b"")

    def _respond(self, reply: bytes | None, account: str, message: str, error: str | None) -> None:
        """nats-server's respondToUpdate: `data` on success, `error` (code 500) otherwise."""
        if error is None:
            log.debug("%s - %s", message, account)
        else:
            log.error("%s - %s - %s", message, account, error)
        if reply is None:
            return
        body: dict[str, Any] = {"server": self._server_info()}
        if error is None:
            body["data"] = {"account": account, "code": _HTTP_OK, "message": message}
        else:
            body["error"] = {"account": account, "code": _HTTP_ERROR, "description": f"{message} - {error}"}
        self.client.publish(reply, None, None, json.dumps(body).encode())

    def _server_info(self) -> dict[str, Any]:
        info = self.server.info_base()
        self._seq += 1
        return {
            "name": info.get("server_name", ""),
            "host": info.get("host", ""),
            "id": info.get("server_id", ""),
            "ver": info.get("version", ""),
            "jetstream": bool(info.get("jetstream")),
            "flags": 0,
            "seq": self._seq,
            "time": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
        }
