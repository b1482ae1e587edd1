"""Superclusters of real servers (pynatsd and nats-server): clusters joined by gateways."""

from __future__ import annotations

import json
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.servers import ServerProcess, free_port, require, start_server

ACCOUNT = "$G"


@dataclass
class Member:
    """One server of a cluster, on ports that stay its own across a restart."""

    kind: str
    cluster: str
    index: int
    port: int
    http_port: int
    gateway_port: int
    route_port: int
    process: ServerProcess | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def gatewayz(self, query: str = "") -> dict[str, Any]:
        return self.monitor(f"/gatewayz{query}")

    def monitor(self, path: str) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}{path}", timeout=5) as resp:
            data: dict[str, Any] = json.load(resp)
            return data


def _ports(count: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


class Supercluster:
    """`layout`: cluster name -> the kinds of its servers; each server names the first server of every
    other cluster as its gateway, and (2 servers or more) routes to the servers before it in its own."""

    def __init__(
        self,
        layout: dict[str, list[str]],
        gateway_block: dict[str, str] | None = None,
        credentials: dict[str, str] | None = None,
        connected: bool = True,
        silent: tuple[str, ...] = (),
        names: dict[str, list[str]] | None = None,
        top: str = "",
    ) -> None:
        """`gateway_block`: cluster name -> more keys of its servers' gateway block; `credentials`:
        cluster name -> the `user:password` the others dial it with; `connected` False: not waited for;
        `silent`: clusters that name no other (they only accept); `names`: cluster -> the only
        clusters it names (the others it learns through gossip)."""
        self.silent = silent
        self.names = names or {}
        self.top = top  # more top-level configuration of every server
        self.gateway_block = gateway_block or {}
        self.credentials = credentials or {}
        if any(kind == "nats-server" for kinds in layout.values() for kind in kinds):
            require("nats-server")
        self.dir = Path(tempfile.mkdtemp(prefix="supercluster-"))
        self.clusters: dict[str, list[Member]] = {}
        for name, kinds in layout.items():
            members = []
            for i, kind in enumerate(kinds):
                port, http, gw, route = _ports(4)
                members.append(Member(kind, name, i, port, http, gw, route))
            self.clusters[name] = members
        # The first server of each cluster is the one the others name (gateway URLs, routes); the others
        # are found through it (gossip), so a later server whose port was taken meanwhile (free_port's
        # race with the first servers' outgoing connections) starts again on other ports.
        members = sorted((m for ms in self.clusters.values() for m in ms), key=lambda m: m.index)
        for member in members:
            for attempt in range(3):
                try:
                    self.start(member)
                    break
                except RuntimeError:
                    if member.index == 0 or attempt == 2:
                        raise
                    member.port, member.http_port, member.gateway_port, member.route_port = _ports(4)
        if connected:
            self.wait_connected()

    def __getitem__(self, name: str) -> list[Member]:
        return self.clusters[name]

    def config(self, member: Member) -> str:
        remotes = ", ".join(
            f'{{name: "{name}", urls: ["nats://{self._userinfo(name)}127.0.0.1:{members[0].gateway_port}"]}}'
            for name, members in self.clusters.items()
            if name != member.cluster
            and member.cluster not in self.silent
            and name in self.names.get(member.cluster, [name])
        )
        text = (
            f'{self.top}\nserver_name: "{member.cluster}{member.index}"\n'
            f'gateway {{\n  name: "{member.cluster}"\n  listen: "127.0.0.1:{member.gateway_port}"\n'
            f"  gateways: [{remotes}]\n  {self.gateway_block.get(member.cluster, '')}\n}}\n"
        )
        cluster = self.clusters[member.cluster]
        if len(cluster) > 1:
            routes = ", ".join(f'"nats://127.0.0.1:{m.route_port}"' for m in cluster[: member.index])
            text += (
                f'cluster {{\n  name: "{member.cluster}"\n  listen: "127.0.0.1:{member.route_port}"\n'
                f"  routes: [{routes}]\n}}\n"
            )
        return text

    def _userinfo(self, cluster: str) -> str:
        credentials = self.credentials.get(cluster)
        return f"{credentials}@" if credentials else ""

    def start(self, member: Member) -> None:
        conf = self.dir / f"{member.cluster}{member.index}.conf"
        conf.write_text(self.config(member))
        member.process = start_server(
            member.kind, ["-c", str(conf)], port=member.port, http_port=member.http_port
        )

    def stop(self, member: Member) -> None:
        if member.process is not None:
            member.process.stop()
            member.process = None

    def close(self) -> None:
        for members in self.clusters.values():
            for member in members:
                self.stop(member)

    def wait_connected(self, timeout: float = 30.0) -> None:
        """Until every running server has its outbound gateway to every other cluster, and every
        cluster has an inbound one from each running server of the others."""
        deadline = time.monotonic() + timeout
        while True:
            missing = self._missing()
            if not missing:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"gateways not connected: {missing}")
            time.sleep(0.1)

    def _missing(self) -> list[str]:
        missing = []
        running = {name: [m for m in members if m.process] for name, members in self.clusters.items()}
        inbound: dict[str, dict[str, int]] = {name: {} for name in running}
        for name, members in running.items():
            for member in members:
                gatewayz = member.gatewayz()
                for other in running:
                    out = gatewayz["outbound_gateways"].get(other, {})
                    if other != name and "connection" not in out:
                        missing.append(f"{name}{member.index} -> {other}")
                for other, conns in gatewayz["inbound_gateways"].items():
                    inbound[name][other] = inbound[name].get(other, 0) + len(conns)
        for name in running:
            for other, members in running.items():
                if other != name and inbound[name].get(other, 0) < len(members):
                    missing.append(f"{other} -> {name} inbound")
        return missing

    def wait_interest(
        self, publisher: Member, remote: str, subject: str, present: bool = True, account: str = ACCOUNT
    ) -> None:
        """Until `publisher`'s outbound gateway to `remote` knows (or no longer knows) the remote's
        interest in `subject` (interest-only mode: the remote's RS+)."""
        deadline = time.monotonic() + 15.0
        while True:
            outbound = publisher.gatewayz("?accs=1&subs=1")["outbound_gateways"][remote]
            subjects = {
                s
                for acc in outbound.get("accounts", [])
                if acc["name"] == account
                for s in acc.get("subscriptions_list", [])
            }
            if (subject in subjects) == present:
                return
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{publisher.cluster}{publisher.index}: interest of {remote} in {subject}: {subjects}"
                )
            time.sleep(0.05)

    def out_msgs(self, publisher: Member, remote: str) -> int:
        outbound = publisher.gatewayz()["outbound_gateways"][remote]
        return int(outbound["connection"]["out_msgs"])

    def account_mode(self, publisher: Member, remote: str) -> str:
        outbound = publisher.gatewayz("?accs=1")["outbound_gateways"][remote]
        modes = [acc["interest_mode"] for acc in outbound.get("accounts", []) if acc["name"] == ACCOUNT]
        return modes[0] if modes else ""
