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


def filter_tokens_match(tokens: list[bytes], subject: bytes) -> bool:
    """True if the subscription whose (valid) subject split into `tokens` receives literal `subject`."""
    parts = subject.split(SEP)
    for i, token in enumerate(tokens):
        if token == FWC:
            return len(parts) > i
        if i >= len(parts) or (token != PWC and token != parts[i]):
            return False
    return len(tokens) == len(parts)
