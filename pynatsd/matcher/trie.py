"""The wildcard trie: only subscriptions with a ``*`` or ``>`` token live here.

Literal subscriptions sit in a flat dict keyed by their own subject bytes (see sublist.py), so the trie
stays as small as the set of wildcard filters. Matching follows nats-server's matchLevel: at each level add
the ``>`` child, stack the ``*`` child, then follow the literal child.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import cast

from pynatsd.matcher.leaf import Slot, slot_add, slot_iter, slot_remove
from pynatsd.matcher.result import Subscriber
from pynatsd.protocol.subjects import FWC, PWC


class Node:
    """One trie position: literal children, the ``*`` child, the ``>`` child and the subscribers here.

    Literal children: ``nodes`` is None (none), the child Node itself with its token in ``tok`` (exactly
    one: most nodes below a wildcard are single chains, and a one-entry dict costs 224 bytes), or a dict
    token -> Node (``tok`` None).
    """

    __slots__ = ("fwc", "nodes", "pwc", "slot", "tok")

    def __init__(self) -> None:
        self.nodes: dict[bytes, Node] | Node | None = None
        self.tok: bytes | None = None
        self.pwc: Node | None = None
        self.fwc: Node | None = None
        self.slot: Slot | None = None

    def is_empty(self) -> bool:
        return self.slot is None and self.pwc is None and self.fwc is None and self.nodes is None

    def children(self) -> list[Node]:
        """The literal children."""
        nodes = self.nodes
        if nodes is None:
            return []
        if self.tok is not None:
            return [nodes]  # type: ignore[list-item]
        return list(cast(dict[bytes, Node], nodes).values())  # tok None: a dict (see the class)


def _literal_child(node: Node, token: bytes, create: bool) -> Node | None:
    nodes = node.nodes
    if nodes is None:
        if not create:
            return None
        child = node.nodes = Node()
        node.tok = token
        return child
    tok = node.tok
    if tok is not None:
        if tok == token:
            return nodes  # type: ignore[return-value]
        if not create:
            return None
        child = Node()
        node.nodes = {tok: nodes, token: child}  # type: ignore[dict-item]
        node.tok = None
        return child
    assert isinstance(nodes, dict)
    found = nodes.get(token)
    if found is None and create:
        found = nodes[token] = Node()
    return found


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
    return _literal_child(node, token, create)


def _unlink(parent: Node, token: bytes) -> None:
    if token == PWC:
        parent.pwc = None
    elif token == FWC:
        parent.fwc = None
    elif parent.tok is not None:
        parent.nodes = parent.tok = None
    else:
        nodes = parent.nodes
        assert isinstance(nodes, dict)
        del nodes[token]
        if len(nodes) == 1:
            ((parent.tok, parent.nodes),) = nodes.items()


def insert(root: Node, tokens: list[bytes], sub: Subscriber) -> bool:
    """Add ``sub`` under ``tokens``; False if it was already there."""
    node = root
    for t in tokens:
        node = _child(node, t, True)  # type: ignore[assignment]
    node.slot, added = slot_add(node.slot, sub)
    return added


def remove(root: Node, tokens: list[bytes], sub: Subscriber) -> bool:
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


def match(node: Node, tokens: list[bytes], i: int, n: int, out: list[Slot]) -> None:
    """Append to ``out`` the slots under ``node`` matching ``tokens[i:n]``.

    Iterative: the ``*`` branches wait on a stack instead of recursing, so no subject (a publisher's
    1,000-token subject against a 1,200-token ``*`` filter) can exhaust Python's recursion limit."""
    pending: list[tuple[Node, int]] = [(node, i)]
    while pending:
        node, i = pending.pop()
        while i < n:
            fwc = node.fwc
            if fwc is not None and fwc.slot is not None:  # always set: a ">" node has no children
                out.append(fwc.slot)
            pwc = node.pwc
            if pwc is not None:
                if i + 1 == n:
                    if pwc.slot is not None:
                        out.append(pwc.slot)
                else:
                    pending.append((pwc, i + 1))
            nodes = node.nodes
            if nodes is None:
                break
            tok = node.tok
            if tok is None:
                # tok None: a dict (see Node); cast, not `get` on the union: a native dict lookup compiled
                nxt = cast(dict[bytes, Node], nodes).get(tokens[i])
                if nxt is None:
                    break
                node = nxt
            elif tok == tokens[i]:
                node = nodes  # type: ignore[assignment]
            else:
                break
            i += 1
        else:
            if node.slot is not None:
                out.append(node.slot)


def iter_subs(node: Node) -> Iterator[Subscriber]:
    """Every subscription under ``node``."""
    stack = [node]
    while stack:
        n = stack.pop()
        if n.slot is not None:
            yield from slot_iter(n.slot)
        stack.extend(n.children())
        if n.pwc is not None:
            stack.append(n.pwc)
        if n.fwc is not None:
            stack.append(n.fwc)
