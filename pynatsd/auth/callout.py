"""Auth callout, the checks of nats-server's auth_callout.go: what the server asks an external
authorization service, and what it accepts back.

For a client that is not one of the `auth_users`, the server signs an authorization request JWT with its
own key (its id is the public half), for a fresh user nkey it makes up, and publishes it to
`$SYS.REQ.USER.AUTH` in the callout account (sealed for the service's `xkey` when one is configured, the
server's own xkey in the `Nats-Server-Xkey` header). The service answers with an authorization response
JWT signed by the `issuer` account key, carrying a user JWT for that nkey (signed by the issuer too, its
audience the account the user goes to) or an error. The user JWT's permissions and expiry apply to the
connection. In operator mode an account JWT's `authorization` delegates the account's users the same way (the
account is the callout account and the issuer; see `OperatorCallout`). pynatsd.broker.callout sends the
request and waits for the answer.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pynatsd.auth.jwt import (
    Account,
    Claims,
    JwtError,
    UserGrant,
    connection_types,
    decode,
    payload_of,
    permissions_from_jwt,
    time_window,
)
from pynatsd.auth.jwt import _scoped as scoped_permissions
from pynatsd.auth.nkeys import XKey, XKeyError, encode_public, valid_public_nkey
from pynatsd.auth.users import Permissions
from pynatsd.protocol import errors
from pynatsd.protocol.connect import ConnectOptions

AUTH_CALLOUT_SUBJECT = b"$SYS.REQ.USER.AUTH"
XKEY_HEADER = "Nats-Server-Xkey"
REQUEST_AUDIENCE = "nats-authorization-request"
_USER_PREFIX = 20 << 3  # nkeys PrefixByteUser: "U..."
_JWT_PREFIX = b"eyJ"  # a JWT's header, base64url of `{"`: anything else is a sealed answer


class CalloutRefused(Exception):
    """The service refused the client, or its answer is not acceptable: the text nats-server logs."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def new_user_key() -> str:
    """The public nkey the answer must be for (a fresh one per request: an answer cannot be replayed)."""
    return encode_public(_USER_PREFIX, os.urandom(32))


def encode_jwt(claims: dict[str, Any], seed: bytes) -> str:
    """A v2 JWT of `claims` signed with the ed25519 `seed`; its `jti` the hash of the claims, as the jwt
    library makes it."""
    from nacl.signing import SigningKey  # comes with `nkeys`

    body = dict(claims)
    body["jti"] = ""
    digest = hashlib.new("sha512_256", json.dumps(body, separators=(",", ":")).encode()).digest()
    body["jti"] = base64.b32encode(digest).decode().rstrip("=")
    head = _b64(b'{"typ":"JWT","alg":"ed25519-nkey"}')
    signed = f"{head}.{_b64(json.dumps(body, separators=(',', ':')).encode())}"
    return f"{signed}.{_b64(SigningKey(seed).sign(signed.encode()).signature)}"


@dataclass(frozen=True)
class ServerIdentity:
    """Who signs the requests: the server's id (a public nkey), its seed and what the request tells of it."""

    id: str
    seed: bytes
    name: str
    host: str
    version: str
    cluster: str = ""
    tags: tuple[str, ...] = ()


def request_token(
    server: ServerIdentity,
    issuer: str,
    user_key: str,
    client_info: dict[str, Any],
    opts: ConnectOptions,
    xkey: str,
    timeout: float,
    client_tls: dict[str, Any] | None = None,
) -> str:
    """The signed authorization request (the jwt library's AuthorizationRequestClaims)."""
    server_id: dict[str, Any] = {"name": server.name, "host": server.host, "id": server.id}
    if server.version:
        server_id["version"] = server.version
    if server.cluster:
        server_id["cluster"] = server.cluster
    if server.tags:
        server_id["tags"] = list(server.tags)
    if xkey:
        server_id["xkey"] = xkey
    connect = {"jwt": opts.jwt, "nkey": opts.nkey, "sig": opts.sig, "auth_token": opts.auth_token,
               "user": opts.user, "pass": opts.password, "name": opts.name, "lang": opts.lang,
               "version": opts.version}  # fmt: skip
    connect_opts: dict[str, Any] = {k: v for k, v in connect.items() if v}
    connect_opts["protocol"] = opts.protocol
    now = int(time.time())
    request: dict[str, Any] = {"server_id": server_id, "user_nkey": user_key,
               "client_info": {k: v for k, v in client_info.items() if v}, "connect_opts": connect_opts,
               "type": "authorization_request", "version": 2}  # fmt: skip
    if client_tls is not None:
        request["client_tls"] = client_tls
    claims = {"aud": REQUEST_AUDIENCE, "exp": int(now + timeout), "iat": now, "iss": server.id,
              "sub": issuer, "nats": request}  # fmt: skip
    return encode_jwt(claims, server.seed)


@dataclass(frozen=True)
class Admission:
    """An accepted answer: the account the user goes to and what it gets there."""

    account: str
    grant: UserGrant
    connection_types: frozenset[str] | None  # None: any


def _validation_problem(token: str, claims_nats: dict[str, Any], expires_problem: str) -> str:
    """The first of the jwt library's AuthorizationResponseClaims.Validate issues, or ""."""
    payload = payload_of(token)
    audience = payload.get("aud")
    if not isinstance(audience, str) or not valid_public_nkey(audience, "N"):
        return "Audience must be a server public key"
    has_error, has_jwt = bool(claims_nats.get("error")), bool(claims_nats.get("jwt"))
    if not has_error and not has_jwt:
        return "Error or Jwt is required"
    if has_error and has_jwt:
        return "Only Error or Jwt can be set"
    issuer_account = claims_nats.get("issuer_account")
    if issuer_account and not (isinstance(issuer_account, str) and valid_public_nkey(issuer_account, "A")):
        return "issuer_account is not an account public key"
    return expires_problem


@dataclass(frozen=True)
class OperatorCallout:
    """Operator mode: the callout account (the client's, its JWT delegating its users) and the resolver's
    accounts, where an admitted user may go."""

    account: Account
    lookup: Callable[[str], Account | None]


def _capitalized(err: Exception) -> str:
    text = str(err)
    return text[:1].upper() + text[1:]


def check_response(
    payload: bytes,
    *,
    user_key: str,
    server_id: str,
    account: str,
    issuer: str,
    server_xkey: XKey | None,
    service_xkey: str,
    accounts: dict[str, Permissions | None],
    operator: OperatorCallout | None = None,
) -> Admission:
    """nats-server's checks of an answer to the request for `user_key` sent in the callout `account`, in its
    order; `accounts` maps the accounts a user may go to to their default permissions (config mode; in
    operator mode, `operator` tells). Raises CalloutRefused with nats-server's log text."""
    if not payload:
        raise CalloutRefused(f'Auth callout violation: "no reason supplied" on account "{account}"')
    encrypted = False
    if server_xkey is not None and not payload.startswith(_JWT_PREFIX):
        try:
            payload = server_xkey.open(payload, service_xkey)
        except XKeyError as err:
            raise CalloutRefused(
                f'Error decrypting auth callout response on account "{account}": {err}'
            ) from None
        encrypted = True
    token = payload.decode(errors="replace")
    try:
        response = decode(token, "authorization_response")
    except JwtError as err:
        raise CalloutRefused(_capitalized(err)) from None
    problem = _validation_problem(token, response.nats, response.time_problem())
    if problem:
        raise CalloutRefused(f"Authorization response had validation errors: {problem}")
    if response.subject != user_key:
        raise CalloutRefused("Auth callout violation: auth callout response is not for expected user")
    if payload_of(token).get("aud") != server_id:
        raise CalloutRefused("Auth callout violation: auth callout response is not for server")
    if response.nats.get("error"):
        raise CalloutRefused(f"Auth callout service returned an error: {response.nats['error']}")
    if operator is not None and not encrypted:
        signer = str(response.nats.get("issuer_account") or response.issuer)
        if signer != account and signer not in operator.account.signing_keys:
            raise CalloutRefused("Auth callout signing key is unknown")
    user_token = str(response.nats.get("jwt"))
    try:
        user = decode(user_token, "user")
    except JwtError as err:
        raise CalloutRefused(_capitalized(err)) from None
    nats = user.nats
    if nats.get("proxy_required"):  # pynatsd has no trusted proxies
        raise CalloutRefused("Proxy connection required")
    if user.time_problem():
        raise CalloutRefused(f"Error validating user JWT: {user.time_problem()}")
    if user.subject != user_key:
        raise CalloutRefused(
            f'Expected authorized user of "{user_key}" but got "{user.subject}" on account "{account}"'
        )
    allowed, window = time_window(nats.get("times") or [], str(nats.get("times_location") or ""))
    if not allowed:
        raise CalloutRefused(f'Authorized user on account "{account}" outside of valid connect times')
    raw_types = nats.get("allowed_connection_types") or []
    types = connection_types(raw_types)
    if raw_types and not types:
        raise CalloutRefused(f'Authorized user on account "{account}" using invalid connection type')
    expires = float(user.expires - time.time()) if user.expires else 0.0
    if window and (not expires or window < expires):
        expires = window
    if operator is not None:
        return _operator_admission(user, account, operator, max(expires, 0.0), types)
    if nats.get("issuer_account"):
        raise CalloutRefused(f'Error non operator mode account "{account}": attempted to use issuer_account')
    if user.issuer != issuer:
        raise CalloutRefused(
            f'Wrong issuer for auth callout response on account "{account}", expected "{issuer}" got '
            f'"{user.issuer}"'
        )
    placement = payload_of(user_token).get("aud")
    if not isinstance(placement, str) or placement not in accounts:
        raise CalloutRefused(
            f'No valid account "{placement or ""}" for auth callout response on account "{account}": '
            "account missing"
        )
    perms = permissions_from_jwt(nats)
    if perms is None:
        defaults = accounts[placement]
        perms = defaults.copy() if defaults is not None else None
    # As nats-server, the user JWT's subs/data/payload limits are not applied to a callout user.
    grant = UserGrant(perms, -1, -1, max(expires, 0.0), errors.AUTHENTICATION_EXPIRED)
    return Admission(placement, grant, types)


def _operator_admission(
    user: Claims, account: str, operator: OperatorCallout, expires: float, types: frozenset[str] | None
) -> Admission:
    """Operator mode: the user goes to the account that issued it (the callout account, or one of its
    `allowed_accounts`), signed by that account or one of its signing keys (a scoped one applying its
    template); the account's limits apply, as to the account's own users."""
    issuer = str(user.nats.get("issuer_account") or user.issuer)
    if issuer != account:
        allowed = (operator.account.external_auth or {}).get("allowed_accounts") or []
        if allowed != ["*"] and issuer not in allowed:
            raise CalloutRefused(
                f'Account "{user.issuer}" not permitted as valid account option for auth callout for account '
                f'"{account}"'
            )
    target = operator.lookup(issuer)
    if target is None:
        raise CalloutRefused(
            f'No valid account "{issuer}" for auth callout response on account "{account}": account missing'
        )
    if user.issuer not in target.signing_keys:
        raise CalloutRefused(f'User JWT issuer "{user.issuer}" is not known')
    nats = user.nats
    scope = target.signing_keys[user.issuer]
    if scope is not None:
        scoped = scoped_permissions(scope, user, target)
        if scoped is None:
            raise CalloutRefused("User JWT is not valid: scoped user has permissions or limits of its own")
        nats = scoped
    perms = permissions_from_jwt(nats) or permissions_from_jwt(target.default_permissions)
    expiry_error = errors.AUTHENTICATION_EXPIRED
    if target.claims.expires:
        left = float(target.claims.expires - time.time())
        if not expires or left < expires:
            expires, expiry_error = max(left, 0.0), errors.ACCOUNT_AUTHENTICATION_EXPIRED
    return Admission(target.name, UserGrant(perms, target.subs, target.payload, expires, expiry_error), types)
