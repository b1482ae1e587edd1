"""JetStream in operator mode, as nats-server: an account JWT's JetStream limits turn it on for that account
and are enforced and reported; an account JWT without them gets 10039."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nats
import pytest

from tests.jwt.issuer import Key, account_jwt, creds, user_jwt
from tests.jwt.world import KINDS, running

JS_LIMITS = {"mem_storage": 1000, "disk_storage": -1, "streams": 1, "consumer": -1, "max_ack_pending": 7}
R1 = {"mem_storage": -1, "disk_storage": 5000, "streams": 3, "consumer": -1, "disk_max_stream_bytes": 4000}


@pytest.mark.parametrize("kind", KINDS)
async def test_account_jwt_jetstream_limits(tmp_path: Path, kind: str) -> None:
    operator, system, with_js, without_js, tiered = Key("O"), Key("A"), Key("A"), Key("A"), Key("A")
    accounts = {
        system.public: account_jwt(operator, system),
        with_js.public: account_jwt(operator, with_js, limits=JS_LIMITS),
        without_js.public: account_jwt(operator, without_js),
        tiered.public: account_jwt(operator, tiered, limits={"tiered_limits": {"R1": R1}}),
    }
    (tmp_path / "op.jwt").write_text(
        operator.issue(operator.public, "operator", {"system_account": system.public})
    )
    preload = "\n".join(f"  {name}: {token}" for name, token in accounts.items())
    conf = tmp_path / "js.conf"
    conf.write_text(
        f'operator: "{tmp_path / "op.jwt"}"\nsystem_account: {system.public}\n'
        f"resolver: MEMORY\nresolver_preload: {{\n{preload}\n}}\n"
        f'jetstream {{ store_dir: "{tmp_path / "js"}" }}\n'
    )

    async def connect(account: Key, name: str) -> nats.aio.client.Client:
        user = Key("U")
        path = creds(tmp_path / f"{name}.creds", user_jwt(account, user), user)
        return await nats.connect(url, user_credentials=str(path), allow_reconnect=False)

    async def call(nc: nats.aio.client.Client, subject: str, body: Any = b"") -> dict[str, Any]:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        out: dict[str, Any] = json.loads((await nc.request(subject, data, timeout=5)).data)
        return out

    with running(kind, conf) as server:
        url = server.url
        js_user, plain_user = await connect(with_js, "js"), await connect(without_js, "plain")
        tiered_user = await connect(tiered, "tiered")
        try:
            info = await call(js_user, "$JS.API.INFO")
            assert info["limits"] == {
                "max_memory": 1000, "max_storage": -1, "max_streams": 1, "max_consumers": -1,
                "max_ack_pending": 7, "memory_max_stream_bytes": -1, "storage_max_stream_bytes": -1,
                "max_bytes_required": False,
            }  # fmt: skip
            first = await call(js_user, "$JS.API.STREAM.CREATE.S1", {"name": "S1", "subjects": ["s1"]})
            assert "error" not in first, first
            second = await call(js_user, "$JS.API.STREAM.CREATE.S2", {"name": "S2", "subjects": ["s2"]})
            assert second["error"]["err_code"] == 10027
            stream = {"name": "T", "subjects": ["t"], "max_bytes": 3000}
            assert "error" not in await call(tiered_user, "$JS.API.STREAM.CREATE.T", stream)
            too_big = await call(
                tiered_user, "$JS.API.STREAM.CREATE.T2", {**stream, "name": "T2", "subjects": ["t2"]}
            )
            assert too_big["error"]["err_code"] == 10047
            tier_info = await call(tiered_user, "$JS.API.INFO")
            unset = {k: type(v)() for k, v in info["limits"].items()}
            r1 = {
                **info["limits"],
                "max_memory": -1,
                "max_storage": 5000,
                "max_streams": 3,
                "max_ack_pending": -1,
            }
            r1["storage_max_stream_bytes"] = 4000
            usage = {"memory": 0, "storage": 0, "reserved_memory": 0, "reserved_storage": 3000, "streams": 1}
            assert {k: tier_info[k] for k in ("limits", *usage)} == {"limits": unset, **usage}
            assert tier_info["tiers"] == {"R1": {**usage, "consumers": 0, "limits": r1}}
            refused = await call(plain_user, "$JS.API.INFO")
            assert refused["error"] == {
                "code": 503, "err_code": 10039, "description": "JetStream not enabled for account"
            }  # fmt: skip
        finally:
            for nc in (js_user, plain_user, tiered_user):
                await nc.close()
    assert not (tmp_path / "js" / "jetstream" / without_js.public).exists()
