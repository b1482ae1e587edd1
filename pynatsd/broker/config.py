"""Parser for nats-server's configuration format (pure: no sockets, no logging).

Supports `:`/`=`/whitespace separators, `{}` blocks, `[]` arrays, `#` and `//` comments, quoted and bare
strings, booleans (true/false/yes/no/on/off), integers and floats with size suffixes (k/m/g x1000,
kb/mb/gb/ki/kib/... x1024), `include` relative to the including file, and `$VAR` references resolved
from enclosing blocks, then the environment. Errors carry `file:line:col`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_TRUE = {"true", "yes", "on"}
_FALSE = {"false", "no", "off"}
_SUFFIX = {
    "k": 1000, "m": 1000**2, "g": 1000**3, "t": 1000**4,
    "kb": 1024, "mb": 1024**2, "gb": 1024**3, "tb": 1024**4,
    "ki": 1024, "mi": 1024**2, "gi": 1024**3, "ti": 1024**4,
    "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4,
}  # fmt: skip
_NUMBER = re.compile(r"^([+-]?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)([a-zA-Z]*)$")
_KEY_END = set(" \t\r\n:={}[],;#")
_BARE_END = set(" \t\r\n,;}]#")  # as nats-server's lexer: a bare value ends at a blank too
_VAR = re.compile(r"[A-Za-z0-9_\-.]+")


_BCRYPT_PREFIX = "2a$"  # nats-server's special case: `$2a$...` unquoted is a bcrypt hash


@dataclass(frozen=True)
class Where:
    """The position of a key: file, 1-based line and column."""

    source: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.source}:{self.line}:{self.col}"


class ConfigMap(dict[str, Any]):
    """A parsed `{}` block: key -> value, plus each key's position and the keys used as variables."""

    def __init__(self) -> None:
        super().__init__()
        self.where: dict[str, Where] = {}
        self.used: set[str] = set()

    def position(self, key: str, default: Where | None = None) -> Where:
        return self.where.get(key) or default or Where("<config>", 0, 0)


class ConfigError(ValueError):
    """A syntax or reference error, located as `file:line:col: message`."""

    def __init__(self, message: str, source: str, line: int, col: int) -> None:
        super().__init__(f"{source}:{line}:{col}: {message}")
        self.message, self.source, self.line, self.col = message, source, line, col


class _Parser:
    def __init__(self, text: str, source: str, base: Path, scopes: list[ConfigMap], depth: int) -> None:
        self.s, self.i, self.source, self.base, self.depth = text, 0, source, base, depth
        self.scopes = scopes

    # -- positions and errors -------------------------------------------------------------------------
    def where(self, pos: int) -> Where:
        line = self.s.count("\n", 0, pos) + 1
        col = pos - (self.s.rfind("\n", 0, pos) + 1) + 1
        return Where(self.source, line, col)

    def error(self, message: str, at: int | None = None) -> ConfigError:
        w = self.where(self.i if at is None else at)
        return ConfigError(message, w.source, w.line, w.col)

    def peek(self) -> str:
        return self.s[self.i] if self.i < len(self.s) else ""

    def skip(self, newlines: bool = True) -> None:
        """Skips blanks and comments (and newlines and `,`/`;` separators when `newlines`)."""
        s = self.s
        while self.i < len(s):
            c = s[self.i]
            if c in " \t\r" or (newlines and c in "\n,;"):
                self.i += 1
            elif c == "#" or s.startswith("//", self.i):
                end = s.find("\n", self.i)
                self.i = len(s) if end < 0 else end
            else:
                return

    # -- grammar ----------------------------------------------------------------------------------------
    def mapping(self, closing: str) -> ConfigMap:
        """Parses `key value` pairs until `closing` ('' = end of input) into the innermost scope."""
        result = self.scopes[-1]
        while True:
            self.skip()
            c = self.peek()
            if c == closing:
                if c:
                    self.i += 1
                return result
            if c == "":
                raise self.error(f"unexpected end of input, missing '{closing}'")
            if c in "}]=:[{":
                raise self.error(f"unexpected '{c}', expected a key")
            start = self.i
            key = self.key()
            if key == "include" and self.peek() in " \t":
                self.include(start)
                continue
            self.skip(newlines=False)
            if self.peek() in (":", "="):
                self.i += 1
                self.skip(newlines=False)
            if self.peek() in ("", "\n", ",", ";", "}"):
                raise self.error(f"missing value for key '{key}'")
            result[key] = self.value()
            result.where[key] = self.where(start)
            self.value_end(closing)

    def value_end(self, closing: str) -> None:
        """After a value: blanks, then a comment, a newline, a separator or `closing` — nats-server's lexer
        rejects `{ user: a password: b }` and `port: 1 debug: true` (no separator), with these texts."""
        while self.peek() in (" ", "\t", "\r") and self.i < len(self.s):
            self.i += 1
        c = self.peek()
        separators = ",\n" if closing == "]" else ",;\n"
        if c in ("", "#", closing) or c in separators or self.s.startswith("//", self.i):
            return
        if closing == "]":
            expected = 'Expected an array value terminator "," or an array terminator "]"'
        elif closing == "}":
            expected = 'Expected a map value terminator "," or a map terminator "}"'
        else:
            expected = "Expected a top-level value to end with a new line, comment or EOF"
        raise self.error(f"{expected}, but got '{c}' instead.")

    def key(self) -> str:
        if self.peek() in "\"'":
            return self.quoted()
        start = self.i
        while self.i < len(self.s) and self.s[self.i] not in _KEY_END:
            self.i += 1
        return self.s[start : self.i]

    def value(self) -> Any:
        c, start = self.peek(), self.i
        if c == "{":
            self.i += 1
            self.scopes.append(ConfigMap())
            try:
                return self.mapping("}")
            finally:
                self.scopes.pop()
        if c == "[":
            self.i += 1
            return self.array()
        if c in "\"'":
            return self.quoted()
        if c == "$":
            return self.variable()
        # `//` inside a word is not a comment (`nats-route://h:p`); after a blank it is (see value_end).
        while self.i < len(self.s) and self.s[self.i] not in _BARE_END:
            self.i += 1
        return self.convert(self.s[start : self.i], start)

    def array(self) -> list[Any]:
        items: list[Any] = []
        while True:
            self.skip()
            c = self.peek()
            if c == "]":
                self.i += 1
                return items
            if c == "":
                raise self.error("unexpected end of input, missing ']'")
            start = self.i
            items.append(self.value())
            if self.i == start:  # nothing a value can start with (e.g. `}`): an error, not a loop
                raise self.error(f"unexpected '{c}' in array")
            self.value_end("]")

    def quoted(self) -> str:
        quote, start = self.peek(), self.i
        self.i += 1
        out: list[str] = []
        s = self.s
        while True:
            if self.i >= len(s) or s[self.i] == "\n":
                raise self.error("unterminated quoted string", start)
            c = s[self.i]
            if c == quote:
                self.i += 1
                return "".join(out)
            if c == "\\" and quote == '"' and self.i + 1 < len(s):
                esc = s[self.i + 1]
                mapped = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\"}.get(esc)
                if mapped is None:
                    raise self.error(f"invalid escape character '\\{esc}'", self.i)
                out.append(mapped)
                self.i += 2
                continue
            out.append(c)
            self.i += 1

    def variable(self) -> Any:
        start = self.i
        self.i += 1
        if self.s.startswith(_BCRYPT_PREFIX, self.i):
            # A hash, not a reference: it runs to the end of the bare value ($ and / included).
            while self.i < len(self.s) and self.s[self.i] not in _BARE_END and not self.s[self.i].isspace():
                self.i += 1
            return self.s[start : self.i]
        m = _VAR.match(self.s, self.i)
        if not m:
            raise self.error("invalid variable reference", start)
        name = m.group(0)
        self.i = m.end()
        for scope in reversed(self.scopes):
            if name in scope:
                scope.used.add(name)
                return scope[name]
        if name in os.environ:
            env = os.environ[name]
            return self.convert(env, start)
        raise self.error(f"variable reference for '{name}' can not be found", start)

    def convert(self, raw: str, at: int) -> Any:
        low = raw.lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        m = _NUMBER.match(raw)
        if m:
            num, suffix = m.group(1), m.group(2).lower()
            if suffix and suffix not in _SUFFIX:
                return raw  # e.g. a duration such as "10s" or "1h30m"
            factor = _SUFFIX.get(suffix, 1)
            if any(ch in num for ch in ".eE"):
                value = float(num) * factor
                return int(value) if suffix else value
            return int(num) * factor
        return raw

    def include(self, start: int) -> None:
        self.skip(newlines=False)
        c = self.peek()
        if c in "\"'":
            name = self.quoted()
        else:
            begin = self.i
            while self.i < len(self.s) and self.s[self.i] not in " \t\r\n;,#}":
                self.i += 1
            name = self.s[begin : self.i]
        if not name:
            raise self.error("missing file name after include", start)
        if self.depth > 10:
            raise self.error("includes nested too deeply", start)
        path = self.base / name
        try:
            text = path.read_text()
        except OSError as exc:
            raise self.error(f"error opening include file '{name}': {exc.strerror}", start) from None
        sub = _Parser(text, str(path), path.parent, self.scopes, self.depth + 1)
        sub.mapping("")


def parse(text: str, source: str = "<string>", base: Path | None = None) -> ConfigMap:
    """Parses configuration text into a ConfigMap (nested ConfigMaps/lists, str/int/float/bool leaves)."""
    p = _Parser(text, source, base or Path.cwd(), [ConfigMap()], 0)
    return p.mapping("")


def parse_file(path: str | Path) -> ConfigMap:
    """Parses a configuration file; `include` paths are relative to it."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ConfigError(f"error opening config file: {exc.strerror}", str(p), 0, 0) from None
    return parse(text, str(p), p.parent)
