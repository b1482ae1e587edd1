"""nats-py's object store end to end against nats-server -js and pynatsd -js: multi-MiB objects put and read
back, info, list, links (to an object and to a bucket), watch, delete, rename, seal and bucket status give
the same results on both servers. (nats-py's update_meta cannot rename: it refuses any new name.)"""

from __future__ import annotations

import base64
import hashlib
import json
import random
from collections.abc import Iterator
from typing import Any

import pytest
from nats.aio.client import Client
from nats.js import api
from nats.js.errors import BadRequestError, LinkIsABucketError, NotFoundError, ObjectNotFoundError

from tests.jetstream.test_consumer_pause import Pair, _on_both
from tests.servers import jetstream_pair

BIG = random.Random(34).randbytes(3 * 1024 * 1024 + 17)  # 25 chunks of 128 KiB, the last one short


def _info(info: api.ObjectInfo) -> dict[str, Any]:
    """An object's info without what each put makes anew (its nuid and time)."""
    out = {k: v for k, v in info.as_dict().items() if k not in ("nuid", "mtime")}
    return json.loads(json.dumps(out, default=str))


async def _link(nc: Client, bucket: str, name: str, target: dict[str, Any]) -> None:
    """A link as nats.go's AddLink / AddBucketLink writes one (nats-py reads links but makes none)."""
    meta = {"name": name, "bucket": bucket, "nuid": "LINK" + name, "size": 0, "chunks": 0}
    meta["options"] = {"link": target}
    subject = f"$O.{bucket}.M.{base64.urlsafe_b64encode(name.encode()).decode()}"
    await nc.jetstream().publish(subject, json.dumps(meta).encode(), headers={"Nats-Rollup": "sub"})


async def _state(nc: Client, bucket: str) -> Any:
    info = json.loads((await nc.request(f"$JS.API.STREAM.INFO.OBJ_{bucket}", b"", timeout=2)).data)
    st = info["state"]
    return (st["messages"], st["bytes"], st["num_subjects"], st.get("num_deleted", 0))


async def _object_flow(nc: Client, out: list[Any]) -> None:
    js = nc.jetstream()
    obs = await js.create_object_store("OS", description="d")
    other = await js.create_object_store("OS2", storage=api.StorageType.MEMORY)
    out.append(_info(await obs.put("big", BIG)))
    out.append(_info(await obs.put("small", b"hi", meta=api.ObjectMeta(name="small", description="s"))))
    out.append(_info(await obs.put("empty", b"")))
    await other.put("elsewhere", b"x" * 1000)
    got = await obs.get("big")
    out.append((len(got.data), hashlib.sha256(got.data).hexdigest() == hashlib.sha256(BIG).hexdigest()))
    out.append(((await obs.get("empty")).data, (await obs.get("small")).data))
    out.append(await _state(nc, "OS"))
    # A watcher: the current objects, then the changes as they come.
    watcher = await obs.watch()
    initial = []
    while (entry := await watcher.updates(5)) is not None:
        initial.append(entry.name)
    out.append(sorted(initial))
    await obs.put("later", b"l" * 200_000)
    await obs.delete("small")
    out.append([(e.name, e.deleted, e.size) for e in [await watcher.updates(5), await watcher.updates(5)]])
    await watcher.stop()
    # Links: to an object (read through it), to another bucket's object, to a whole bucket (refused).
    await _link(nc, "OS", "lnk", {"bucket": "OS", "name": "big"})
    await _link(nc, "OS", "far", {"bucket": "OS2", "name": "elsewhere"})
    await _link(nc, "OS", "bucket", {"bucket": "OS2"})
    out.append(len((await obs.get("lnk")).data) == len(BIG))
    out.append((await obs.get("far")).data == b"x" * 1000)
    try:
        await obs.get("bucket")
        out.append("bucket link read")
    except LinkIsABucketError:
        out.append("LinkIsABucketError")
    out.append(sorted((i.name, i.deleted, i.size, i.chunks) for i in await obs.list()))
    out.append(sorted(i.name for i in await obs.list(ignore_deletes=True)))
    # Delete: the chunks go, the object reads as not found; a new description by update_meta.
    await obs.delete("big")
    try:
        await obs.get("big")
        out.append("deleted object read")
    except ObjectNotFoundError:
        out.append("ObjectNotFoundError")
    await obs.update_meta("later", api.ObjectMeta(name="later", description="r"))
    out.append(_info(await obs.get_info("later")))
    out.append(len((await obs.get("later")).data))
    out.append(await _state(nc, "OS"))
    status = await obs.status()
    out.append((status.bucket, status.description, status.sealed, status.size, status.storage_type))
    # Sealed: nothing more goes in.
    await obs.seal()
    out.append((await obs.status()).sealed)
    try:
        await obs.put("after", b"no")
        out.append("put into a sealed bucket")
    except BadRequestError as err:
        out.append(("BadRequestError", err.err_code))
    out.append(await _state(nc, "OS"))
    try:
        await js.object_store("NOPE")
        out.append("missing bucket opened")
    except NotFoundError as err:
        out.append(("NotFoundError", err.err_code))
    out.append(await js.delete_object_store("OS2"))


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    with jetstream_pair(tmp_path_factory.mktemp("objects")) as servers:
        yield servers


async def test_object_store_matches_nats_server(pair: Pair) -> None:
    expected, got = await _on_both(pair, _object_flow)
    assert expected[3] == (len(BIG), True)
    diffs = [
        f"step {n}:\n  nats-server {w}\n  pynatsd     {h}"
        for n, (w, h) in enumerate(zip(expected, got, strict=False))
        if w != h
    ]
    assert not diffs and len(got) == len(expected), "\n".join(diffs)
