"""Subject transforms as nats-server 2.15 builds, checks and applies them for streams (`subject_transform`,
`republish`): destination tokens that are literals, `$N`, or mapping functions in `{{...}}` (wildcard,
partition, splitFromLeft/Right, sliceFromLeft/Right, split, left, right, random), with nats-server's error
words for a destination it would refuse."""

from __future__ import annotations

import random
import re

from pynatsd.base.hashing import fnv1a32
from pynatsd.protocol.subjects import is_literal_subject, matches

_INVALID = "invalid mapping destination"
INVALID_SUBJECT = "invalid subject"


class TransformError(ValueError):
    """A source or destination nats-server would refuse; str() is its message."""


def _refusal(what: str, token: bytes | None = None) -> TransformError:
    """nats-server's mappingDestinationErr: `<what> in <token>`."""
    text = f"{_INVALID}: {what}"
    if token:
        text += f" in {token.decode(errors='replace')}"
    return TransformError(text)


def _function(name: bytes) -> re.Pattern[bytes]:
    # Go's regexps, unanchored: `{{ name ( args ) }}` anywhere in the token, each letter of a word start
    # in either case.
    letters = [name[i : i + 1] for i in range(len(name))]
    pattern = b"".join(
        b"[%s%s]" % (c.lower(), c.upper()) if i == 0 or c.isupper() else c for i, c in enumerate(letters)
    )
    return re.compile(rb"\{\{\s*" + pattern + rb"\s*\((.*)\)\s*\}\}")


# Function kinds, in the order nats-server tries them on a token.
NONE, WILDCARD, PARTITION, SPLIT_LEFT, SPLIT_RIGHT, SLICE_LEFT, SLICE_RIGHT, RIGHT, LEFT, SPLIT, RANDOM = (
    range(11)
)
_FUNCTIONS: list[tuple[int, re.Pattern[bytes]]] = [
    (WILDCARD, _function(b"wildcard")),
    (PARTITION, _function(b"partition")),
    (SPLIT_LEFT, _function(b"splitFromLeft")),
    (SPLIT_RIGHT, _function(b"splitFromRight")),
    (SLICE_LEFT, _function(b"sliceFromLeft")),
    (SLICE_RIGHT, _function(b"sliceFromRight")),
    (RIGHT, _function(b"right")),
    (LEFT, _function(b"left")),
    (SPLIT, _function(b"split")),
    (RANDOM, _function(b"random")),
]
_ARG_SEPARATOR = re.compile(rb",\s*")
_GO_INT = re.compile(rb"[+-]?[0-9]+")
_INT32_MAX = (1 << 31) - 1


def _atoi(raw: bytes, token: bytes, bits: int = 64) -> int:
    """Go's strconv.Atoi/ParseInt of an argument trimmed of spaces, or nats-server's refusal."""
    text = raw.strip(b" ")
    if _GO_INT.fullmatch(text) is None:
        raise _refusal("function argument is invalid or in the wrong format", token)
    value = int(text)
    if not -(1 << (bits - 1)) <= value < 1 << (bits - 1):
        raise _refusal("function argument is invalid or in the wrong format", token)
    return value


Part = tuple[int, list[int], int, bytes]  # kind, wildcard numbers (1-based), int argument, string argument


def _parse_token(token: bytes) -> Part:
    """One destination token (nats-server's indexPlaceHolders)."""
    literal: Part = (NONE, [-1], -1, b"")
    if len(token) <= 1:
        return literal
    if token[:1] == b"$":  # the old `$N`; anything else after `$` is a literal
        if _GO_INT.fullmatch(token[1:]) is None:
            return literal
        return (WILDCARD, [int(token[1:])], -1, b"")
    if not (len(token) > 4 and token.startswith(b"{{") and token.endswith(b"}}")):
        return literal
    for kind, pattern in _FUNCTIONS:
        found = pattern.search(token)
        if found is None:
            continue
        args = _ARG_SEPARATOR.split(found.group(1))
        if kind == WILDCARD:
            if len(args) == 1 and not args[0]:
                raise _refusal("not enough arguments passed to the function", token)
            if len(args) > 1:
                raise _refusal("too many arguments passed to the function", token)
            return (WILDCARD, [_atoi(args[0], token)], -1, b"")
        if kind == PARTITION:
            count = _atoi(args[0], token)
            if count > _INT32_MAX:
                raise _refusal("function argument is invalid or in the wrong format", token)
            return (PARTITION, [_atoi(a, token) for a in args[1:]], count, b"")
        if kind == SPLIT:
            if len(args) < 2:
                raise _refusal("not enough arguments passed to the function", token)
            if len(args) > 2:
                raise _refusal("too many arguments passed to the function", token)
            index = _atoi(args[0], token)
            if b" " in args[1] or b"." in args[1]:
                raise _refusal("function argument is invalid or in the wrong format", token)
            return (SPLIT, [index], -1, args[1])
        if kind == RANDOM:
            if len(args) != 1:
                raise _refusal("not enough arguments passed to the function", token)
            ceiling = _atoi(args[0], token)
            if ceiling > _INT32_MAX:
                raise _refusal("function argument is invalid or in the wrong format", token)
            return (RANDOM, [], ceiling, b"")
        # The functions of a wildcard and a number.
        if len(args) < 2:
            raise _refusal("not enough arguments passed to the function", token)
        if len(args) > 2:
            raise _refusal("too many arguments passed to the function", token)
        return (kind, [_atoi(args[0], token)], _atoi(args[1], token, 32), b"")
    raise _refusal("unknown function", token)


def _subject_info(subject: bytes) -> tuple[bool, list[bytes], int, bool]:
    """Valid, tokens, number of `*`, has `>` (nats-server's subjectInfo: no whitespace check)."""
    if not subject:
        return False, [], 0, False
    tokens = subject.split(b".")
    stars, tail = 0, False
    for t in tokens:
        if not t or tail:
            return False, [], 0, False
        if t == b">":
            tail = True
        elif t == b"*":
            stars += 1
    return True, tokens, stars, tail


class SubjectTransform:
    """A transform from `source` (a filter; empty: `>`) to `destination`; TransformError if nats-server
    would not build it."""

    def __init__(self, source: bytes, destination: bytes) -> None:
        if not source:
            source = b">"
        valid_src, src_tokens, stars, src_tail = _subject_info(source)
        valid_dest, dest_tokens, dest_stars, dest_tail = _subject_info(destination)
        if not valid_src or not valid_dest or dest_stars or src_tail != dest_tail:
            raise TransformError(INVALID_SUBJECT)
        self.source, self.destination = source, destination
        self._src_tokens, self._dest_tokens = src_tokens, dest_tokens
        self._parts: list[Part] = []
        # Wildcard number (1-based) -> index of that `*` among the source's tokens.
        star_at = {n + 1: i for n, i in enumerate(i for i, t in enumerate(src_tokens) if t == b"*")}
        for token in dest_tokens:
            kind, numbers, number, text = _parse_token(token)
            if kind in (NONE, RANDOM):
                self._parts.append((kind, numbers, number, text))
            elif stars or src_tail:
                indexes = []
                for n in numbers:
                    if n > stars:
                        raise _refusal("wildcard index out of range", b"%s: [%d]" % (token, n))
                    indexes.append(star_at.get(n, 0))  # Go's map gives 0 for an absent number
                self._parts.append((kind, indexes, number, text))
            elif kind == PARTITION:  # a source without wildcards: partition of the whole subject only
                self._parts.append((kind, [], number, text))
            else:
                raise _refusal("wildcard index out of range", token)

    def match(self, subject: bytes) -> bytes | None:
        """The transformed subject of a literal `subject` the source matches, else None."""
        if self.source == b">" and self.destination == b">":
            return subject
        if not is_literal_subject(subject) or not matches(self.source, subject):
            return None
        return self.apply(subject.split(b"."))

    def apply(self, tokens: list[bytes]) -> bytes:
        out: list[bytes] = []
        last = len(self._parts) - 1
        for i, (kind, indexes, number, text) in enumerate(self._parts):
            if kind == NONE:
                token = self._dest_tokens[i]
                if token == b">":
                    break
                out.append(token)
            else:
                out.append(self._function(kind, indexes, number, text, tokens))
            if i < last:
                out.append(b".")
        if self._dest_tokens[-1] == b">":
            out.append(b".".join(tokens[len(self._src_tokens) - 1 :]))
        return b"".join(out)

    @staticmethod
    def _function(kind: int, indexes: list[int], number: int, text: bytes, tokens: list[bytes]) -> bytes:
        if kind == PARTITION:
            key = b"".join(tokens[i] for i in indexes) if indexes else b".".join(tokens)
            return b"%d" % (fnv1a32(key) % number) if number else b"0"
        if kind == RANDOM:
            return b"%d" % (random.getrandbits(31) % abs(number)) if number else b"0"
        if kind == WILDCARD:
            return tokens[indexes[0]] if indexes and len(tokens) > indexes[0] else b""
        token = tokens[indexes[0]]
        n = len(token)
        if kind == SPLIT:
            pieces = token.split(text) if text else [token[j : j + 1] for j in range(n)]
            joined = b""
            for j, piece in enumerate(pieces):
                joined += piece
                if j < len(pieces) - 1 and pieces[j + 1] and not (j == 0 and not piece):
                    joined += b"."
            return joined
        if not 0 < number < n:  # too short to cut where asked: the token as it is
            return token
        if kind == SPLIT_LEFT:
            return token[:number] + b"." + token[number:]
        if kind == SPLIT_RIGHT:
            return token[: n - number] + b"." + token[n - number :]
        if kind == LEFT:
            return token[:number]
        if kind == RIGHT:
            return token[n - number :]
        if kind == SLICE_LEFT:
            return b".".join(token[j : j + number] for j in range(0, n, number))
        # SLICE_RIGHT: the short piece first
        head = n % number
        pieces = [token[:head]] if head else []
        return b".".join(pieces + [token[j : j + number] for j in range(head, n, number)])


def validate_mapping(source: bytes, destination: bytes) -> None:
    """nats-server's ValidateMapping of a stream's subject_transform: TransformError with its words."""
    if not destination:
        return
    tail = False
    for token in destination.split(b"."):
        if not token or tail:
            raise _refusal("invalid transform", token)
        if len(token) > 4 and token.startswith(b"{{") and token.endswith(b"}}"):
            if not any(pattern.search(token) for _, pattern in _FUNCTIONS):  # the binary takes left/right too
                raise _refusal("unknown function", token)
            continue
        if token == b">":
            tail = True
        elif any(c in token for c in b"\t\n\f\r "):
            raise _refusal("invalid transform")
    SubjectTransform(source, destination)
