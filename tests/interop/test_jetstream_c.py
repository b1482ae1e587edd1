"""libnats (the C client) through its JetStream and KV API, against nats-server and pynatsd: the same
commands (scenarios like those nats-py plays in tests/jetstream/scenarios.py) get the same answers,
sequences and error codes from both."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from tests.interop.drivers import Driver
from tests.servers import ServerProcess, jetstream_pair


def limits_script() -> list[str]:
    """The discard/limits matrix as C commands: each stream takes seven publishes on three subjects."""
    lines = []
    limits = ["", "max_msgs=3", "max_bytes=150", "max_per=2", "max_per=1 dnps=1", "max_msgs=4 max_per=2"]
    for n, (lim, discard, storage) in enumerate(
        itertools.product(limits, ["old", "new"], ["file", "memory"])
    ):
        name = f"L{n}"
        lines.append(f"stream {name} {name}.* discard={discard} storage={storage} {lim}")
        lines += [f"pub {name}.{'abc'[i % 3]} {'x' * (i * 7 + 1)}" for i in range(7)]
        lines += [f"info {name}", f"get {name} 2", f"last {name} {name}.a", f"del {name} 3", f"del {name} 3"]
        lines += [f"del {name} 99", f"purge {name}", f"info {name}", f"delstream {name}"]
    return lines


SCRIPT = [
    "account",
    "stream E e.*",
    "pub e.a one",
    "pub e.a two msgid=m1",
    "pub e.a two msgid=m1",
    "pub e.a x elss=7",
    "pub e.b x elss=1",
    "pub e.a x els=9",
    "pub e.a x stream=other",
    "pub e.a x elmi=nope",
    "get E 9",
    "last E e.zz",
    "del E 1",
    "del E 1",
    "del E 50",
    "del NOPE 1",
    "info NOPE",
    "stream SEALED sealed sealed=1",
    "stream DN dn discard=new dnps=1",
    "stream DN dn dnps=1 max_per=2",
    "stream DR dr deny_purge=1 rollup=1",
    "stream SE se deny_delete=1",
    "pub se one",
    "del SE 1",
    "update SE se deny_delete=1 sealed=1",
    "pub se two",
    "del SE 1",
    "purge SE",
    "stream W w.* retention=workqueue",
    "consumer W c filter=w.a",
    "consumer W d filter=w.a",
    "pub w.a 1",
    "pub w.b 2",
    "pub w.a 3",
    "fetch W c 5",
    "cinfo W c",
    "info W",
    "stream P p.*",
    "pub p.a 1",
    "pub p.b 2",
    "pub p.a 3",
    "consumer P pc filter=p.a",
    "fetch P pc 1",
    "fetch P pc 5",
    "cinfo P pc",
    "kv B1 5",
    "kvput B1 a 1",
    "kvput B1 a 22",
    "kvput B1 b 333",
    "kvupdate B1 b 4444 3",
    "kvupdate B1 b stale 3",
    "kvcreate B1 b exists",
    "kvstatus B1",
    "kvdel B1 a",
    "kvget B1 a",
    "kvgetrev B1 a 1",
    "kvget B1 nope",
    "kvstatus B1",
    "kvcreate B1 a again",
    "kvpurge B1 b",
    "kvget B1 b",
    "kvstatus B1",
    "kvkeys B1",
    "kvhist B1 a",
    "kvhist B1 b",
    "kv B2 1 storage=memory max_bytes=300",
    "kvput B2 k 0123456789",
    "kvput B2 k 0123456789",
    "kvput B2 l 0123456789",
    "kvpurge B2 k",
    "kvstatus B2",
    "kvget B2 k",
    "account",
    *limits_script(),
]


@pytest.fixture(scope="module")
def js_pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    with jetstream_pair(tmp_path_factory.mktemp("js-c")) as pair:
        yield pair


def test_c_client_jetstream_matches_nats_server(
    c_driver: Driver, js_pair: tuple[ServerProcess, ServerProcess]
) -> None:
    ref, ours = js_pair
    stdin = "\n".join(SCRIPT) + "\n"
    want = c_driver.run("js", ref.url, stdin=stdin)
    have = c_driver.run("js", ours.url, stdin=stdin)
    assert len(want) == len(SCRIPT)
    diffs = [
        f"{cmd}\n  nats-server {a}\n  pynatsd     {b}"
        for cmd, a, b in zip(SCRIPT, want, have, strict=True)
        if a != b
    ]
    assert not diffs, f"{len(diffs)} of {len(SCRIPT)} commands differ:\n" + "\n".join(diffs)
