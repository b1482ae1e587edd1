"""Request bodies decoded as nats-server's Go `encoding/json` decodes them: bounded depth, typed fields, the
same first error in the same words (`json: cannot unmarshal string into Go struct field X.f of type int`,
`json: unknown field "f"`, `exceeded max depth`), so a JetStream or `$SYS` request answers as nats-server's.

One entry point, `decode(payload, schema)`: the body's values with the schema's types checked, or GoJsonError.
Python's json recurses per nesting level (a 1,100-deep body raised RecursionError); a body nested deeper than
the schemas ever need is decoded with its deep parts cut down to their kind, which is all Go's answer shows.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

MAX_DEPTH = 10_000  # Go's encoding/json: deeper input is a syntax error
# Nesting kept when a body is too deep for Python's json: no schema is half as deep, so every deeper
# container is a type error or sits under an unknown field, and Go names only its kind.
_KEEP_DEPTH = 32
_DEEP = "\x00gojson-deep:"
# A string token ends at its quote or at the end of the body (a lone backslash included): an unclosed string
# that had to be retried from every later quote made a 41 KB body of escaped quotes take 8.3 s.
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*(?:"|\\?\Z)|[\[{]+|[\]}]+', re.S)

INT_RANGES = {
    "int": (-(1 << 63), (1 << 63) - 1),
    "int64": (-(1 << 63), (1 << 63) - 1),
    "time.Duration": (-(1 << 63), (1 << 63) - 1),
    "int32": (-(1 << 31), (1 << 31) - 1),
    "uint64": (0, (1 << 64) - 1),
    "uint32": (0, (1 << 32) - 1),
}


class GoJsonError(ValueError):
    """A body Go would not decode; str() is Go's error text."""


@dataclass(frozen=True)
class Enum:
    """A nats-server type with its own UnmarshalJSON: the JSON texts it takes and the error it gives
    (`%s` is the raw JSON text; None: "can not unmarshal %q")."""

    values: dict[str, Any]
    error: str | None = None


@dataclass(frozen=True)
class Struct:
    """A Go struct: JSON field name -> type (a Go type name, Enum, Struct, ("[]", elem), ("map", elem))."""

    name: str
    fields: dict[str, Any]
    strict: bool = True  # unknown fields refused (nats-server's JetStream API decoder)
    _folded: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    def lookup(self, key: str) -> str | None:
        """The field a JSON key sets: exact, else case-insensitive (as Go matches them)."""
        if key in self.fields:
            return key
        if not self._folded:
            self._folded.update({k.lower(): k for k in self.fields})
        return self._folded.get(key.lower())


class _Number:
    """A JSON number that is not a plain integer, kept as its text (Go names it in errors)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def _no_constants(name: str) -> Any:
    raise GoJsonError(f"invalid character '{name[0]}' looking for beginning of value")


def _integer(text: str) -> int | _Number:
    """An integer; past every Go integer's digits a _Number (Python refuses to convert 4,300 digits and more,
    and Go answers such a number as out of range anyway)."""
    return int(text) if len(text) <= 24 else _Number(text)


_decoder = json.JSONDecoder(parse_float=_Number, parse_int=_integer, parse_constant=_no_constants)


def _cut_deep(text: str) -> str:
    """The body with every container deeper than _KEEP_DEPTH replaced by a marker naming its kind; raises
    GoJsonError past Go's MAX_DEPTH (its words and offset). Runs of brackets are one token each: a 1 MB
    body of nesting is scanned in ~20 ms rather than 0.9 s bracket by bracket."""
    out: list[str] = []
    depth, pos, cut_kind = 0, 0, ""
    for m in _TOKENS.finditer(text):
        tok = m.group()
        if tok[0] == '"':
            continue
        if tok[0] in "[{":
            if depth + len(tok) > MAX_DEPTH:
                raise GoJsonError(f"exceeded max depth at offset {m.start() + MAX_DEPTH - depth + 1}")
            if depth <= _KEEP_DEPTH < depth + len(tok):
                at = m.start() + _KEEP_DEPTH - depth
                out.append(text[pos:at])
                cut_kind = "array" if text[at] == "[" else "object"
            depth += len(tok)
        else:
            if depth - len(tok) <= _KEEP_DEPTH < depth:
                out.append(json.dumps(_DEEP + cut_kind))
                pos = m.start() + depth - _KEEP_DEPTH
            depth -= len(tok)
    out.append(text[pos:])
    return "".join(out)


def loads(payload: bytes | str) -> list[Any]:
    """The JSON values of a body (a stream of them, as Go's Decoder reads it); GoJsonError on bad syntax."""
    text = payload if isinstance(payload, str) else payload.decode("utf-8", "replace")
    return [value for value, _ in _located(text)]


def _located(text: str) -> list[tuple[Any, int]]:
    """The body's JSON values with where each starts (in the cut-down body when it was too deep)."""
    try:
        return _values(text)
    except RecursionError:
        pass
    try:
        return _values(_cut_deep(text))
    except RecursionError:  # nesting that never closes is kept whole by _cut_deep: Go reaches the end first
        raise GoJsonError("unexpected EOF") from None


def _values(text: str) -> list[tuple[Any, int]]:
    values: list[tuple[Any, int]] = []
    pos, end = 0, len(text)
    while True:
        while pos < end and text[pos] in " \t\r\n":
            pos += 1
        if pos >= end:
            return values
        start = pos
        try:
            value, pos = _decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise GoJsonError(_syntax(exc)) from None
        values.append((value, start))


def _syntax(exc: json.JSONDecodeError) -> str:
    """Go's words for the common syntax errors (its offset counts the bad byte)."""
    doc, pos = exc.doc, exc.pos
    if pos >= len(doc) or exc.msg.startswith("Unterminated string"):
        return "unexpected EOF"
    char = doc[pos]
    shown = repr(char)[1:-1] if char != "'" else "\\''"
    context = {
        "Expecting value": "looking for beginning of value",
        "Expecting property name enclosed in double quotes": "looking for beginning of object key string",
        "Expecting ':' delimiter": "after object key",
        "Expecting ',' delimiter": "after array element",
    }.get(exc.msg, "looking for beginning of value")
    if exc.msg == "Expecting ',' delimiter" and _in_object(doc, pos):
        context = "after object key:value pair"
    return f"invalid character '{shown}' {context} at offset {pos + 1}"


def _in_object(doc: str, pos: int) -> bool:
    open_kinds: list[str] = []
    for m in _TOKENS.finditer(doc, 0, pos):
        tok = m.group()
        if tok[0] in "[{":
            open_kinds.extend(tok)
        elif tok[0] in "]}":
            del open_kinds[len(open_kinds) - len(tok) :]
    return bool(open_kinds) and open_kinds[-1] == "{"


def _kind(value: Any) -> str:
    """How Go names a JSON value in `cannot unmarshal <kind>`."""
    if isinstance(value, str):
        return value[len(_DEEP) :] if value.startswith(_DEEP) else "string"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, _Number)):
        return "number"
    if isinstance(value, list):
        return "array"
    return "object"


def _raw(value: Any) -> str:
    """The JSON text of a value, as a custom UnmarshalJSON sees it."""
    if isinstance(value, _Number):
        return value.text
    if isinstance(value, str) and value.startswith(_DEEP):
        return "[...]"
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=lambda n: n.text)


def _clean(text: str) -> str:
    """A string as Go keeps it: lone surrogates become U+FFFD."""
    if text.isascii():
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


class _Decoding:
    def __init__(self, root: str, text: str = "") -> None:
        self.root = root
        self.error: str | None = None  # Go keeps the first type error and goes on
        self.text = text  # the body, for the raw text a custom UnmarshalJSON names
        self.start = 0  # where the value being decoded starts in it

    def raw_at(self, path: list[str]) -> str | None:
        """The body's own text of the value at `path` (Go shows it verbatim), None if not found."""
        try:
            return _raw_at(self.text, self.start, path)
        except (ValueError, IndexError, StopIteration):
            return None

    def save(self, text: str) -> None:
        if self.error is None:
            self.error = text

    def type_error(self, value: Any, go_type: str, path: list[str], literal: bool = False) -> None:
        kind = _kind(value)
        if literal and kind == "number":
            kind = "number " + (value.text if isinstance(value, _Number) else str(value))
        where = ".".join([self.root, *path])
        if not path:
            self.save(f"json: cannot unmarshal {kind} into Go value of type {go_type}")
        elif any(p.isdigit() for p in path):
            self.save(f"json: cannot unmarshal {kind} into {where} of type {go_type}")
        else:
            self.save(f"json: cannot unmarshal {kind} into Go struct field {where} of type {go_type}")

    def value(self, value: Any, typ: Any, path: list[str]) -> Any:
        """The decoded value, or None (the field keeps its zero value) after saving an error."""
        if isinstance(typ, Enum):
            if _raw(value) in typ.values:
                return typ.values[_raw(value)]
            # A custom UnmarshalJSON's error ends the decoding; an error saved before it still wins.
            raw = self.raw_at(path) or _raw(value)
            if typ.error is None:
                self.save("can not unmarshal " + json.dumps(raw, ensure_ascii=False))
            elif "%s" not in typ.error and not isinstance(value, str) and value is not None:
                self.type_error(value, "string", [])
            else:
                self.save(typ.error.replace("%s", raw))
            raise GoJsonError(self.error or "")
        if value is None:
            return None
        if isinstance(typ, Struct):
            if not isinstance(value, dict):
                self.type_error(value, _type_name(typ), path)
                return None
            return self.struct(value, typ, path)
        if isinstance(typ, tuple):
            container, elem = typ
            if container == "[]":
                if not isinstance(value, list):
                    self.type_error(value, "[]" + _type_name(elem), path)
                    return None
                return [self.value(v, elem, [*path, str(i)]) for i, v in enumerate(value)]
            if not isinstance(value, dict):
                self.type_error(value, "map[string]" + _type_name(elem), path)
                return None
            return {_clean(k): self.value(v, elem, [*path, k]) for k, v in value.items()}
        if typ == "any":
            return value
        if typ == "string":
            if isinstance(value, str) and not value.startswith(_DEEP):
                return _clean(value)
        elif typ == "bool":
            if isinstance(value, bool):
                return value
        elif typ in INT_RANGES:
            if isinstance(value, int) and not isinstance(value, bool):
                low, high = INT_RANGES[typ]
                if low <= value <= high:
                    return value
                self.type_error(value, typ, path, literal=True)
                return None
            if isinstance(value, _Number):
                self.type_error(value, typ, path, literal=True)
                return None
        elif typ == "float64":
            if isinstance(value, _Number):
                return float(value.text)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
        elif typ == "time.Time":
            if isinstance(value, str) and not value.startswith(_DEEP):
                problem = rfc3339_problem(value)
                if problem:
                    self.save(problem)  # time.Time's UnmarshalJSON: ends the decoding, as for an Enum
                    raise GoJsonError(self.error or "")
                return value
            self.type_error(value, typ, path)
            raise GoJsonError(self.error or "")
        self.type_error(value, typ, path)
        return None

    def struct(self, obj: dict[str, Any], typ: Struct, path: list[str]) -> dict[str, Any]:
        if not typ.fields and not typ.strict:
            return obj  # an object taken whole (its handler refuses or reads it)
        out: dict[str, Any] = {}
        for key, value in obj.items():
            name = typ.lookup(key)
            if name is None:
                if typ.strict:
                    self.save(f"json: unknown field {json.dumps(_clean(key), ensure_ascii=False)}")
                else:
                    out[key] = value  # fields Go would skip: kept for a handler that reads more of them
                continue
            decoded = self.value(value, typ.fields[name], [*path, name])
            if decoded is not None or value is None:
                out[name] = decoded
        return out


_SPACE = re.compile(r"[ \t\r\n]*")


def _raw_at(text: str, pos: int, path: list[str]) -> str | None:
    """The JSON text at `path` (object keys matched as Go matches fields) in the value starting at pos."""
    pos = _SPACE.match(text, pos).end()  # type: ignore[union-attr]
    if not path:
        _, end = _decoder.raw_decode(text, pos)
        return text[pos:end]
    want, rest = path[0], path[1:]
    if text[pos] == "[" and want.isdigit():
        pos += 1
        for _ in range(int(want)):
            _, pos = _decoder.raw_decode(text, _SPACE.match(text, pos).end())  # type: ignore[union-attr]
            pos = _SPACE.match(text, pos).end() + 1  # type: ignore[union-attr]  # past ","
        return _raw_at(text, pos, rest)
    if text[pos] != "{":
        return None
    pos += 1
    while True:
        pos = _SPACE.match(text, pos).end()  # type: ignore[union-attr]
        if text[pos] == "}":
            return None
        key, pos = _decoder.raw_decode(text, pos)
        pos = _SPACE.match(text, pos).end() + 1  # type: ignore[union-attr]  # past ":"
        if isinstance(key, str) and key.lower() == want.lower():
            return _raw_at(text, pos, rest)
        _, pos = _decoder.raw_decode(text, _SPACE.match(text, pos).end())  # type: ignore[union-attr]
        pos = _SPACE.match(text, pos).end() + 1  # type: ignore[union-attr]  # past ","


def _type_name(typ: Any) -> str:
    if isinstance(typ, Struct):
        return "server." + typ.name
    if isinstance(typ, tuple):
        return ("[]" if typ[0] == "[]" else "map[string]") + _type_name(typ[1])
    return str(typ)


def decode(payload: bytes | str, schema: Struct, go_name: str = "") -> dict[str, Any]:
    """The request's fields (JSON null kept as None, absent fields absent); GoJsonError with Go's text.

    An empty body is {}; several concatenated JSON values decode into the same struct, later ones winning
    (Go's Decoder loop in nats-server); `go_name` is the top-level type as Go prints it for a non-object
    body (`server.StreamConfigRequest`)."""
    text = payload if isinstance(payload, str) else payload.decode("utf-8", "replace")
    decoding = _Decoding(schema.name, text)
    out: dict[str, Any] = {}
    for value, decoding.start in _located(text):
        if value is None:
            continue
        if not isinstance(value, dict):
            decoding.type_error(value, go_name or "server." + schema.name, [])
            break
        out.update(decoding.struct(value, schema, []))
        if decoding.error is not None:
            break
    if decoding.error is not None:
        raise GoJsonError(decoding.error)
    return out


_RFC3339_LAYOUT = "2006-01-02T15:04:05Z07:00"
_DATE_PARTS = (
    ("2006", 4),
    ("-", 0),
    ("01", 2),
    ("-", 0),
    ("02", 2),
    ("T", 0),
    ("15", 2),
    (":", 0),
    ("04", 2),
    (":", 0),
    ("05", 2),
)
_RANGES = {
    "01": (1, 12, "month"),
    "02": (1, 31, "day"),
    "15": (0, 23, "hour"),
    "04": (0, 59, "minute"),
    "05": (0, 59, "second"),
}


def rfc3339_problem(value: str) -> str | None:
    """Go's time.Parse(time.RFC3339) error for a timestamp (the common cases), None when it parses."""
    quoted = json.dumps(value, ensure_ascii=False)
    head = f'parsing time {quoted} as "{_RFC3339_LAYOUT}": '
    rest = value
    for part, width in _DATE_PARTS:
        if width == 0:
            if not rest.startswith(part):
                return head + f'cannot parse {json.dumps(rest, ensure_ascii=False)} as "{part}"'
            rest = rest[len(part) :]
            continue
        digits = rest[:width]
        if len(digits) < width or not digits.isascii() or not digits.isdigit():
            return head + f'cannot parse {json.dumps(rest, ensure_ascii=False)} as "{part}"'
        if part in _RANGES:
            low, high, what = _RANGES[part]
            if not low <= int(digits) <= high:
                return f"parsing time {quoted}: {what} out of range"
        rest = rest[width:]
    if rest.startswith((".", ",")) and len(rest) > 1 and rest[1].isdigit():
        rest = rest[1:].lstrip("0123456789")
    if rest.startswith("Z"):
        rest = rest[1:]
    elif re.match(r"[+-]\d\d:\d\d", rest):
        rest = rest[6:]
    else:
        return head + f'cannot parse {json.dumps(rest, ensure_ascii=False)} as "Z07:00"'
    if rest:
        return f"parsing time {quoted}: extra text: {json.dumps(rest, ensure_ascii=False)}"
    return None


def unmarshal(payload: bytes | str, schema: Struct, go_name: str = "") -> dict[str, Any]:
    """As `decode`, but worded as Go's json.Unmarshal (one value, no offsets), as nats-server's `$SYS`
    handlers decode their options."""
    text = payload if isinstance(payload, str) else payload.decode("utf-8", "replace")
    try:
        values = _located(text)
    except GoJsonError as exc:
        words = re.sub(r" at offset \d+$", "", str(exc))
        raise GoJsonError("unexpected end of JSON input" if words == "unexpected EOF" else words) from None
    if len(values) > 1:
        raise GoJsonError(f"invalid character '{text[values[1][1]]}' after top-level value")
    if not values:
        raise GoJsonError("unexpected end of JSON input")
    return decode(text, schema, go_name)
