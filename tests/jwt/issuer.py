"""Test-side JWT issuing with the `nkeys` package: operators, accounts, users and their creds files."""

from __future__ import annotations

import base64
import json
import os
import time
from pathlib import Path
from typing import Any

import nkeys

_PREFIX = {"O": nkeys.PREFIX_BYTE_OPERATOR, "A": nkeys.PREFIX_BYTE_ACCOUNT, "U": nkeys.PREFIX_BYTE_USER}
UNLIMITED_ACCOUNT = {"subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1, "wildcards": True,
                     "conn": -1, "leaf": -1}  # fmt: skip
UNLIMITED_USER = {"subs": -1, "data": -1, "payload": -1}


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


class Key:
    """A fresh nkey pair of one kind ("O", "A" or "U")."""

    def __init__(self, kind: str) -> None:
        self.seed = nkeys.encode_seed(os.urandom(32), _PREFIX[kind])
        self.pair = nkeys.from_seed(self.seed)
        self.public = self.pair.public_key.decode()

    def sign(self, data: bytes) -> bytes:
        return bytes(self.pair.sign(data))

    def issue(self, subject: str, kind: str, nats: dict[str, Any], **claims: Any) -> str:
        """A v2 JWT of `kind` for `subject`, signed by this key; `claims` adds or overrides top-level
        fields (exp, nbf, iat)."""
        payload = {"jti": b64(os.urandom(16)), "iat": int(time.time()), "iss": self.public, "name": kind,
                   "sub": subject, **claims, "nats": {**nats, "type": kind, "version": 2}}  # fmt: skip
        head = b64(json.dumps({"typ": "JWT", "alg": "ed25519-nkey"}).encode())
        body = b64(json.dumps(payload).encode())
        return f"{head}.{body}.{b64(self.sign(f'{head}.{body}'.encode()))}"


def issue_v1(issuer: Key, subject: str, kind: str, nats: dict[str, Any]) -> str:
    """A v1 JWT (type at the top level, signature over the claims only), as older nsc wrote them."""
    payload = {"jti": b64(os.urandom(16)), "iat": int(time.time()), "iss": issuer.public, "name": kind,
               "sub": subject, "type": kind, "nats": nats}  # fmt: skip
    head = b64(json.dumps({"typ": "jwt", "alg": "ed25519"}).encode())
    body = b64(json.dumps(payload).encode())
    return f"{head}.{body}.{b64(issuer.sign(body.encode()))}"


def account_jwt(issuer: Key, account: Key, **nats: Any) -> str:
    """An account JWT with nsc's defaults (no limits), `nats` fields merged in (limits are merged)."""
    limits = {**UNLIMITED_ACCOUNT, **nats.pop("limits", {})}
    claims = nats.pop("claims", {})
    return issuer.issue(account.public, "account", {"limits": limits, **nats}, **claims)


def user_jwt(issuer: Key, user: Key, **nats: Any) -> str:
    """A user JWT with nsc's defaults (no limits); `claims={...}` sets top-level fields (exp, nbf)."""
    claims = nats.pop("claims", {})
    return issuer.issue(user.public, "user", {**UNLIMITED_USER, **nats}, **claims)


def creds(path: Path, token: str, user: Key) -> Path:
    """A creds file as nsc writes it (nats-py's `user_credentials`)."""
    path.write_text(
        f"-----BEGIN NATS USER JWT-----\n{token}\n------END NATS USER JWT------\n\n"
        "************************* IMPORTANT *************************\n\n"
        f"-----BEGIN USER NKEY SEED-----\n{user.seed.decode()}\n------END USER NKEY SEED------\n"
    )
    return path
