"""The wildcard trie: only subscriptions with a ``*`` or ``>`` token live here.

Literal subscriptions sit in a flat dict keyed by their own subject bytes (see sublist.py), so the trie
stays as small as the set of wildcard filters. Matching follows nats-server's matchLevel: at each level add
the ``>`` child, recurse into the ``*`` child, then follow the literal child.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from matcher.leaf import slot_add, slot_iter, slot_remove
from matcher.subjects import FWC, PWC


class Node:
    """One trie position: literal children, the ``*`` child, the ``>`` child and the subscribers here."""

    __slots__ = ("fwc", "nodes", "pwc", "slot")

    def __init__(self) -> None:
        self.nodes: dict[bytes, Node] | None = None
        self.pwc: Node | None = None
        self.fwc: Node | None = None
        self.slot: Any = None

    def is_empty(self) -> bool:
        return self.slot is None and self.pwc is None and self.fwc is None and not self.nodes


def _child(node: Node, token: bytes, create: bool) -> Node | None:
    if token == PWC:
        child = node.pwc
        if child is None and create:
            child = node.pwc = Node()
        return child
    if token == FWC:
        child = node.fwc
        if child is None and create:
            child = node.fwc = Node()
        return child
    nodes = node.nodes
    child = None if nodes is None else nodes.get(token)
    if child is None and create:
        if nodes is None:
            nodes = node.nodes = {}
        child = nodes[token] = Node()
    return child


def _unlink(parent: Node, token: bytes) -> None:
    if token == PWC:
        parent.pwc = None
    elif token == FWC:
        parent.fwc = None
    else:
        nodes = parent.nodes
        assert nodes is not None
        del nodes[token]
        if not nodes:
            parent.nodes = None


def insert(root: Node, tokens: list[bytes], sub: Any) -> bool:
    """Add ``sub`` under ``tokens``; False if it was already there."""
    node = root
    for t in tokens:
        node = _child(node, t, True)  # type: ignore[assignment]
    node.slot, added = slot_add(node.slot, sub)
    return added


def remove(root: Node, tokens: list[bytes], sub: Any) -> bool:
    """Remove ``sub`` from under ``tokens``, pruning nodes left empty; False if it was not there."""
    path: list[Node] = [root]
    node: Node | None = root
    for t in tokens:
        node = _child(node, t, False)  # type: ignore[arg-type]
        if node is None:
            return False
        path.append(node)
    assert node is not None
    node.slot, removed = slot_remove(node.slot, sub)
    if not removed:
        return False
    for i in range(len(tokens) - 1, -1, -1):
        if not path[i + 1].is_empty():
            break
        _unlink(path[i], tokens[i])
    return True


def match(node: Node, tokens: list[bytes], i: int, n: int, out: list[Any]) -> None:
    """Append to ``out`` the slots under ``node`` matching ``tokens[i:n]``."""
    while i < n:
        fwc = node.fwc
        if fwc is not None:
            out.append(fwc.slot)
        pwc = node.pwc
        if pwc is not None:
            if i + 1 == n:
                if pwc.slot is not None:
                    out.append(pwc.slot)
            else:
                match(pwc, tokens, i + 1, n, out)
        nodes = node.nodes
        if nodes is None:
            return
        nxt = nodes.get(tokens[i])
        if nxt is None:
            return
        node = nxt
        i += 1
    if node.slot is not None:
        out.append(node.slot)


def iter_subs(node: Node) -> Iterator[Any]:
    """Every subscription under ``node``."""
    stack = [node]
    while stack:
        n = stack.pop()
        if n.slot is not None:
            yield from slot_iter(n.slot)
        if n.nodes:
            stack.extend(n.nodes.values())
        if n.pwc is not None:
            stack.append(n.pwc)
        if n.fwc is not None:
            stack.append(n.fwc)
