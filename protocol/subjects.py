"""Subject and queue-name rules (shared/docs/nats-protocol.md §2)."""

from __future__ import annotations

_FORBIDDEN = (b" ", b"\t", b"\r", b"\n", b"\x0c")


def is_valid_subject(subject: bytes) -> bool:
    """A subscribable subject: non-empty tokens, `>` only as the last token, no whitespace."""
    if not subject:
        return False
    for ch in _FORBIDDEN:
        if ch in subject:
            return False
    tokens = subject.split(b".")
    last = len(tokens) - 1
    return all(not (not token or (token == b">" and i != last)) for i, token in enumerate(tokens))


def is_literal_subject(subject: bytes) -> bool:
    """A publishable subject: valid and without `*` or `>` wildcard tokens."""
    if not is_valid_subject(subject):
        return False
    if b"*" not in subject and b">" not in subject:
        return True
    return all(token not in (b"*", b">") for token in subject.split(b"."))


def is_valid_queue(queue: bytes) -> bool:
    """Any non-empty token without whitespace; nats-server reserves `_sys_` (checked by the broker)."""
    return bool(queue) and not any(ch in queue for ch in _FORBIDDEN)
