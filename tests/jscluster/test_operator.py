"""Operator mode: accounts from JWTs, JetStream for those whose JWT has JetStream limits. A client of the
JetStream-less node (pynatsd, or nats-server with JetStream off as the reference) uses the cluster's
JetStream in such an account; an account without the limits gets no responders."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import nats
import pytest
from nats.errors import NoRespondersError
from nats.js.errors import ServiceUnavailableError

from tests.jscluster.conftest import JsCluster, js_cluster_of
from tests.jwt.issuer import Key, account_jwt, creds, user_jwt

JS_LIMITS = {"mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1, "max_ack_pending": -1,
             "mem_max_stream_bytes": -1, "disk_max_stream_bytes": -1}  # fmt: skip


class Operator:
    """An operator, its system account, an account with JetStream (J) and one without (N), a user of each."""

    def __init__(self, directory: Path) -> None:
        operator, system, self.j, self.n = Key("O"), Key("A"), Key("A"), Key("A")
        accounts = {
            system.public: account_jwt(operator, system),
            self.j.public: account_jwt(operator, self.j, limits=JS_LIMITS),
            self.n.public: account_jwt(operator, self.n),
        }
        op_jwt = directory / "op.jwt"
        op_jwt.write_text(operator.issue(operator.public, "operator", {"system_account": system.public}))
        preload = "\n".join(f"  {name}: {token}" for name, token in accounts.items())
        self.config = (
            f'operator: "{op_jwt}"\nsystem_account: {system.public}\n'
            f"resolver: MEMORY\nresolver_preload: {{\n{preload}\n}}\n"
        )
        self.creds = {}
        for name, account in (("j", self.j), ("n", self.n)):
            user = Key("U")
            self.creds[name] = str(creds(directory / f"{name}.creds", user_jwt(account, user), user))


@pytest.fixture(scope="module", params=["1py+2js", "1go+2js"])
def operator_cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[JsCluster, Operator]]:
    operator = Operator(tmp_path_factory.mktemp("operator"))
    with js_cluster_of(request.param, operator.config) as js:
        yield js, operator


async def test_jetstream_in_operator_mode(operator_cluster: tuple[JsCluster, Operator]) -> None:
    js, operator = operator_cluster
    url = js.clients[0].url
    nc = await nats.connect(url, user_credentials=operator.creds["j"])
    ctx = nc.jetstream()
    info = await ctx.add_stream(name="OP", subjects=["op.>"], num_replicas=js.replicas)
    assert info.config.num_replicas == js.replicas
    assert [(await ctx.publish("op.x", b"%d" % i)).seq for i in range(10)] == list(range(1, 11))
    kv = await ctx.create_key_value(bucket="opkv", replicas=js.replicas)
    await kv.put("k", b"v")
    assert (await kv.get("k")).value == b"v"
    await nc.close()
    nc = await nats.connect(url, user_credentials=operator.creds["n"])
    with pytest.raises((ServiceUnavailableError, NoRespondersError)):
        await nc.jetstream().add_stream(name="NOPE", subjects=["nope.>"])
    await nc.close()
