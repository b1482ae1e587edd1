"""The auth callout's messaging: for each client it decides about, an authorization request published to
`$SYS.REQ.USER.AUTH` in the callout account by an internal client of that account, and its answer awaited
on a reply inbox for at most the auth timeout (what is asked and accepted: pynatsd.auth.callout).

Like nats-server, a refusal (or a bad answer) is logged as a warning with its reason, a timeout at debug
level; the client only reads `Authorization Violation`.
"""

from __future__ import annotations

import base64
import hashlib
import os
import ssl
from collections.abc import Callable
from typing import TYPE_CHECKING

from pynatsd.auth.callout import (
    AUTH_CALLOUT_SUBJECT,
    XKEY_HEADER,
    CalloutRefused,
    OperatorCallout,
    ServerIdentity,
    check_response,
    new_user_key,
    request_token,
)
from pynatsd.auth.jwt import MAX_ACCOUNT_CONNECTIONS, JwtError, decode
from pynatsd.auth.nkeys import XKey
from pynatsd.auth.users import Permissions, raw_auth_user
from pynatsd.base.logging import get_logger
from pynatsd.broker.internal import InternalClient
from pynatsd.protocol import errors

if TYPE_CHECKING:
    from pynatsd.base.blocks import AuthCalloutOptions
    from pynatsd.broker.connection import Connection
    from pynatsd.broker.core import Broker
    from pynatsd.protocol.connect import ConnectOptions

log = get_logger()

Done = Callable[[tuple[str, str] | None], None]


def _jwt_user_tags(opts: ConnectOptions, operator: OperatorCallout | None) -> dict[str, object]:
    """A client that came with a user JWT (operator mode): its `tags` and `name_tag` (the JWT's name), as
    nats-server describes it to the service."""
    if operator is None or not opts.jwt:
        return {}
    try:
        user = decode(opts.jwt, "user")  # verified already: the client got this far with it
    except JwtError:
        return {}
    tags = user.nats.get("tags")
    return {"tags": list(tags) if isinstance(tags, list) else [], "name_tag": user.name}


def _client_type(conn: Connection) -> str:
    return "websocket" if conn.is_websocket else "nats"


def _client_tls(conn: Connection, verified: bool) -> dict[str, object] | None:
    """The request's `client_tls` (nats-server's jwt.ClientTLS): version, cipher and the client's certificate
    in PEM, under `verified_chains` when the server verified it, else `certs`. Before Python 3.13 the
    verified chain holds the client's certificate only (the ssl module gives no more)."""
    if not conn.tls_version:
        return None
    tls: dict[str, object] = {"version": conn.tls_version, "cipher": conn.tls_cipher}
    transport = conn.transport
    sslobj = transport.get_extra_info("ssl_object") if transport is not None else None
    der = sslobj.getpeercert(binary_form=True) if sslobj is not None else None
    if not der:
        return tls
    if not verified:
        tls["certs"] = [ssl.DER_cert_to_PEM_cert(der)]
        return tls
    chain_of = getattr(sslobj, "get_verified_chain", None)  # DER certificates, Python 3.13 on
    chain = [ssl.DER_cert_to_PEM_cert(c) for c in chain_of()] if chain_of is not None else []
    tls["verified_chains"] = [chain or [ssl.DER_cert_to_PEM_cert(der)]]
    return tls


class AuthCallout:
    """The broker's `callout` hook (pynatsd.broker.core.CalloutHooks)."""

    def __init__(self, server: Broker, config: AuthCalloutOptions | None) -> None:
        """`config`: the `auth_callout` block; None in operator mode (the account JWTs delegate)."""
        self.server = server
        self.config = config
        # The server's xkey, made once; only used (and shown) with a service that has one.
        self.xkey = XKey()
        self._clients: dict[str, InternalClient] = {}
        # What it granted each user it admitted (user key -> grant), while connected. The callout outlives
        # reloads, so the dict is its own: every authenticator (the server's, after a reload too, and a
        # WebSocket listener's) looks grants up in this one.
        self.grants = server.auth.callout_grants
        # nats-server's reply inboxes: `$SYS._INBOX.<hash of the server name>.<8 random characters>`
        name_hash = base64.urlsafe_b64encode(hashlib.sha256(server.server_name.encode()).digest())[:8]
        self._inbox = b"$SYS._INBOX." + name_hash + b"."
        auth = server.auth
        if config is None:
            return
        if config.account not in auth.accounts:
            log.error('Authorization callout account "%s" not valid', config.account)
        known = set(auth.users) | set(auth.nkeys)
        for user in config.auth_users:
            if user not in known:
                log.error('Authorization callout user "%s" not valid: <nil>', user)

    def _identity(self) -> ServerIdentity:
        server = self.server
        info = server.info_base()
        cluster = server.cluster.name if server.cluster is not None else ""
        host, version = str(info.get("host", "")), str(info.get("version", ""))
        return ServerIdentity(
            server.server_id, server.server_seed, server.server_name, host, version, cluster
        )

    def _client(self, account: str) -> InternalClient:
        client = self._clients.get(account)
        if client is None or client.closed:
            client = self._clients[account] = InternalClient(self.server, account, "auth callout")
        return client

    def _accounts(self) -> dict[str, Permissions | None]:
        """Where an admitted user may go, with each account's default permissions."""
        auth = self.server.auth
        configured = self.server.options.accounts
        accounts: dict[str, Permissions | None] = {}
        for name in auth.accounts:
            spec = configured[name].default_permissions if name in configured else None
            accounts[name] = Permissions(spec) if spec else None
        return accounts

    def authorize(
        self, conn: Connection, opts: ConnectOptions, identity: tuple[str, str] | None, done: Done
    ) -> None:
        """Ask the service about `conn` (`identity`: what the configured users or its JWT made of it)."""
        auth = conn.authenticator()
        config = self.config
        operator: OperatorCallout | None = None
        if auth.jwt is not None:  # operator mode: the client's account delegates its users
            acc = auth.jwt.account(identity[1]) if identity is not None else None
            external = acc.external_auth if acc is not None else None
            if acc is None or external is None:
                log.warning("Client not mapped to a callout account")
                done(None)
                return
            account = issuer = acc.name
            service_xkey = str(external["xkey"])
            operator = OperatorCallout(acc, auth.jwt.account)
        else:
            assert config is not None
            account, issuer, service_xkey = config.account, config.issuer, config.xkey
            if account not in auth.accounts:
                log.warning('No valid account "%s" for auth callout request: account missing', account)
                done(None)
                return
        user_key = new_user_key()
        timeout = self.server.options.effective_auth_timeout
        client_info: dict[str, object] = {"host": conn.ip, "id": conn.cid,
                                          "user": raw_auth_user(opts, identity), "name": opts.name,
                                          **_jwt_user_tags(opts, operator), "kind": "Client",
                                          "type": _client_type(conn)}  # fmt: skip
        if opts.sig:
            client_info["nonce"] = conn.nonce
        xkey = self.xkey if service_xkey else None
        verified = self.server.options.tls_verify and not conn.is_websocket
        token = request_token(self._identity(), issuer, user_key, client_info, opts,
                              xkey.public if xkey is not None else "", timeout,
                              _client_tls(conn, verified))  # fmt: skip
        payload, headers = token.encode(), None
        if xkey is not None:
            payload = xkey.seal(payload, service_xkey)
            headers = f"NATS/1.0\r\n{XKEY_HEADER}: {xkey.public}\r\n\r\n".encode()
        client = self._client(account)
        reply = self._inbox + base64.urlsafe_b64encode(os.urandom(6))
        loop = self.server.loop
        finished = False

        def finish() -> bool:
            nonlocal finished
            if finished:
                return False
            finished = True
            timer.cancel()
            client.unsubscribe(sub)
            return True

        def on_answer(subject: bytes, _reply: bytes | None, _headers: bytes | None, answer: bytes) -> None:
            if not finish():
                return
            try:
                identity = self._admit(conn, answer, user_key, (account, issuer, service_xkey), operator)
            except Exception as exc:  # an answer nothing above foresaw: refused, never left waiting
                log.error('Auth callout response on account "%s" not usable: %s', account, type(exc).__name__)
                identity = None
            done(identity)

        def on_timeout() -> None:
            if not finish():
                return
            log.debug('Authorization callout response not received in time on account "%s"', account)
            done(None)

        sub = client.subscribe(reply, on_answer)
        timer = loop.call_later(timeout, on_timeout)
        client.publish(AUTH_CALLOUT_SUBJECT, reply, headers, payload)

    def _admit(
        self,
        conn: Connection,
        answer: bytes,
        user_key: str,
        callout: tuple[str, str, str],
        operator: OperatorCallout | None,
    ) -> tuple[str, str] | None:
        """The identity the answer gives the client (its grant recorded), or None (the reason logged);
        `callout`: the callout account, the issuer the answers need and the service's xkey."""
        account, issuer, service_xkey = callout
        try:
            admission = check_response(answer, user_key=user_key, server_id=self.server.server_id,
                                       account=account, issuer=issuer,
                                       server_xkey=self.xkey if service_xkey else None,
                                       service_xkey=service_xkey,
                                       accounts=self._accounts() if operator is None else {},
                                       operator=operator)  # fmt: skip
        except CalloutRefused as err:
            log.warning("%s", err)
            return None
        types = admission.connection_types
        if types is not None and conn.connection_type not in types:
            log.warning("Could not register auth callout user: authentication error")
            return None
        target = operator.lookup(admission.account) if operator is not None else None
        if target is not None and 0 <= target.connections <= conn.account_connections(target.name):
            # As nats-server: admitted, then refused by the account with a text of its own.
            log.warning("Could not register auth callout user: maximum account active connections exceeded")
            conn.close(MAX_ACCOUNT_CONNECTIONS, errors.MAX_ACCOUNT_CONNECTIONS)
            return None
        if conn.closed:
            return None
        # A CONNECT again: the grant of the user key the connection had goes with it (one per connection).
        self.grants.pop(conn.user, None)
        self.grants[user_key] = admission.grant
        return user_key, admission.account

    def admitted(self, conn: Connection, callout_account: str) -> None:
        """In the callout account, only the server may send authorization requests (nats-server denies
        every client there, its service included, publishing to the subject). `callout_account`: the
        client's account before the callout (operator mode's callout account)."""
        if self.config is not None:
            callout_account = self.config.account
        if conn.account != callout_account:
            return
        jwt_auth = conn.authenticator().jwt
        if jwt_auth is not None:
            acc = jwt_auth.account(callout_account)
            if acc is None or acc.external_auth is None:
                return
        if conn.perms is None:
            conn.perms = Permissions({})  # nothing restricted but this
        conn.perms.deny_publish(AUTH_CALLOUT_SUBJECT)

    def forget(self, conn: Connection) -> None:
        self.grants.pop(conn.user, None)

    def stop(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()
