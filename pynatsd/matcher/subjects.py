"""Subject syntax as the sublist sees it: tokens split on ``.``, ``*`` and ``>`` as whole tokens only."""

from __future__ import annotations

from pynatsd.matcher.errors import InvalidSubjectError

PWC = b"*"
FWC = b">"
SEP = b"."

_WHITESPACE = b" \t\r\n\f"


def subscription_tokens(subject: bytes) -> list[bytes]:
    """Split a subscription subject into tokens, raising InvalidSubjectError if it is not valid."""
    # translate() deleting the whitespace bytes is one C pass, cheaper here than a regex search.
    if not subject or len(subject.translate(None, _WHITESPACE)) != len(subject):
        raise InvalidSubjectError(subject)
    tokens = subject.split(SEP)
    if b"" in tokens:
        raise InvalidSubjectError(subject)
    # '>' only counts as the full wildcard when it is the whole token, and then it must be the last one.
    if FWC in tokens and tokens.index(FWC) != len(tokens) - 1:
        raise InvalidSubjectError(subject)
    return tokens
