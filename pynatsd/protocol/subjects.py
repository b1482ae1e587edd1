"""Subject and queue-name rules (shared/docs/nats-protocol.md §2).

The checks are single precompiled regular expressions: on the per-message path (the pedantic publish
check) one C-level match costs less than even a few `in` scans.
"""

from __future__ import annotations

import re

_CHAR = rb"[^ \t\r\n\x0c.]"  # any byte of a token
_NOT_WILD = rb"[^ \t\r\n\x0c.*>]"
# A literal token: not exactly `*` or `>` (`foo*` and `a>b` are literals).
_LITERAL_TOKEN = rb"(?:" + _NOT_WILD + _CHAR + rb"*|[*>]" + _CHAR + rb"+)"
_TOKEN = _CHAR + rb"+"
_LITERAL = re.compile(_LITERAL_TOKEN + rb"(?:\." + _LITERAL_TOKEN + rb")*").fullmatch
# Valid: tokens may be `*`; a `>` token only last.
_NOT_FWC_TOKEN = rb"(?:[^ \t\r\n\x0c.>]" + _CHAR + rb"*|>" + _CHAR + rb"+)"
_VALID = re.compile(rb"(?:" + _NOT_FWC_TOKEN + rb"\.)*" + _TOKEN).fullmatch
_QUEUE = re.compile(rb"[^ \t\r\n\x0c]+").fullmatch


def is_valid_subject(subject: bytes) -> bool:
    """A subscribable subject: non-empty tokens, `>` only as the last token, no whitespace."""
    return _VALID(subject) is not None


def is_literal_subject(subject: bytes) -> bool:
    """A publishable subject: valid and without `*` or `>` wildcard tokens."""
    return _LITERAL(subject) is not None


def is_valid_queue(queue: bytes) -> bool:
    """Any non-empty token without whitespace; nats-server reserves `_sys_` (checked by the broker)."""
    return _QUEUE(queue) is not None
