"""Subject syntax as the sublist sees it: tokens split on ``.``, ``*`` and ``>`` as whole tokens only."""

from __future__ import annotations

import re

from matcher.errors import InvalidSubjectError

PWC = b"*"
FWC = b">"
SEP = b"."

_WHITESPACE = re.compile(rb"[ \t\r\n\f]").search


def subscription_tokens(subject: bytes) -> list[bytes]:
    """Split a subscription subject into tokens, raising InvalidSubjectError if it is not valid."""
    if not subject or _WHITESPACE(subject) is not None:
        raise InvalidSubjectError(subject)
    tokens = subject.split(SEP)
    if b"" in tokens:
        raise InvalidSubjectError(subject)
    # '>' only counts as the full wildcard when it is the whole token, and then it must be the last one.
    if FWC in tokens and tokens.index(FWC) != len(tokens) - 1:
        raise InvalidSubjectError(subject)
    return tokens


def has_wildcard(tokens: list[bytes]) -> bool:
    """True if any token is a whole-token wildcard."""
    return PWC in tokens or FWC in tokens
