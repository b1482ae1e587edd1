"""Python authorizers: a callable of yours decides who connects, into which account, with which permissions.

Configured as `authorization { python: "mypkg.auth:check" }` (a module and an attribute of it), as the name
of an entry point of the `pynatsd.authorizers` group (`python: "check"`), or as a block with a timeout of its
own (`python { callable: "mypkg.auth:check", timeout: "500ms" }`; default: the authorization timeout).

The callable receives a `ConnectRequest` and returns `Allow(account, permissions)` or `Refuse(reason)`; it
may be a coroutine function. A plain function runs on the workers that check bcrypt hashes, off the event
loop; a coroutine function runs on the loop (it must not block). An exception, a timeout or any other answer
refuses the client with nats-server's `Authorization Violation`, logged once with the client's id, never its
credentials (nor the exception's text, which may quote them). A reload (SIGHUP) imports the module again and
asks the new callable about every connected client.

    from pynatsd.auth.python import Allow, ConnectRequest, Refuse, SubjectRule, UserPermissions

    def check(request: ConnectRequest) -> Allow | Refuse:
        if request.user == "alice" and request.password == lookup("alice"):
            return Allow("TEAM", UserPermissions(publish=SubjectRule(allow=["orders.>"])))
        return Refuse("unknown user")
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import sys
import traceback
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Protocol

from pynatsd.auth.users import DEFAULT_ACCOUNT, Connecting, Permissions, ResponsePermission
from pynatsd.base.blocks import PythonAuthorizerOptions
from pynatsd.base.values import ConfigValueError
from pynatsd.protocol.connect import ConnectOptions
from pynatsd.protocol.subjects import is_valid_subject

ENTRY_POINT_GROUP = "pynatsd.authorizers"

__all__ = [
    "ENTRY_POINT_GROUP",
    "Allow",
    "Authorizer",
    "ClientInfo",
    "ConnectRequest",
    "Decision",
    "Refuse",
    "ResponsePermission",
    "SubjectRule",
    "UserPermissions",
]


# -- what the callable receives ---------------------------------------------------------------------------
@dataclass(frozen=True)
class ClientInfo:
    """The connecting client: its connection id (`cid` in logs and /connz), address and CONNECT fields."""

    id: int
    host: str
    port: int
    name: str = ""
    lang: str = ""
    version: str = ""
    kind: str = "STANDARD"  # nats-server's connection type: "STANDARD" or "WEBSOCKET"


@dataclass(frozen=True)
class ConnectRequest:
    """A client's CONNECT, as the authorizer sees it. Secrets are left out of the repr."""

    client: ClientInfo
    user: str = ""
    password: str = field(default="", repr=False)
    token: str = field(default="", repr=False)
    # A public user nkey ("U..."): its signature of this connection's nonce has been verified. A CONNECT
    # whose signature does not verify is refused before the authorizer is asked.
    nkey: str = ""
    tls_certificate: bytes | None = field(default=None, repr=False)  # the client's certificate (DER), if any
    # ssl's decoded form of that certificate (subject, subjectAltName, ...), when the server verified it.
    tls_certificate_info: Mapping[str, Any] | None = field(default=None, repr=False)


# -- what it returns --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SubjectRule:
    """Allow/deny subjects for one direction, as `permissions { publish: {allow, deny} }` in the config:
    `allow=None` allows everything not denied, `allow=[]` nothing. Subscribe entries may be
    `"subject queue"` (that queue group only). A single string stands for a list of one."""

    allow: str | Sequence[str] | None = None
    deny: str | Sequence[str] = ()


@dataclass(frozen=True)
class UserPermissions:
    """A user's permissions, with the config's semantics (None: that direction is not restricted);
    `allow_responses`: True, or a ResponsePermission(max_msgs, expires) (see docs/security.md)."""

    publish: SubjectRule | None = None
    subscribe: SubjectRule | None = None
    allow_responses: bool | ResponsePermission = False


@dataclass(frozen=True)
class Allow:
    """Admit the client into `account` ("$G" or an account of the `accounts {}` block) with `permissions`
    (None: unrestricted). `user`: the name logs and /connz show (None: the CONNECT's user or nkey)."""

    account: str = DEFAULT_ACCOUNT
    permissions: UserPermissions | None = None
    user: str | None = None


@dataclass(frozen=True)
class Refuse:
    """Refuse the client: it gets `-ERR 'Authorization Violation'`; `reason` goes to the server's log."""

    reason: str = ""


Decision = Allow | Refuse


class Authorizer(Protocol):
    """What `authorization { python: ... }` names: a function or a coroutine function of a ConnectRequest."""

    def __call__(self, request: ConnectRequest, /) -> Decision | Awaitable[Decision]: ...


# -- loading ---------------------------------------------------------------------------------------------
class AuthorizerLoadError(ConfigValueError):
    """The configured callable cannot be imported (the server does not start; a reload keeps the old)."""


def load(path: str) -> Callable[..., object]:
    """The callable `path` names ("module:attribute" or an entry point name), its module imported afresh
    when it was imported before (a reload picks up new code)."""
    where = path
    if ":" in path:
        module_name, _, attribute = path.partition(":")
    else:
        found = entry_points(group=ENTRY_POINT_GROUP, name=path)
        if not found:
            raise AuthorizerLoadError(
                f'python authorizer "{path}": no entry point of that name in group {ENTRY_POINT_GROUP} '
                '(a module\'s callable is written "module:callable")'
            )
        entry = next(iter(found))
        module_name, _, attribute = entry.value.partition(":")
        where = f"{path} ({entry.value})"
    module_name, attribute = module_name.strip(), attribute.strip()
    if not module_name or not attribute:
        raise AuthorizerLoadError(f'python authorizer "{where}": expected "module:callable"')
    importlib.invalidate_caches()
    try:
        module = sys.modules.get(module_name)
        module = importlib.import_module(module_name) if module is None else importlib.reload(module)
    except Exception as exc:  # anything the module raises while importing: fail closed
        raise AuthorizerLoadError(
            f'python authorizer "{where}": cannot import {module_name}: {type(exc).__name__}: {exc}'
        ) from None
    target: object = module
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise AuthorizerLoadError(f'python authorizer "{where}": {module_name} has no {attribute}')
        target = getattr(target, part)
    if not callable(target):
        raise AuthorizerLoadError(f'python authorizer "{where}": {attribute} is not callable')
    return target


# -- deciding --------------------------------------------------------------------------------------------
class Applicant(Connecting, Protocol):
    """A connection as the authorizer describes it (pynatsd.broker.connection.Connection)."""

    cid: int
    port: int
    transport: asyncio.Transport | None


@dataclass(frozen=True)
class Verdict:
    """The authorizer's answer, checked: admitted as (user, account, permissions), or refused and why."""

    admitted: bool
    user: str = ""
    account: str = ""
    permissions: Permissions | None = None
    why: str = ""  # a refusal's log detail (never a credential)


class PythonAuthorizer:
    """Runs the configured callable for each CONNECT (see the module docstring)."""

    def __init__(self, config: PythonAuthorizerOptions, default_timeout: float, accounts: Collection[str]):
        self.path = config.path
        self.target = config.target if config.target is not None else load(config.path)
        self.timeout = config.timeout or default_timeout
        self.accounts = frozenset(accounts)
        call = getattr(self.target, "__call__", None)  # noqa: B004 (a callable object's async __call__)
        self.on_loop = inspect.iscoroutinefunction(self.target) or inspect.iscoroutinefunction(call)

    def decide(
        self, conn: Applicant, opts: ConnectOptions, nkey_verified: bool, workers: Executor
    ) -> asyncio.Future[Verdict]:
        """The verdict on `conn`'s CONNECT `opts`, once the callable answered (a future that never fails)."""
        loop = asyncio.get_running_loop()
        if opts.nkey and not nkey_verified:
            done: asyncio.Future[Verdict] = loop.create_future()
            done.set_result(Verdict(False, why="nkey signature not verified"))
            return done
        return loop.create_task(self._ask(request_of(conn, opts), workers))

    async def _ask(self, request: ConnectRequest, workers: Executor) -> Verdict:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.timeout):
                if self.on_loop:
                    answer = await self.target(request)  # type: ignore[misc]
                else:
                    answer = await loop.run_in_executor(workers, self.target, request)
                if inspect.isawaitable(answer):  # e.g. a partial of a coroutine function
                    answer = await answer
        except TimeoutError:
            return self._refusal(f"did not answer within {self.timeout:g}s")
        except (Exception, SystemExit) as exc:  # its text may quote the credentials: type and place only
            return self._refusal(f"raised {type(exc).__name__}{_place(exc)}")
        return self._checked(request, answer)

    def _refusal(self, why: str) -> Verdict:
        return Verdict(False, why=f"python authorizer {self.path} {why}")

    def _checked(self, request: ConnectRequest, answer: object) -> Verdict:
        if isinstance(answer, Refuse):
            return self._refusal(f"refused the client{': ' + answer.reason if answer.reason else ''}")
        if not isinstance(answer, Allow):
            return self._refusal(f"returned {type(answer).__name__}, not Allow or Refuse")
        if answer.account not in self.accounts:
            return self._refusal(f"chose an unknown account {answer.account!r}")
        try:
            perms = permissions_of(answer.permissions)
        except ValueError as err:
            return self._refusal(f"returned invalid permissions: {err}")
        user = answer.user if answer.user is not None else (request.user or request.nkey)
        return Verdict(True, user, answer.account, perms)


def _place(exc: BaseException) -> str:
    """` at file.py:12 (function)`: where the exception was raised."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return ""
    last = frames[-1]
    return f" at {Path(last.filename).name}:{last.lineno} ({last.name})"


def request_of(conn: Applicant, opts: ConnectOptions) -> ConnectRequest:
    """What the authorizer is told about `conn` and its CONNECT."""
    cert: bytes | None = None
    info: Mapping[str, Any] | None = None
    ssl_object = conn.transport.get_extra_info("ssl_object") if conn.transport is not None else None
    if ssl_object is not None:
        cert = ssl_object.getpeercert(binary_form=True)
        info = ssl_object.getpeercert() or None  # empty unless the server verified the certificate
    kind = conn.connection_type
    client = ClientInfo(conn.cid, conn.ip, conn.port, opts.name, opts.lang, opts.version, kind)
    return ConnectRequest(client, opts.user, opts.password, opts.auth_token, opts.nkey, cert, info)


def _subjects(value: str | Sequence[str], queue: bool) -> list[str]:
    subjects = [value] if isinstance(value, str) else list(value)
    for s in subjects:
        if not isinstance(s, str):
            raise ValueError(f"{s!r} is not a subject")
        parts = s.split()
        ok = is_valid_subject(s.encode()) or (
            queue and len(parts) == 2 and all(is_valid_subject(p.encode()) for p in parts)
        )
        if not ok:
            raise ValueError(f'subject "{s}" is not a valid subject')
    return subjects


def _rule(rule: SubjectRule | None, queue: bool) -> dict[str, Any] | None:
    if rule is None:
        return None
    if not isinstance(rule, SubjectRule):
        raise ValueError(f"expected a SubjectRule, got {type(rule).__name__}")
    spec: dict[str, Any] = {"deny": _subjects(rule.deny, queue)}
    if rule.allow is not None:
        spec["allow"] = _subjects(rule.allow, queue)
    return spec


def permissions_of(given: UserPermissions | None) -> Permissions | None:
    """`given` as the config's users have theirs (raises ValueError on a bad subject or type)."""
    if given is None:
        return None
    if not isinstance(given, UserPermissions):
        raise ValueError(f"expected UserPermissions, got {type(given).__name__}")
    spec: dict[str, Any] = {}
    for direction, rule in (("publish", given.publish), ("subscribe", given.subscribe)):
        parsed = _rule(rule, queue=direction == "subscribe")
        if parsed is not None:
            spec[direction] = parsed
    if given.allow_responses is not False:
        if not isinstance(given.allow_responses, bool | ResponsePermission):
            raise ValueError("allow_responses: expected a bool or a ResponsePermission")
        spec["allow_responses"] = given.allow_responses
    return Permissions(spec)
