"""The directory account resolvers' $SYS services (`full` and `cache`): account JWT updates pushed over
NATS, lookups, lists and deletes.

In the system account, as nats-server's DirAccResolver: `$SYS.REQ.CLAIMS.UPDATE` (the JWT in the
payload, as `nsc push` sends it), `$SYS.REQ.ACCOUNT.<account>.CLAIMS.UPDATE` and the older
`$SYS.ACCOUNT.<account>.CLAIMS.UPDATE` store a verified account JWT in the directory and apply it to
the account's live connections (revoked users are closed, permissions follow);
`$SYS.REQ.ACCOUNT.<account>.CLAIMS.LOOKUP` answers with the stored JWT (empty when unknown);
`$SYS.REQ.CLAIMS.LIST` with the stored account ids; `$SYS.REQ.CLAIMS.DELETE` (a JWT by the operator,
issued to itself, listing `accounts`) deletes them with `allow_delete` and expires their connections.
A `cache` resolver (CacheDirAccResolver) takes updates for accounts in use only, answers no lookups,
deletes for good (no `allow_delete` needed) and forgets files older than its `ttl`.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pynatsd.auth import jwt
from pynatsd.auth.nkeys import valid_public_nkey
from pynatsd.base.logging import get_logger
from pynatsd.broker.connection import AUTHENTICATION_EXPIRED
from pynatsd.broker.internal import InternalClient
from pynatsd.protocol import errors

if TYPE_CHECKING:
    import asyncio

    from pynatsd.broker.core import Broker

log = get_logger()

_UPDATE_SUBJECTS = (b"$SYS.REQ.ACCOUNT.*.CLAIMS.UPDATE", b"$SYS.ACCOUNT.*.CLAIMS.UPDATE")
_CLAIMS_UPDATE = b"$SYS.REQ.CLAIMS.UPDATE"
_LOOKUP = b"$SYS.REQ.ACCOUNT.*.CLAIMS.LOOKUP"
_LIST = b"$SYS.REQ.CLAIMS.LIST"
_DELETE = b"$SYS.REQ.CLAIMS.DELETE"
_HTTP_OK, _HTTP_ERROR = 200, 500
_SWEEP_MAX = 60.0  # a cache's ttl is checked every ttl/2, at most every minute (nats-server)


class ResolverService:
    """Subscribes the resolver's requests in the system account (see the module docstring)."""

    def __init__(self, server: Broker, system_account: str, cache: bool = False) -> None:
        self.server = server
        self.client = InternalClient(server, system_account, "resolver")
        self.cache = cache
        self._seq = 0
        self._sweeper: asyncio.TimerHandle | None = None

    def start(self) -> None:
        for subject in _UPDATE_SUBJECTS:
            self.client.subscribe(subject, self._on_account_update)
        self.client.subscribe(_CLAIMS_UPDATE, self._on_claims_update)
        if not self.cache:
            self.client.subscribe(_LOOKUP, self._on_lookup)
        self.client.subscribe(_LIST, self._on_list)
        self.client.subscribe(_DELETE, self._on_delete)
        self._schedule_sweep()

    def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        self.client.close()

    def _schedule_sweep(self) -> None:
        auth = self.server.auth.jwt
        if auth is not None and auth.store is not None and auth.store.ttl > 0:
            every = min(max(auth.store.ttl / 2, 0.1), _SWEEP_MAX)
            self._sweeper = self.server.loop.call_later(every, self._sweep)

    def _sweep(self) -> None:
        self._sweeper = None
        auth = self.server.auth.jwt
        if auth is not None and auth.store is not None:
            auth.store.sweep()
        self._schedule_sweep()

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
        failed = "jwt update cache resulted in error" if self.cache else "jwt update resulted in error"
        token = payload.decode(errors="replace").strip()
        try:
            claims = jwt.decode(token, "account")
        except jwt.JwtError as err:
            self._respond(reply, expected if self.cache and expected else "n/a", failed, str(err))
            return
        name = claims.subject
        if expected is not None and name != expected:
            self._respond(reply, expected, failed, "subject does not match jwt content")
            return
        if claims.issuer in auth.strict_operators:
            self._respond(reply, name, failed, "operator requires issuer to be a signing key")
            return
        if self.cache and not auth.known(name):
            self._respond(reply, name, "jwt update cache skipped", None)  # not in use here: not cached
            return
        try:
            auth.store.save(name, token)
        except (OSError, jwt.JwtError) as err:
            self._respond(reply, name, failed, str(err))
            return
        self._respond(reply, name, "jwt updated cache" if self.cache else "jwt updated", None)
        self._apply(name)

    def _on_list(self, subject: bytes, reply: bytes | None, headers: bytes | None, payload: bytes) -> None:
        """The stored account ids (nats-server's handleListRequest)."""
        auth = self.server.auth.jwt
        if reply is None or auth is None or auth.store is None:
            return
        body = {"server": self._server_info(), "data": auth.store.names()}
        self.client.publish(reply, None, None, json.dumps(body).encode())

    def _on_delete(self, subject: bytes, reply: bytes | None, headers: bytes | None, payload: bytes) -> None:
        """nats-server's handleDeleteRequest: a JWT issued by a trusted operator key to itself, its
        `accounts` deleted from the directory; their connections are expired."""
        auth = self.server.auth.jwt
        if auth is None or auth.store is None:
            return
        requester, problem, accounts = "", "", []
        try:
            claims = jwt.decode_generic(payload.decode(errors="replace").strip())
        except jwt.JwtError as err:
            problem = str(err)
        else:
            requester = claims.subject
            listed = claims.nats.get("accounts")
            if auth.store.delete_mode == jwt.NO_DELETE:
                problem = "delete must be enabled in server config"
            elif claims.subject != claims.issuer:
                problem = "not self signed"
            elif claims.issuer not in auth.trusted:
                problem = "not trusted"
            elif not isinstance(listed, list):
                problem = "malformed request"
            else:
                for entry in listed:
                    if not isinstance(entry, str) or not valid_public_nkey(entry, "A"):
                        problem = "malformed request"
                        break
                    if entry == self.server.auth.system_account:
                        problem = "not allowed to delete system account"
                        break
                accounts = listed
        if problem:
            self._respond(reply, "", f"delete accounts request by {requester} failed", problem)
            return
        failures = []
        for name in accounts:
            try:
                auth.store.delete(name)
            except (OSError, jwt.JwtError) as err:
                failures.append(str(err))
                continue
            self._expire(name)
        done = len(accounts) - len(failures)
        if failures:
            message = f"deleted {done} accounts, failed for {len(failures)}"
            self._respond(reply, "", message, "\n".join(failures))
        else:
            self._respond(reply, "", f"deleted {done} accounts", None)

    def _expire(self, account: str) -> None:
        """A deleted account: its clients are told it expired and closed (nats-server's removeCb)."""
        for conn in list(self.server.clients.values()):
            if conn.account == account and conn.connected:
                conn.close(AUTHENTICATION_EXPIRED, errors.ACCOUNT_AUTHENTICATION_EXPIRED)

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
        """nats-server's respondToUpdate: `data` on success, `error` (code 500) otherwise; an empty
        account is left out."""
        where = f" - {account}" if account else ""
        if error is None:
            log.debug("%s%s", message, where)
        else:
            log.error("%s%s - %s", message, where, error)
        if reply is None:
            return
        body: dict[str, Any] = {"server": self._server_info()}
        named = {"account": account} if account else {}
        if error is None:
            body["data"] = {**named, "code": _HTTP_OK, "message": message}
        else:
            body["error"] = {**named, "code": _HTTP_ERROR, "description": f"{message} - {error}"}
        self.client.publish(reply, None, None, json.dumps(body).encode())

    def _server_info(self) -> dict[str, Any]:
        if self.server.system is not None:  # one sequence for all the system account's messages
            return self.server.system.server_info()
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
