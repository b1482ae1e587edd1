"""Mirror and source catch-up: how fast a new mirror, then a new source, copies an origin's backlog.

The origin (a file stream) gets N messages (128 B, ten subjects); then a mirror of it is created and timed
until it holds all N, then a source likewise. Two topologies: in-process (the copies on the origin's server)
and cross-server (the copies on a leaf node, through the `external` API prefix of the hub's JetStream
domain; leaf and hub of the same kind). pynatsd and nats-server alternate A B A B in the same run; the
figures are medians of --reps runs (N over the wall time of each catch-up) and pynatsd's ratio to
nats-server. The client is nats-py for both servers, so the ratios compare servers.

    python bench/jetstream/sourcing_catchup.py [--messages 100000] [--reps 3] [--out bench/results]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import nats

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.servers import free_port, nats_server_binary, start_server  # noqa: E402

SIZE = 128
KINDS = ("nats-server", "pynatsd")
TOPOLOGIES = ("in-process", "cross-server")
EXTERNAL = {"api": "$JS.hub.API", "deliver": "hub.deliver"}


@asynccontextmanager
async def _servers(kind: str, topology: str, store: Path) -> AsyncIterator[tuple[str, str]]:
    """(origin's url, copies' url): one server, or a hub and a leaf node of it (JetStream domains)."""
    if topology == "in-process":
        server = start_server(kind, ["-js", "-sd", str(store)])
        try:
            yield server.url, server.url
        finally:
            server.stop()
        return
    leaf_port = free_port()
    hub_conf, leaf_conf = store / "hub.conf", store / "leaf.conf"
    hub_conf.write_text(
        f'jetstream {{ store_dir: "{store / "hub"}", domain: hub }}\n'
        f"leafnodes {{ listen: 127.0.0.1:{leaf_port} }}\n"
    )
    leaf_conf.write_text(
        f'jetstream {{ store_dir: "{store / "leaf"}", domain: leaf }}\n'
        f'leafnodes {{ remotes [ {{ url: "nats-leaf://127.0.0.1:{leaf_port}" }} ] }}\n'
    )
    hub = start_server(kind, ["-c", str(hub_conf)])
    leaf = start_server(kind, ["-c", str(leaf_conf)])
    try:
        nc = await nats.connect(leaf.url)
        while True:  # until the hub's JetStream answers across the link
            try:
                await nc.request("$JS.hub.API.INFO", b"", timeout=0.5)
                break
            except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
                await asyncio.sleep(0.1)
        await nc.close()
        yield hub.url, leaf.url
    finally:
        leaf.stop()
        hub.stop()


async def run(kind: str, topology: str, messages: int) -> dict[str, float]:
    """Catch-up rates (messages per second) of a mirror and a source on server `kind`."""
    with tempfile.TemporaryDirectory() as directory:
        async with _servers(kind, topology, Path(directory)) as (origin_url, copies_url):
            origin = await nats.connect(origin_url)
            await origin.jetstream(timeout=10).add_stream(name="ORIGIN", subjects=["orig.>"])
            payload = b"x" * SIZE
            for i in range(messages - 1):
                await origin.publish(f"orig.{i % 10}", payload)
            await origin.jetstream(timeout=30).publish("orig.0", payload)  # acked after all before it
            await origin.close()
            nc = await nats.connect(copies_url)
            js = nc.jetstream(timeout=10)
            external = {"external": EXTERNAL} if topology == "cross-server" else {}
            copies = {
                "mirror": {"mirror": {"name": "ORIGIN", **external}},
                "source": {"sources": [{"name": "ORIGIN", **external}]},
            }
            rates = {}
            for what, cfg in copies.items():
                name = what.upper()
                start = time.perf_counter()
                body = json.dumps({"name": name, **cfg}).encode()
                await nc.request(f"$JS.API.STREAM.CREATE.{name}", body, timeout=10)
                while (await js.stream_info(name)).state.messages < messages:
                    await asyncio.sleep(0.01)
                rates[what] = messages / (time.perf_counter() - start)
            await nc.close()
            return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--topologies", default=",".join(TOPOLOGIES))
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = parser.parse_args()
    binary = nats_server_binary()
    version = subprocess.run([str(binary), "--version"], capture_output=True, text=True).stdout.strip()
    runs: dict[str, dict[str, list[float]]] = {}
    for rep in range(args.reps):
        for topology in args.topologies.split(","):
            for kind in KINDS:  # A B A B: both servers see the same moment of the machine's load
                rates = asyncio.run(run(kind, topology, args.messages))
                for what, rate in rates.items():
                    runs.setdefault(f"{what} {topology}", {k: [] for k in KINDS})[kind].append(rate)
                print(
                    f"rep {rep + 1} {topology} {kind}: "
                    + ", ".join(f"{w} {r:,.0f}/s" for w, r in rates.items())
                )
    table = {}
    print(f"\n{args.messages:,} messages of {SIZE} B, medians of {args.reps} ({version})")
    print(f"{'catch-up':<24}{'nats-server':>14}{'pynatsd':>12}{'ratio':>8}")
    for row, by in runs.items():
        ref, ours = statistics.median(by["nats-server"]), statistics.median(by["pynatsd"])
        table[row] = {"nats-server": ref, "pynatsd": ours, "ratio": ours / ref, "runs": by}
        print(f"{row:<24}{ref:>14,.0f}{ours:>12,.0f}{ours / ref:>8.2f}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "sourcing.json").write_text(
        json.dumps({"args": vars(args), "nats-server": version, "rates": table}, indent=1)
    )


if __name__ == "__main__":
    main()
