"""Mirror and source catch-up: how fast a new mirror, then a new source, copies an origin's backlog.

The origin (a file stream) gets N messages (100 B, ten subjects); then a mirror of it is created and timed
until it holds all N, then a source likewise. The figure is N over that wall time, per server.

    python bench/jetstream/sourcing_catchup.py [--messages 100000] [--servers pynatsd,nats-server]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

import nats

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.servers import start_server  # noqa: E402

_COPIES = {"mirror": {"mirror": {"name": "ORIGIN"}}, "source": {"sources": [{"name": "ORIGIN"}]}}


async def run(kind: str, messages: int) -> dict[str, float]:
    """Catch-up rates (messages per second) of a mirror and a source on server `kind`."""
    with tempfile.TemporaryDirectory() as store:
        server = start_server(kind, ["-js", "-sd", store])
        try:
            nc = await nats.connect(server.url)
            js = nc.jetstream(timeout=10)
            await js.add_stream(name="ORIGIN", subjects=["orig.>"])
            for i in range(messages - 1):
                await nc.publish(f"orig.{i % 10}", b"x" * 100)
            await js.publish("orig.0", b"x" * 100)  # acknowledged after every one before it
            rates = {}
            for what, cfg in _COPIES.items():
                name = what.upper()
                start = time.perf_counter()
                body = json.dumps({"name": name, **cfg}).encode()
                await nc.request(f"$JS.API.STREAM.CREATE.{name}", body, timeout=5)
                while (await js.stream_info(name)).state.messages < messages:
                    await asyncio.sleep(0.01)
                rates[what] = messages / (time.perf_counter() - start)
            await nc.close()
            return rates
        finally:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--servers", default="pynatsd,nats-server")
    args = parser.parse_args()
    for kind in args.servers.split(","):
        rates = asyncio.run(run(kind, args.messages))
        print(f"{kind}: " + ", ".join(f"{what} {rate:,.0f} msgs/s" for what, rate in rates.items()))


if __name__ == "__main__":
    main()
