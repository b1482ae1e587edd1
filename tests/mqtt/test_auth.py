"""MQTT clients' credentials beyond a user and password, against pynatsd and nats-server: in operator mode
a user JWT in the CONNECT's password (a bearer one: an MQTT client cannot sign the nonce; its allowed
connection types apply); an nkey user reachable as the block's no_auth_user (with its permissions);
the block's own `authorization { user, password }` for MQTT clients only."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.jwt.issuer import Key, account_jwt, user_jwt
from tests.mqtt.conftest import (
    KINDS,
    MQTTServer,
    RawClient,
    mqtt_life,
    publish_packet,
    subscribe_packet,
    unsubscribe_packet,
)

NOT_AUTHORIZED = 5
OPERATOR, SYSTEM, ACCOUNT, SIGNER = Key("O"), Key("A"), Key("A"), Key("A")
JETSTREAM = {"mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1}
LIMITED = Key("A")  # an account whose users may have 3 subscriptions and 100-byte payloads


def _bearer(**nats: object) -> bytes:
    return user_jwt(ACCOUNT, Key("U"), bearer_token=True, **nats).encode()


# Each CONNECT's password (and user name), and the CONNACK code both servers give it.
JWT_CASES: dict[str, tuple[bytes | None, bytes | None, int]] = {
    "bearer JWT": (b"ignored", _bearer(), 0),
    "bearer JWT, another user name": (b"any", _bearer(), 0),
    "bearer JWT for MQTT connections": (b"any", _bearer(allowed_connection_types=["MQTT"]), 0),
    "bearer JWT for other connections": (
        b"any",
        _bearer(allowed_connection_types=["STANDARD"]),
        NOT_AUTHORIZED,
    ),
    "JWT that needs a signature": (b"any", user_jwt(ACCOUNT, Key("U")).encode(), NOT_AUTHORIZED),
    "JWT of an unknown account": (
        b"any",
        user_jwt(Key("A"), Key("U"), bearer_token=True).encode(),
        NOT_AUTHORIZED,
    ),
    "not a JWT": (b"someone", b"secret", NOT_AUTHORIZED),
    "no credentials": (None, None, NOT_AUTHORIZED),
}


def _operator_config(directory: Path) -> str:
    """Operator mode with account A (JetStream on) preloaded, as a start_mqtt_server template."""
    (directory / "op.jwt").write_text(
        OPERATOR.issue(OPERATOR.public, "operator", {"system_account": SYSTEM.public})
    )
    accounts = {
        SYSTEM.public: account_jwt(OPERATOR, SYSTEM),
        ACCOUNT.public: account_jwt(OPERATOR, ACCOUNT, limits=JETSTREAM),
        LIMITED.public: account_jwt(OPERATOR, LIMITED, limits={**JETSTREAM, "subs": 3, "payload": 100}),
    }
    preload = "\n".join(f"  {name}: {token}" for name, token in accounts.items())
    operator = (
        f'operator: "{directory / "op.jwt"}"\nsystem_account: {SYSTEM.public}\n'
        f"resolver: MEMORY\nresolver_preload: {{\n{preload}\n}}\n"
    )
    return operator.replace("{", "{{").replace("}", "}}") + TEMPLATE


TEMPLATE = 'jetstream {{ store_dir: "{store}" }}\nmqtt {{ host: 127.0.0.1, port: {mqtt_port} }}\n'


@pytest.fixture(scope="module", params=KINDS)
def operator_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[MQTTServer]:
    directory = tmp_path_factory.mktemp(request.param)
    with mqtt_life(request.param, directory, _operator_config(directory)) as started:
        yield started


def _connack(port: int, user: bytes | None, password: bytes | None, client_id: bytes) -> int | None:
    client = RawClient(port)
    try:
        return client.connect(client_id=client_id, user=user, password=password)
    finally:
        client.close()


@pytest.mark.parametrize("case", list(JWT_CASES))
def test_user_jwt_in_the_password(operator_server: MQTTServer, case: str) -> None:
    user, password, code = JWT_CASES[case]
    assert _connack(operator_server.mqtt_port, user, password, b"jwt-" + str(len(case)).encode()) == code


def test_a_jwt_user_publishes_and_receives(operator_server: MQTTServer) -> None:
    token = _bearer()
    client = RawClient(operator_server.mqtt_port)
    try:
        assert client.connect(client_id=b"jwt-user", user=b"any", password=token) == 0
        client.send(subscribe_packet(1, [(b"jwt/t", 0)]))
        assert client.read() == (0x90, b"\x00\x01\x00")
        client.send(publish_packet(b"jwt/t", b"as a JWT user"))
        assert client.read() == (0x30, b"\x00\x05jwt/tas a JWT user")
    finally:
        client.close()


NKEY = Key("U")
# alice has a password; the nkey user, who may only use `nk.>`, is the MQTT block's no_auth_user.
NKEY_CONFIG = f"""
jetstream {{{{ store_dir: "{{store}}" }}}}
authorization {{{{
  users = [
    {{{{ user: alice, password: pw }}}}
    {{{{ nkey: {NKEY.public}, permissions: {{{{ publish: "nk.>", subscribe: "nk.>" }}}} }}}}
  ]
}}}}
mqtt {{{{ host: 127.0.0.1, port: {{mqtt_port}}, no_auth_user: {NKEY.public} }}}}
"""
# No users: the MQTT block's own user, for MQTT clients only.
SIMPLE_CONFIG = """
jetstream {{ store_dir: "{store}" }}
mqtt {{ host: 127.0.0.1, port: {mqtt_port}, authorization {{ user: m, password: secret }} }}
"""


@pytest.mark.parametrize("kind", KINDS)
def test_nkey_no_auth_user_and_the_blocks_own_user(kind: str, tmp_path: Path) -> None:
    (tmp_path / "nkey").mkdir()
    (tmp_path / "simple").mkdir()
    with mqtt_life(kind, tmp_path / "nkey", NKEY_CONFIG) as nkey_server:
        port = nkey_server.mqtt_port
        assert _connack(port, b"alice", b"pw", b"alice") == 0
        assert _connack(port, NKEY.public.encode(), None, b"named-nkey") == NOT_AUTHORIZED  # (no signature)
        anonymous = RawClient(port)
        assert anonymous.connect(client_id=b"anonymous") == 0  # as the nkey user, with its permissions
        anonymous.send(subscribe_packet(1, [(b"nk/a", 0), (b"other", 0)]))
        assert anonymous.read() == (0x90, b"\x00\x01\x00\x80")
        anonymous.send(publish_packet(b"other", b"denied") + publish_packet(b"nk/a", b"allowed"))
        assert anonymous.read() == (0x30, b"\x00\x04nk/aallowed")
        anonymous.close()
    with mqtt_life(kind, tmp_path / "simple", SIMPLE_CONFIG) as simple:
        port = simple.mqtt_port
        assert _connack(port, b"m", b"secret", b"m") == 0
        assert _connack(port, b"m", b"wrong", b"m") == NOT_AUTHORIZED
        assert _connack(port, None, None, b"anonymous") == NOT_AUTHORIZED


_LIMITED_USER = user_jwt(LIMITED, Key("U"), bearer_token=True).encode()


def _limited_user(port: int, client_id: bytes, password: bytes) -> RawClient:
    client = RawClient(port)
    assert client.connect(client_id=client_id, user=b"any", password=password) == 0
    return client


def test_an_accounts_subscription_limit_fails_subscribes(operator_server: MQTTServer) -> None:
    """The `subs` limit counts NATS subscriptions, as nats-server's does: a `#` filter takes two, a QoS 1
    filter one more for its consumer's deliveries; a filter past it gets SUBACK failure (0x80), even one
    the client has, and the connection stays."""
    client = _limited_user(operator_server.mqtt_port, b"acc-subs", _LIMITED_USER)
    try:
        client.send(subscribe_packet(1, [(b"ls/a", 0), (b"ls/b/#", 0)]))  # three subscriptions
        assert client.read() == (0x90, b"\x00\x01\x00\x00")
        client.send(subscribe_packet(2, [(b"ls/c", 0), (b"ls/a", 0)]))
        assert client.read() == (0x90, b"\x00\x02\x80\x80")
        client.send(unsubscribe_packet(3, [b"ls/a"]))
        assert client.read() == (0xB0, b"\x00\x03")
        client.send(subscribe_packet(4, [(b"ls/d/#", 0), (b"ls/e", 1), (b"ls/f", 0)]))
        assert client.read() == (0x90, b"\x00\x04\x80\x80\x00")
        client.send(publish_packet(b"ls/f", b"still here"))
        assert client.read() == (0x30, b"\x00\x04ls/fstill here")
    finally:
        client.close()


def test_an_accounts_payload_limit_closes_a_larger_publish(operator_server: MQTTServer) -> None:
    """The `payload` limit bounds the NATS message a PUBLISH makes (its `Nmqtt-Pub` header included), as
    nats-server's: past it, the connection is closed."""
    client = _limited_user(operator_server.mqtt_port, b"acc-payload", _LIMITED_USER)
    try:
        client.send(subscribe_packet(1, [(b"lp/t", 0)]))
        assert client.read() == (0x90, b"\x00\x01\x00")
        client.send(publish_packet(b"lp/t", b"x" * 75))  # with the 25 header bytes: 100, the limit
        assert client.read() == (0x30, b"\x00\x04lp/t" + b"x" * 75)
        client.send(publish_packet(b"lp/t", b"x" * 76))
        assert client.closed()
    finally:
        client.close()


def test_a_users_own_limits(operator_server: MQTTServer) -> None:
    """A user JWT's own `subs` and `payload` limits: pynatsd applies them to an MQTT client as to any
    other. nats-server 2.15.1 does not: it registers an MQTT client's user before it keeps its JWT
    (auth.go), so applyAccountLimits finds no user JWT to read; it grants and delivers."""
    applied = operator_server.kind == "pynatsd"
    client = _limited_user(operator_server.mqtt_port, b"user-limits", _bearer(subs=1, payload=100))
    try:
        client.send(subscribe_packet(1, [(b"lu/a", 0), (b"lu/b", 0)]))
        assert client.read() == (0x90, b"\x00\x01\x00" + (b"\x80" if applied else b"\x00"))
        client.send(publish_packet(b"lu/a", b"x" * 76))
        if applied:
            assert client.closed()
        else:
            assert client.read() == (0x30, b"\x00\x04lu/a" + b"x" * 76)
    finally:
        client.close()
