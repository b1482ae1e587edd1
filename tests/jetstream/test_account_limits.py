"""JetStream per account, as nats-server: only the accounts a config gives it have it (others get 10039
and nothing on disk), and an account's `jetstream {}` limits are enforced with nats-server's codes and
reported by account info. The same requests against both servers, the same answers."""

from __future__ import annotations

import json
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client

from pynatsd.config.jetstream import account_js_limits
from tests.servers import ServerProcess, nats_server_binary, pynatsd_command, require, server_with_config

CONF = """
jetstream {{ store_dir: "{store}" }}
accounts {{
  A: {{ jetstream: enabled, users: [{{user: a, password: a}}] }}
  B: {{ users: [{{user: b, password: b}}] }}
  L: {{ jetstream: {{ max_mem: 1K, max_file: 4K, max_streams: 2, max_consumers: 1, max_ack_pending: 10 }}
       users: [{{user: l, password: l}}] }}
  R: {{ jetstream: {{ max_bytes_required: true, mem_max_stream_bytes: 2K, store_max_stream_bytes: 3K }}
       users: [{{user: r, password: r}}] }}
  SYS: {{ users: [{{user: s, password: s}}] }}
}}
system_account: SYS
authorization {{ users: [{{user: g, password: g}}] }}
"""

UNLIMITED = account_js_limits()  # all -1 and false: checked against nats-server below


class Setup:
    def __init__(self, server: ServerProcess, store: Path) -> None:
        self.server = server
        self.store = store
        self.clients: dict[str, Client] = {}

    async def client(self, user: str) -> Client:
        if user not in self.clients:
            self.clients[user] = await nats.connect(
                self.server.url, user=user, password=user, allow_reconnect=False
            )
        return self.clients[user]


@pytest.fixture(scope="module", params=["pynatsd", "nats-server"])
def server(request: pytest.FixtureRequest) -> Iterator[tuple[ServerProcess, Path]]:
    require(request.param)
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "store"
        with server_with_config(request.param, Path(tmp) / "limits.conf", CONF.format(store=store)) as proc:
            yield proc, store


@pytest.fixture
async def setup(server: tuple[ServerProcess, Path]) -> AsyncIterator[Setup]:
    s = Setup(*server)
    yield s
    for nc in s.clients.values():
        await nc.close()


async def call(s: Setup, user: str, subject: str, body: Any = b"") -> dict[str, Any]:
    nc = await s.client(user)
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    out: dict[str, Any] = json.loads((await nc.request(subject, data, timeout=5)).data)
    return out


def code(answer: dict[str, Any]) -> int | None:
    error = answer.get("error")
    return int(error["err_code"]) if error else None


NOT_ENABLED = {"code": 503, "err_code": 10039, "description": "JetStream not enabled for account"}


@pytest.mark.parametrize("user", ["b", "g"], ids=["account-without", "global-account"])
async def test_accounts_not_given_jetstream_get_10039_and_store_nothing(setup: Setup, user: str) -> None:
    stream = {"name": "S", "subjects": ["s"]}
    for subject, body, extras in (
        ("$JS.API.INFO", b"", {}),
        ("$JS.API.STREAM.CREATE.S", stream, {}),
        ("$JS.API.STREAM.INFO.S", b"", {"total": 0, "offset": 0, "limit": 0}),
        ("$JS.API.STREAM.NAMES", b"", {"total": 0, "offset": 0, "limit": 0, "streams": None}),
        ("$JS.API.STREAM.LIST", b"", {"total": 0, "offset": 0, "limit": 0, "streams": []}),
        ("$JS.API.STREAM.PURGE.S", b"", {"purged": 0}),
        ("$JS.API.CONSUMER.NAMES.S", b"", {"total": 0, "offset": 0, "limit": 0, "consumers": []}),
        ("$JS.API.CONSUMER.DELETE.S.C", b"", {}),
    ):
        answer = await call(setup, user, subject, body)
        answer.pop("type")
        assert answer == {"error": NOT_ENABLED, **extras}, subject
    nc = await setup.client(user)
    for subject in ("$JS.API.CONSUMER.MSG.NEXT.S.C", "$JS.API.DIRECT.GET.S"):
        with pytest.raises(nats.errors.NoRespondersError):
            await nc.request(subject, b"", timeout=5)
    account_dir = "B" if user == "b" else "$G"
    assert not (setup.store / "jetstream" / account_dir).exists()


async def test_the_system_account_has_no_jetstream(setup: Setup) -> None:
    """Its clients get account info's 10039, and a system response with it for any other API subject."""
    answers = [
        await call(setup, "s", subject, body)
        for subject, body in (
            ("$JS.API.INFO", b""),
            ("$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s"]}),
            ("$JS.API.CONSUMER.MSG.NEXT.S.C", b""),
            ("$JS.API.NO.SUCH.REQUEST", b""),
        )
    ]
    types = ["account_info_response"] + ["system_response"] * 3
    assert answers == [{"type": "io.nats.jetstream.api.v1." + t, "error": NOT_ENABLED} for t in types]
    assert not (setup.store / "jetstream" / "SYS").exists()


async def test_account_info_reports_the_account_limits(setup: Setup) -> None:
    limits = {user: (await call(setup, user, "$JS.API.INFO"))["limits"] for user in "alr"}
    assert limits["a"] == UNLIMITED
    assert limits["l"] == {
        **UNLIMITED,
        **{"max_memory": 1000, "max_storage": 4000, "max_streams": 2, "max_consumers": 1},
        "max_ack_pending": 10,
    }
    assert limits["r"] == {
        **UNLIMITED,
        **{"memory_max_stream_bytes": 2000, "storage_max_stream_bytes": 3000, "max_bytes_required": True},
    }


async def test_limits_are_enforced_with_nats_server_codes(setup: Setup) -> None:
    """Steps in order, each with the error code nats-server answers (None: accepted)."""
    explicit = {"ack_policy": "explicit"}
    c1 = {"stream_name": "M1", "config": {"name": "C1", **explicit}}
    c2 = {"stream_name": "M1", "config": {"name": "C2", **explicit}}
    steps: list[tuple[str, str, Any, int | None]] = [
        ("l", "$JS.API.STREAM.CREATE.M1", {"name": "M1", "subjects": ["m1"], "storage": "memory"}, None),
        ("l", "$JS.API.STREAM.CREATE.M1", {"name": "M1", "subjects": ["m1"], "storage": "memory"}, None),
        ("l", "$JS.API.STREAM.CREATE.M2",
         {"name": "M2", "subjects": ["m2"], "storage": "memory", "max_bytes": 2048}, 10028),
        ("l", "$JS.API.STREAM.CREATE.F1", {"name": "F1", "subjects": ["f1"], "max_bytes": 8000}, 10047),
        ("l", "$JS.API.STREAM.CREATE.F4", {"name": "F4", "subjects": ["f4"], "max_consumers": 5}, 10026),
        ("l", "$JS.API.STREAM.CREATE.F2", {"name": "F2", "subjects": ["f2"], "max_bytes": 1000}, None),
        ("l", "$JS.API.STREAM.UPDATE.F2", {"name": "F2", "subjects": ["f2"], "max_bytes": 3000}, None),
        ("l", "$JS.API.STREAM.UPDATE.F2", {"name": "F2", "subjects": ["f2"], "max_bytes": 5000}, 10047),
        ("l", "$JS.API.STREAM.CREATE.F3", {"name": "F3", "subjects": ["f3"]}, 10027),
        ("l", "$JS.API.CONSUMER.CREATE.M1.C1",
         {"stream_name": "M1", "config": {"name": "C1", **explicit, "max_ack_pending": 20}}, 10121),
        ("l", "$JS.API.CONSUMER.CREATE.M1.C1", c1, None),
        ("l", "$JS.API.CONSUMER.CREATE.M1.C2", c2, 10026),
        ("r", "$JS.API.STREAM.CREATE.R1", {"name": "R1", "subjects": ["r1"]}, 10113),
        ("r", "$JS.API.STREAM.CREATE.R2",
         {"name": "R2", "subjects": ["r2"], "storage": "memory", "max_bytes": 4096}, 10122),
        ("r", "$JS.API.STREAM.CREATE.R3", {"name": "R3", "subjects": ["r3"], "max_bytes": 4096}, 10122),
        ("r", "$JS.API.STREAM.CREATE.R4", {"name": "R4", "subjects": ["r4"], "max_bytes": 2048}, None),
        ("r", "$JS.API.STREAM.UPDATE.R4", {"name": "R4", "subjects": ["r4"], "max_bytes": 9048}, 10122),
        ("r", "$JS.API.STREAM.UPDATE.R4", {"name": "R4", "subjects": ["r4"]}, 10113),
    ]  # fmt: skip
    got = [code(await call(setup, user, subject, body)) for user, subject, body, _ in steps]
    assert got == [expected for *_, expected in steps]
    consumer = await call(setup, "l", "$JS.API.CONSUMER.INFO.M1.C1")
    assert consumer["config"]["max_ack_pending"] == 10  # the account's, below the default of 1000
    # max_memory: 1000 bytes; a stored message of 600 bytes counts 618 (subject, payload, 16)
    nc = await setup.client("l")
    acks = [json.loads((await nc.request("m1", b"x" * 600, timeout=5)).data) for _ in range(2)]
    assert acks[0] == {"stream": "M1", "seq": 1}
    assert acks[1] == {
        "error": {"code": 400, "err_code": 10002, "description": "resource limits exceeded for account"},
        "stream": "M1",
        "seq": 0,
    }
    info = await call(setup, "l", "$JS.API.INFO")
    assert (info["memory"], info["streams"], info["consumers"]) == (618, 2, 1)
    assert (info["reserved_memory"], info["reserved_storage"]) == (0, 3000)  # F2's max_bytes


# -- the config forms nats-server accepts or refuses -------------------------------------------------------
FORMS = [
    ("jetstream: enabled", True),
    ("jetstream: Enable", True),
    ("jetstream: false", True),
    ("jetstream: { max_memory: 1G, max_store: 1G, streams: 3, consumers: 4, max_bytes: true }", True),
    ("jetstream: { mem: 1M, disk: 1M, max_ack_pending: 5, memory_max_stream_bytes: 1K }", True),
    ("jetstream: { disk_max_stream_bytes: 1K, max_stream_bytes: false, cluster_traffic: system }", True),
    ("jetstream: maybe", False),
    ('jetstream: { max_mem: "lots" }', False),
    ("jetstream: { max_bytes_required: 1 }", False),
    ("jetstream: { max_msgs: 5 }", False),
    ("jetstream: { cluster_traffic: nobody }", False),
]


@pytest.mark.parametrize("form, valid", FORMS, ids=[f for f, _ in FORMS])
def test_account_jetstream_config_forms_as_nats_server(tmp_path: Path, form: str, valid: bool) -> None:
    conf = tmp_path / "form.conf"
    conf.write_text(
        f"jetstream: enabled\naccounts {{ A: {{ {form}, users: [{{user: a, password: a}}] }} }}\n"
    )
    require("nats-server")
    for command in ([nats_server_binary() or "nats-server"], pynatsd_command()):
        done = subprocess.run([*command, "-t", "-c", str(conf)], capture_output=True, timeout=60)
        assert (done.returncode == 0) == valid, (command, done.stdout, done.stderr)


@pytest.mark.parametrize("kind", ["pynatsd", "nats-server"])
def test_jetstream_in_the_system_account_stops_the_server(tmp_path: Path, kind: str) -> None:
    require(kind)
    conf = tmp_path / "sys.conf"
    conf.write_text(
        f'jetstream {{ store_dir: "{tmp_path}" }}\nsystem_account: SYS\n'
        "accounts { SYS: { jetstream: enabled, users: [{user: s, password: s}] } }\n"
    )
    command = [nats_server_binary() or "nats-server"] if kind == "nats-server" else pynatsd_command()
    done = subprocess.run([*command, "-p", "-1", "-c", str(conf)], capture_output=True, timeout=60)
    assert done.returncode != 0
    assert b"Not allowed to enable JetStream on the system account" in done.stdout + done.stderr
