"""A TCP relay in front of each cluster node's route listener, to cut nodes off and heal them (partitions).

Each node advertises its relay's port (`cluster { advertise }`) and the others route to the seed's relay,
so every route connection, gossiped ones included, goes through the relay of the node it was dialed to.
The relay learns the dialing server from the `server_name` of the INFO it sends, so `Switchboard.isolate`
can close every route connection a node is at either end of and refuse its new ones until `heal`: to the
servers it is a route that died and cannot be dialed again, as when its network is cut. `Switchboard.pause`
instead stops reading them: the connections stay open, what is sent waits (in the sockets' buffers, then
in the senders') and arrives late, after `heal`, as when a network stalls."""

from __future__ import annotations

import contextlib
import re
import socket
import threading
from collections.abc import Iterator

SERVER_NAME = re.compile(rb'"server_name":"([^"]+)"')
SNIFF_LIMIT = 64 * 1024  # the dialer's CONNECT and INFO come first; a few KiB at most


class Switchboard:
    """The relays of one cluster and which nodes are cut off."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._isolated: set[str] = set()
        self._paused: set[str] = set()
        self.late: dict[tuple[str, str], int] = {}  # (from, to) -> bytes held by a pause, then delivered
        self._links: list[tuple[str, str, socket.socket, socket.socket]] = []  # dialer, target, both ends
        self._listeners: list[socket.socket] = []
        self.ports: dict[str, int] = {}

    def relay(self, name: str, target_port: int) -> int:
        """A relay to node `name`'s route listener on `target_port`; its own port."""
        listener = socket.create_server(("127.0.0.1", 0))
        self._listeners.append(listener)
        threading.Thread(target=self._accept, args=(listener, name, target_port), daemon=True).start()
        self.ports[name] = int(listener.getsockname()[1])
        return self.ports[name]

    def isolate(self, name: str) -> None:
        """Cut `name` off: its route connections closed, new ones refused."""
        with self._lock:
            self._isolated.add(name)
            cut = [link for link in self._links if name in link[:2]]
        for _, _, a, b in cut:
            _close(a, b)

    def pause(self, name: str) -> None:
        """Stop relaying what `name` sends and what is sent to it, until `heal`."""
        with self._lock:
            self._paused.add(name)

    def heal(self) -> None:
        with self._lock:
            self._isolated.clear()
            self._paused.clear()
            self._lock.notify_all()

    def links(self) -> list[tuple[str, str]]:
        """(dialer, target) of each open route connection."""
        with self._lock:
            return [(d, t) for d, t, _, _ in self._links]

    def close(self) -> None:
        self.heal()  # paused relays let go
        for listener in self._listeners:
            listener.close()
        with self._lock:
            links, self._links = self._links, []
        for _, _, a, b in links:
            _close(a, b)

    def _allowed(self, *names: str) -> bool:
        with self._lock:
            return not self._isolated.intersection(names)

    def _accept(self, listener: socket.socket, target: str, target_port: int) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:  # closed
                return
            threading.Thread(target=self._link, args=(client, target, target_port), daemon=True).start()

    def _wait_unpaused(self, names: list[str]) -> bool:
        """Until no end of the link is paused; True if it had to wait."""
        with self._lock:
            paused = bool(self._paused.intersection(names))
            self._lock.wait_for(lambda: not self._paused.intersection(names))
            return paused

    def _pump(self, src: socket.socket, dst: socket.socket, names: list[str], upstream: bool) -> None:
        """Bytes from `src` to `dst` until either closes (held while an end is paused); then both closed.
        `names`: the link's target, then its dialer once known; `upstream`: from the dialer."""
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                if self._wait_unpaused(names) and len(names) == 2:
                    way = (names[1], names[0]) if upstream else (names[0], names[1])
                    with self._lock:
                        self.late[way] = self.late.get(way, 0) + len(data)
                dst.sendall(data)
        _close(src, dst)

    def _link(self, client: socket.socket, target: str, target_port: int) -> None:
        if not self._allowed(target):
            client.close()
            return
        try:
            upstream = socket.create_connection(("127.0.0.1", target_port), timeout=5)
        except OSError:
            client.close()
            return
        upstream.settimeout(None)
        # The server's INFO goes to the dialer at once; the dialer's bytes wait until its name is known.
        names = [target]
        threading.Thread(target=self._pump, args=(upstream, client, names, False), daemon=True).start()
        head = b""
        match = None
        with contextlib.suppress(OSError):
            while match is None and len(head) < SNIFF_LIMIT:
                chunk = client.recv(65536)
                if not chunk:
                    break
                head += chunk
                match = SERVER_NAME.search(head)
        dialer = match.group(1).decode() if match else "?"
        with self._lock:
            if match is None or self._isolated.intersection((dialer, target)):
                link = None
            else:
                link = (dialer, target, client, upstream)
                self._links.append(link)
        if link is None:
            _close(client, upstream)
            return
        names.append(dialer)
        try:
            self._wait_unpaused(names)
            upstream.sendall(head)
            self._pump(client, upstream, names, True)
        except OSError:
            _close(client, upstream)
        finally:
            with self._lock, contextlib.suppress(ValueError):
                self._links.remove(link)


def _close(*socks: socket.socket) -> None:
    for sock in socks:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()


@contextlib.contextmanager
def switchboard() -> Iterator[Switchboard]:
    board = Switchboard()
    try:
        yield board
    finally:
        board.close()
