"""The leaf node side of a server: the leafnode listener (this server as a hub), the remotes it dials (as a
leaf) with their reconnects, authorization and account binding, and the interest each connection is told.
nats-server's rules (server/leafnode.go):

- binding: a connection carries one account. An accepted one takes the account of the user its CONNECT
  authenticates as (`authorization { user, account }` or `users [{user, password, account}]`; without a
  leafnode authorization, the server's client users, in operator mode the user JWT's account, else the
  global account); a remote binds its local
  `account` (default `$G`). Interest and messages cross only in that account.
- interest (per connection, `smap`): the hub side tells a leaf every subscription of the account but the
  leaf's own (clients', the routes' remote interest, the other leafs', its service imports); a spoke
  tells its hub the local ones only (clients', internal ones and service imports, those of the leafs it
  is the hub of), not what its routes or its hub brought. A plain subject's first subscription sends
  `LS+ subject`, its last `LS- subject`; a queue group sends `LS+ subject queue weight` whenever its
  weight changes. A spoke's `deny_imports` keep the matching interest from its hub.
- loops: each account has a loop detection subject, `$LDS.<random>`, subscribed on every leaf
  connection; a connection that hears its own back closes (`Loop detected ...`) and a remote then waits
  30 s before reconnecting.
- reconnect: a remote whose connection fails or closes dials again after `reconnect` (1 s by default),
  the next URL of its list (in order with `no_randomize`, else shuffled); its interest is sent anew.
- JetStream: each side's JetStream serves its own clients. `$JS.API.>`, `$KV.>` and `$OBJ.>` (for the
  system account also `$JSC.>` and `$NRG.>`) cross no leaf link either way, nor their interest; a JetStream
  with a domain is reached across it as `$JS.<domain>.API` (pynatsd.jetstream serves that prefix), and a
  server whose domain differs from the other side's keeps requests for its own domain from leaving. A
  system account link with the same domain would extend a JetStream cluster in nats-server; pynatsd does
  not (its JetStream is one server's), so that link keeps JetStream apart too.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import random
import urllib.parse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from pynatsd import NATS_COMPAT_VERSION
from pynatsd.auth.users import DEFAULT_ACCOUNT, nonce_signed
from pynatsd.base.ids import new_server_id
from pynatsd.base.listener import redacted_url
from pynatsd.base.logging import get_logger
from pynatsd.base.tls import peer_context
from pynatsd.config.leafnodes import version_components
from pynatsd.leafnodes.leaf import LeafConnection, connect_password_ok
from pynatsd.matcher.leaf import weight_of
from pynatsd.protocol import encoder
from pynatsd.protocol.connect import ConnectOptions
from pynatsd.protocol.route import encode_rsub, encode_runsub

if TYPE_CHECKING:
    from pynatsd.base.blocks import LeafNodeOptions, LeafRemote
    from pynatsd.broker.core import Broker
    from pynatsd.broker.delivery import Subscription
    from pynatsd.matcher import Sublist

log = get_logger()

# What crosses no leaf link (nats-server's denyAllClientJs; its denyAllJs adds the cluster's own subjects
# for a system account link): each side's JetStream answers its own clients, a domain reaches the other's.
JETSTREAM_CLIENT_SUBJECTS = (b"$JS.API.>", b"$KV.>", b"$OBJ.>")
JETSTREAM_SYSTEM_SUBJECTS = (b"$JSC.>", b"$NRG.>", *JETSTREAM_CLIENT_SUBJECTS)


class LeafListenError(Exception):
    """The leafnode port cannot be bound (the server stops, as nats-server does)."""


class LeafManager:
    """Every leaf node connection of one server, and the interest each is told."""

    def __init__(self, server: Broker, options: LeafNodeOptions, jetstream_domain: str | None = None) -> None:
        self.server = server
        self.options = options
        self.jetstream_domain = jetstream_domain  # None: no JetStream here; "": one without a domain
        self.connections: set[LeafConnection] = set()  # every open one, registered or not
        server.stats.leafs = self.connections  # the server's message totals include the leafs'
        self.leafs: dict[int, LeafConnection] = {}  # registered connections by id
        self._by_account: dict[str, list[LeafConnection]] = {}
        self._loop_subjects: dict[str, bytes] = {}  # account -> its loop detection subject
        self._listener: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._delays: dict[int, float] = {}  # remote index -> the delay before its next attempt
        self._stopping = False
        # `tls {}`: the accepting side's context (remotes build theirs as they dial)
        tls = options.tls
        self.tls_context = peer_context(tls, True, bool(tls.get("verify"))) if tls is not None else None

    # -- start / stop ---------------------------------------------------------------------------------
    async def start(self) -> None:
        server = self.server
        for account, sublist in list(server.account_sublists.items()):
            self.watch(account, sublist)
        options = self.options
        if options.port:
            port = 0 if options.port == -1 else options.port
            try:
                self._listener = await server.loop.create_server(
                    lambda: cast(asyncio.Protocol, LeafConnection(self)),
                    host=options.host or None,
                    port=port,
                    reuse_address=True,
                )
            except OSError as exc:
                raise LeafListenError(f"Error listening on leafnode port: {options.port} - {exc}") from None
            sockets = self._listener.sockets
            if sockets:
                options.port = int(sockets[0].getsockname()[1])
            log.info("Listening for leafnode connections on %s:%d", options.host, options.port)
        for index, remote in enumerate(options.remotes):
            self._spawn(self._solicit(index, remote))

    async def stop(self) -> None:
        self._stopping = True
        if self._listener is not None:
            self._listener.close()
        for task in list(self._tasks):
            task.cancel()
        for leaf in list(self.connections):
            leaf.close("Server Shutdown")
        if self._listener is not None:
            await self._listener.wait_closed()
            self._listener = None

    def _spawn(self, coro: Any) -> None:
        task: asyncio.Task[None] = self.server.loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- remotes --------------------------------------------------------------------------------------
    async def _solicit(self, index: int, remote: LeafRemote, delay: float = 0.0) -> None:
        """Dial the remote's URLs in turn until one connects (then its close calls us again)."""
        urls = list(remote.urls)
        if not remote.no_randomize:
            random.shuffle(urls)
        turn = 0
        while not self._stopping:
            if delay:
                await asyncio.sleep(delay)
            url = urls[turn % len(urls)]
            turn += 1
            parts = urllib.parse.urlsplit(url)
            try:
                await self.server.loop.create_connection(
                    self._dialer(remote, url),
                    parts.hostname or "",
                    parts.port or 7422,
                    **_websocket_tls(remote, url),
                )
                return
            except ValueError as exc:  # the remote's `tls {}` files
                log.error(
                    "Error trying to connect as leafnode to remote server %r: %s", redacted_url(url), exc
                )
            except OSError as exc:
                shown = redacted_url(url)
                log.debug("Error trying to connect as leafnode to remote server %r: %s", shown, exc)
            delay = self.options.reconnect

    def _dialer(self, remote: LeafRemote, url: str) -> Callable[[], asyncio.Protocol]:
        if url.startswith(("ws://", "wss://")):
            from pynatsd.websocket.client import LeafWebSocketDialer

            def dial() -> asyncio.Protocol:
                leaf = LeafConnection(self, remote, url)
                leaf.websocket = True
                failed = functools.partial(self.closed, leaf)  # (the remote tries again)
                return LeafWebSocketDialer(leaf, failed, url, remote.ws_compression, remote.ws_no_masking)

            return dial
        return lambda: cast(asyncio.Protocol, LeafConnection(self, remote, url))

    def accept_websocket(self) -> LeafConnection | None:
        """A connection the WebSocket listener accepted on the `/leafnode` path; None without a leafnode
        port (nats-server takes leaf nodes there only when it has one)."""
        if not self.options.port:
            return None
        leaf = LeafConnection(self)
        leaf.websocket = True
        return leaf

    def delay_reconnect(self, leaf: LeafConnection, delay: float) -> None:
        """The next attempt of `leaf`'s remote waits `delay` (a loop was detected)."""
        if leaf.remote is not None:
            self._delays[self.options.remotes.index(leaf.remote)] = delay

    def below_min_version(self, version: str) -> bool:
        """True if a CONNECT's `version` is below the block's `min_version` (not a semver: below too)."""
        have = version_components(version)
        wanted = version_components(self.options.min_version)
        return wanted is not None and (have is None or have < wanted)

    def connect_options(self, leaf: LeafConnection) -> dict[str, object]:
        """The CONNECT a remote sends its hub (nats-server's leafConnectInfo; credentials from its URL)."""
        server = self.server
        remote = leaf.remote
        assert remote is not None
        options: dict[str, object] = {
            "version": NATS_COMPAT_VERSION,
            "server_id": server.server_id,
            "name": server.server_name,
        }
        parts = urllib.parse.urlsplit(leaf.url)
        if parts.username is not None:
            options["user"] = urllib.parse.unquote(parts.username)
            if parts.password is not None:
                options["pass"] = urllib.parse.unquote(parts.password)
            else:  # nats-server: a user alone is a token too
                options["auth_token"] = options["user"]
        if remote.hub:
            options["is_hub"] = True
        if server.cluster is not None:
            options["cluster"] = server.cluster.name
        options["headers"] = server.options.headers
        if remote.deny_imports:
            options["deny_pub"] = list(remote.deny_imports)
        options["remote_account"] = leaf.account
        if self.jetstream_domain:
            options["domain"] = self.jetstream_domain
        options["proto"] = 1
        if remote.credentials:
            token, seed = read_creds(remote.credentials)
            options["jwt"] = token
            options["sig"] = sign_nonce(seed, leaf.nonce)
        elif remote.seed:  # `nkey`/`seed`: the user's public key and its signature of the nonce
            options["nkey"] = user_public_key(remote.seed.encode())
            options["sig"] = sign_nonce(remote.seed.encode(), leaf.nonce)
        return options

    # -- the hub side ---------------------------------------------------------------------------------
    def leaf_info(self, extra: dict[str, object]) -> bytes:
        """The leafnode INFO (`extra`: the connection's `client_id`, `nonce`, `connect_info`, ...)."""
        server = self.server
        opts = server.options
        options = self.options
        host, port = options.host, options.port
        if options.advertise:
            adv_host, sep, adv_port = options.advertise.rpartition(":")
            if sep and adv_port.isdigit():
                host, port = adv_host.strip("[]"), int(adv_port)
            else:
                host = options.advertise
        info: dict[str, object] = {
            "server_id": server.server_id,
            "server_name": server.server_name,
            "version": NATS_COMPAT_VERSION,
            "proto": 1,
            "go": server.info_base().get("go", ""),
            "host": host,
            "port": port,
            "auth_required": True,
            "max_payload": opts.max_payload,
            "headers": opts.headers,
            "info_on_connect": True,
        }
        if options.tls is not None:  # the leaf upgrades after this INFO
            info["tls_required"] = True
            info["tls_verify"] = bool(options.tls.get("verify"))
        if server.cluster is not None:
            info["cluster"] = server.cluster.name
        if self.jetstream_domain:
            info["domain"] = self.jetstream_domain
        info["leafnode_urls"] = [f"{host}:{port}"]  # (no_advertise: others' URLs are not gossiped)
        info.update(extra)
        return encoder.encode_info(info)

    def authorize(self, leaf: LeafConnection, options: dict[str, object]) -> str | None:
        """The account an accepted connection's CONNECT binds it to, None if it does not authenticate
        (nats-server's isLeafNodeAuthorized)."""
        config = self.options
        user = str(options.get("user", "") or "")
        if config.username:
            ok = user == config.username and connect_password_ok(options.get("pass"), config.password)
            return (config.account or DEFAULT_ACCOUNT) if ok else None
        if config.nkey:  # the nonce signed by the one user key the block names
            ok = options.get("nkey") == config.nkey and nonce_signed(
                leaf.nonce, config.nkey, _text(options, "sig")
            )
            return (config.account or DEFAULT_ACCOUNT) if ok else None
        if config.token:
            ok = connect_password_ok(options.get("auth_token"), config.token)
            return (config.account or DEFAULT_ACCOUNT) if ok else None
        if config.users:
            for entry in config.users:
                if entry["user"] == user:
                    ok = connect_password_ok(options.get("pass"), entry["password"])
                    return (entry["account"] or DEFAULT_ACCOUNT) if ok else None
            return None
        auth = self.server.auth
        if auth.jwt is not None:
            return self._authorize_jwt(leaf, options)
        return self._authorize_as_client(leaf, options)

    def _authorize_as_client(self, leaf: LeafConnection, options: dict[str, object]) -> str | None:
        """No `authorization` in the block: the server's own users decide, as a client's CONNECT is decided
        (nats-server's isClientAuthorized: nkeys, tokens, no_auth_user, allowed connection types), by the
        one authenticator. Fail closed where pynatsd cannot keep a rule on a leaf connection: a user with
        permissions (not applied to leaf connections), a Python authorizer, an auth callout."""
        auth = self.server.auth
        if auth.python is not None or auth.callout is not None:
            log.error("%r - pynatsd does not authorize leaf nodes through a Python authorizer or an auth "
                      "callout; refused", leaf)  # fmt: skip
            return None
        leaf.opts = ConnectOptions(
            user=str(options.get("user") or ""),
            password=str(options.get("pass") or ""),
            auth_token=str(options.get("auth_token") or ""),
            nkey=str(options.get("nkey") or ""),
            sig=str(options.get("sig") or ""),
        )
        identity = auth.authenticate(leaf, leaf.opts)
        if identity is None:
            return None
        if auth.permissions(identity[0]) is not None:
            log.error("%r - pynatsd does not support permissions on leaf node users; refused", leaf)
            return None
        return identity[1]

    def _authorize_jwt(self, leaf: LeafConnection, options: dict[str, object]) -> str | None:
        """Operator mode: the account of the user JWT in CONNECT, its signature of our nonce checked as a
        client's (`LEAFNODE`, or `LEAFNODE_WS` over WebSocket, among its allowed connection types if it names
        any). A user JWT that carries permissions is refused: pynatsd does not apply them to leaf connections
        (fail closed)."""
        server = self.server
        jwt = server.auth.jwt
        assert jwt is not None
        # (a server's CONNECT, not a client's: only the credentials are read; its `protocol` is a server's)
        leaf.opts = ConnectOptions(
            jwt=str(options.get("jwt") or ""),
            sig=str(options.get("sig") or ""),
            name=str(options.get("name") or ""),
            version=str(options.get("version") or ""),
        )
        identity = jwt.authenticate(leaf, leaf.opts, leaf.nonce)
        if identity is None:
            return None
        grant = jwt.grants.get(identity[0])
        if grant is not None and grant.permissions is not None:
            log.error("%r - pynatsd does not support permissions on leaf node users; refused", leaf)
            return None
        if server.links is not None:
            server.links.ensure(identity[1])  # its account's imports, as its JWT has them
        return identity[1]

    # -- registration ---------------------------------------------------------------------------------
    def register(self, leaf: LeafConnection) -> None:
        """A connection whose handshake is done: it joins its account and is told the interest."""
        self._keep_jetstream_apart(leaf)
        self.leafs[leaf.cid] = leaf
        self._by_account.setdefault(leaf.account, []).append(leaf)
        self._delays.pop(self._remote_index(leaf), None)
        sublist = leaf.sublist
        assert sublist is not None
        frames = [self._frame(leaf, self.loop_subject(leaf.account), None, 1)]
        for sub in sublist.subscriptions():
            if self._tells(leaf, sub):
                key = _key(sub)
                leaf.smap[key] = leaf.smap.get(key, 0) + weight_of(sub)
        for key, n in leaf.smap.items():
            subject, _, queue = key.partition(b" ")
            if leaf.allowed_interest(subject):
                frames.append(self._frame(leaf, subject, queue or None, n))
        leaf.send(b"".join(frames))
        if self.server.system is not None:
            self.server.system.leaf_changed(leaf, connected=True)

    def _keep_jetstream_apart(self, leaf: LeafConnection) -> None:
        """Deny the JetStream subjects that must not cross `leaf` (see the module docstring), both ways, as
        nats-server's addLeafNodeConnection does once the handshake is done."""
        system = leaf.account == self.server.auth.system_account
        subjects = JETSTREAM_SYSTEM_SUBJECTS if system else JETSTREAM_CLIENT_SUBJECTS
        leaf.import_deny.add(subjects)
        leaf.export_deny.add(subjects)
        domain = self.jetstream_domain
        if domain and leaf.remote_domain != domain:
            leaf.export_deny.add([b"$JS.%s.API.>" % domain.encode()])
        if system:
            log.info(
                "%r - JetStream not extended over the system account (domains: local %r, remote %r)",
                leaf,
                domain or "",
                leaf.remote_domain,
            )

    def closed(self, leaf: LeafConnection) -> None:
        if leaf in self.connections:
            self.connections.discard(leaf)
            self.server.stats.add_closed_route(leaf)
        if self.leafs.pop(leaf.cid, None) is not None:
            peers = self._by_account.get(leaf.account, [])
            if leaf in peers:
                peers.remove(leaf)
            if self.server.system is not None:
                self.server.system.leaf_changed(leaf, connected=False)
        remote = leaf.remote
        if remote is not None and not self._stopping and not leaf.no_reconnect:
            index = self._remote_index(leaf)
            delay = self._delays.get(index, self.options.reconnect)
            log.info("Will reconnect leafnode %s in %.1fs", redacted_url(leaf.url), delay)
            self._spawn(self._solicit(index, remote, delay))

    def _remote_index(self, leaf: LeafConnection) -> int:
        return self.options.remotes.index(leaf.remote) if leaf.remote is not None else -1

    def loop_subject(self, account: str) -> bytes:
        """The account's loop detection subject (`$LDS.` and a random id, made on first use)."""
        subject = self._loop_subjects.get(account)
        if subject is None:
            subject = self._loop_subjects[account] = b"$LDS." + new_server_id()[:22].encode()
        return subject

    # -- interest -------------------------------------------------------------------------------------
    def watch(self, account: str, sublist: Sublist[Subscription]) -> None:
        """Tell the account's leaf connections of its interest as it changes (after the routes' watcher,
        when there is one: the sublist has one slot, so the earlier one is called first)."""
        before = sublist.watcher

        def changed(sub: Subscription, added: bool) -> None:
            if before is not None:
                before(sub, added)
            self._interest_changed(account, sub, added)

        sublist.watcher = changed

    def _tells(self, leaf: LeafConnection, sub: Subscription) -> bool:
        """True if `sub` is interest `leaf` is told of (see the module docstring)."""
        conn = sub.conn
        if conn is leaf or conn.is_gateway:  # (a gateway's catch-all is nobody's interest)
            return False  # (a service import's subscription is told: nats-server sends the imports)
        if leaf.spoke and not sub.subject.startswith(b"$LDS."):  # loop detection crosses every link
            return not conn.is_route or (conn.is_leaf and not conn.spoke)
        return True

    def _interest_changed(self, account: str, sub: Subscription, added: bool) -> None:
        leafs = self._by_account.get(account)
        if not leafs:
            return
        key = _key(sub)
        delta = weight_of(sub) if added else -weight_of(sub)
        for leaf in leafs:
            if leaf.closed or not self._tells(leaf, sub):
                continue
            before = leaf.smap.get(key, 0)
            if delta < 0 and not before:
                continue
            after = before + delta
            if after > 0:
                leaf.smap[key] = after
            else:
                leaf.smap.pop(key, None)
                after = 0
            if sub.queue is None and (before > 0) == (after > 0):
                continue
            if leaf.allowed_interest(sub.subject):
                leaf.send(self._frame(leaf, sub.subject, sub.queue, after))

    @staticmethod
    def _frame(leaf: LeafConnection, subject: bytes, queue: bytes | None, n: int) -> bytes:
        if n > 0:
            return encode_rsub(b"", subject, queue, n if queue else 1, leaf=True)
        return encode_runsub(b"", subject, queue, leaf=True)

    # -- monitoring -----------------------------------------------------------------------------------
    def registered(self) -> list[LeafConnection]:
        return list(self.leafs.values())


def _websocket_tls(remote: LeafRemote, url: str) -> dict[str, Any]:
    """create_connection's TLS arguments for a WebSocket remote with TLS (`wss://`, or `ws://` with a
    `tls {}` block: nats-server's, the handshake before the HTTP upgrade); none for the others, whose TLS
    comes after the hub's INFO. ValueError when the `tls {}` files cannot be used."""
    tls = remote.tls
    if tls is None or not url.startswith(("ws://", "wss://")):
        return {}
    return {
        "ssl": peer_context(tls, False, not tls.get("insecure")),
        "server_hostname": urllib.parse.urlsplit(url).hostname or "",
        "ssl_handshake_timeout": float(tls["timeout"]),
    }


def _key(sub: Subscription) -> bytes:
    return sub.subject + b" " + sub.queue if sub.queue else sub.subject


def read_creds(path: str) -> tuple[str, bytes]:
    """(user JWT, seed) of a creds file as nsc writes it: each the one line inside its BEGIN/END markers.
    Raises ValueError when unreadable or malformed (the path is not in the message)."""
    try:
        with open(path, encoding="utf-8") as file:
            lines = [line.strip() for line in file]
    except OSError:
        raise ValueError("credentials file cannot be read") from None
    found: dict[str, str] = {}
    for i, line in enumerate(lines[:-1]):
        if line.startswith("---") and "BEGIN" in line:
            found["seed" if "SEED" in line else "jwt"] = lines[i + 1]
    if not found.get("jwt") or not found.get("seed"):
        raise ValueError("credentials file malformed")
    return found["jwt"], found["seed"].encode()


def _text(options: dict[str, object], key: str) -> str:
    value = options.get(key)
    return value if isinstance(value, str) else ""


def user_public_key(seed: bytes) -> str:
    """The public key (`U...`) of a user seed the configuration checked."""
    import nkeys

    return str(nkeys.from_seed(seed).public_key.decode())


def sign_nonce(seed: bytes, nonce: str) -> str:
    """The hub's nonce signed with the user's seed: base64url without padding, as a CONNECT carries it."""
    import nkeys  # only remotes with credentials need it

    try:
        pair = nkeys.from_seed(seed)
    except Exception:
        raise ValueError("credentials file has malformed seed") from None
    signature = bytes(pair.sign(nonce.encode()))
    return base64.urlsafe_b64encode(signature).decode().rstrip("=")
