"""Parser for nats-server's configuration format (pure: no sockets, no logging).

Reads what nats-server's lexer reads, the same way (tests/config/test_layouts.py checks it against
`nats-server -t`): `:`/`=`/blank separators, with the separator or the value allowed on a later line (not a
top-level value after its separator), `{}` maps, `[]` arrays, `#` and `//` comments, quoted strings (they
may span lines; `\\xHH` escapes), bare strings, booleans (true/false/yes/no/on/off), integers with units
(k/m/g/t/p/e x1000, kb/mb/... and ki/kib/... x1024), floats, IP addresses, Zulu dates, `( )` block strings,
`include` relative to the including file, and `$VAR` references resolved from enclosing blocks, then the
environment. Errors carry `file:line:col`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

_TRUE = {"true", "yes", "on"}
_FALSE = {"false", "no", "off"}
_SUFFIX = {
    "": 1,
    "k": 1000, "m": 1000**2, "g": 1000**3, "t": 1000**4, "p": 1000**5, "e": 1000**6,
    "kb": 1024, "mb": 1024**2, "gb": 1024**3, "tb": 1024**4, "pb": 1024**5, "eb": 1024**6,
    "ki": 1024, "mi": 1024**2, "gi": 1024**3, "ti": 1024**4, "pi": 1024**5, "ei": 1024**6,
    "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4, "pib": 1024**5, "eib": 1024**6,
}  # fmt: skip
_UNIT_START = set("kKmMgGtTpPeE")
_UNIT_MORE = set("bBiI")
_BLANK = " \t"
_NL = "\r\n"
# Where a number ends (nats-server's lexer; `]` is not among them: `[1, 2]` makes the string "2]").
_NUMBER_END = set(" \t\r\n};,")
# Where an unquoted string ends; a `'` ends it too and is dropped.
_BARE_END = set(" \t\r\n;,]}")
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", '"': '"', "\\": "\\"}
_INT64 = 2**63
_NO_VALUE = object()  # an integer with an unknown unit: nats-server sets no value (the key is absent)

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
    """A recursive-descent reading of nats-server's configuration lexer: the same tokens, separators and
    blank/newline rules (a key's separator or value may sit on the next line; after a top-level `:` it may
    not; inside a `{}` map it may), and the same values (numbers and units, IPs, dates, bare strings)."""

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

    def at_comment(self) -> bool:
        return self.peek() == "#" or self.s.startswith("//", self.i)

    def skip_comment(self) -> None:
        end = self.s.find("\n", self.i)
        self.i = len(self.s) if end < 0 else end

    def skip_space(self, newlines: bool = True) -> None:
        """Skips blanks (and newlines and other white space when `newlines`); never comments."""
        s = self.s
        while self.i < len(s) and (s[self.i] in _BLANK or (newlines and s[self.i].isspace())):
            self.i += 1

    def skip(self) -> None:
        """Skips white space and comments (between entries)."""
        while True:
            self.skip_space()
            if not self.at_comment():
                return
            self.skip_comment()

    # -- grammar ----------------------------------------------------------------------------------------
    def mapping(self, closing: str, in_map: bool = False) -> ConfigMap:
        """Parses `key value` entries until `closing` ('' = end of input) into the innermost scope: a `{}`
        map when `in_map`, else the top level (or a top-level `{ }` block, which adds to the same scope)."""
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
            if c == "{" and not in_map:  # a top-level `{ }` block: its keys are top-level keys
                self.i += 1
                self.mapping("}")
                continue
            if c in "}]=:":
                raise self.error(f"unexpected '{c}', expected a key")
            start = self.i
            key = self.key()
            if key.lower() == "include" and self.s[start] not in "\"'" and self.peek().isspace():
                self.include(start)
                self.value_end(closing, in_map)
                continue
            self.skip_space()  # a key's separator or value may follow on a later line
            if self.peek() in (":", "="):
                self.i += 1
                self.skip_space(newlines=in_map)  # the top level wants its value on the separator's line
            if self.peek() in ("", "\n", "\r", ",", ";", "}"):
                raise self.error(f"missing value for key '{key}'")
            value = self.value()
            if value is not _NO_VALUE:
                result[key] = value
                result.where[key] = self.where(start)
            self.value_end(closing, in_map)

    def value_end(self, closing: str, in_map: bool = False) -> None:
        """After a value: blanks, then a comment, a newline, a separator or `closing` — nats-server's lexer
        rejects `{ user: a password: b }` and `port: 1 debug: true` (no separator), with these texts."""
        while True:
            self.skip_space(newlines=False)
            if not self.at_comment():
                break
            self.skip_comment()
        c = self.peek()
        if closing == "]":
            separators = ",\n\r"
        elif not in_map and not closing:
            separators = ",;\n\r}"  # a stray `}` ends a top-level value too
        else:
            separators = ",;\n\r"
        if c == "" or c == closing:  # at the end of input, the caller names what is missing
            return
        if c and c in separators:
            self.i += 1
            return
        if closing == "]":
            expected = 'Expected an array value terminator "," or an array terminator "]"'
        elif in_map:
            expected = 'Expected a map value terminator "," or a map terminator "}"'
        elif closing == "}":
            expected = "Expected a block-level value to end with a new line, comment or EOF"
        else:
            expected = "Expected a top-level value to end with a new line, comment or EOF"
        raise self.error(f"{expected}, but got '{c}' instead.")

    def key(self) -> str:
        c = self.peek()
        if c in "\"'":  # quoted keys take no escapes
            end = self.s.find(c, self.i + 1)
            if end < 0:
                raise self.error("unterminated quoted key")
            key, self.i = self.s[self.i + 1 : end], end + 1
            return key
        start = self.i
        s = self.s
        while self.i < len(s) and not s[self.i].isspace() and s[self.i] not in ":=":
            self.i += 1
        return s[start : self.i]

    def value(self) -> Any:
        c, start = self.peek(), self.i
        if c == "{":
            self.i += 1
            self.scopes.append(ConfigMap())
            try:
                return self.mapping("}", in_map=True)
            finally:
                self.scopes.pop()
        if c == "[":
            self.i += 1
            return self.array()
        if c == "'":
            end = self.s.find("'", self.i + 1)
            if end < 0:
                raise self.error("unterminated quoted string", start)
            self.i = end + 1
            return self.s[start + 1 : end]
        if c == '"':
            return self.quoted()
        if c == "(":
            return self.block_string()
        if c == ".":
            raise self.error("Floats must start with a digit")
        if c == "-" and not self.s[self.i + 1 : self.i + 2].isdigit():
            after = self.s[self.i + 1 : self.i + 2]
            if after == ".":
                raise self.error("Floats must start with a digit, not '.'.")
            raise self.error(f"Expected a digit but got '{after}'.")
        if c.isdigit() or c == "-":
            number = self.number()
            if number is not None:
                return number
        return self.bare(start)

    def number(self) -> Any:
        """An integer (with its unit), a float, a date or an IP address; None when the lexer would read
        a string that starts with digits (`10s`, `1h30m`), with `self.i` left where that string goes on."""
        s, start = self.s, self.i
        self.i += 1
        while self.i < len(s) and s[self.i].isdigit():
            self.i += 1
        c = self.peek()
        if c == "-" and s[start] != "-":
            if self.i - start != 4:
                raise self.error("All ISO8601 dates must be in full Zulu form.")
            return self.date(start)
        if c == ".":
            self.i += 1
            if not self.peek().isdigit():
                raise self.error(f"Floats must have a digit after the '.', but got '{self.peek()}' instead.")
            while self.peek().isdigit():
                self.i += 1
            if self.peek() != ".":
                return float(s[start : self.i])
            while self.peek() and (self.peek().isdigit() or self.peek() in ".:-"):
                self.i += 1
            return s[start : self.i]  # an IP address (with its port)
        digits = self.i
        if c and c in _UNIT_START:
            self.i += 1
            while self.peek() and self.peek() in _UNIT_MORE:
                self.i += 1
            if self.peek() and self.peek() not in _NUMBER_END and not self.peek().isdigit():
                return None  # `10s`, `1h`: a string
        elif s[start] != "-" and c and c not in _NUMBER_END:
            self.i += 1  # the lexer takes this character into the string it now reads
            return None
        number = int(s[start:digits])
        if not -_INT64 <= number < _INT64:
            raise self.error(f"integer '{s[start : self.i]}' is out of the range", start)
        factor = _SUFFIX.get(s[digits : self.i].lower())
        return _NO_VALUE if factor is None else number * factor

    def date(self, start: int) -> datetime:
        """`YYYY-MM-DDTHH:MM:SSZ`, the only date nats-server reads: a datetime (UTC), which no option takes
        (nats-server refuses it where a string is expected, as pynatsd's schema does)."""
        for expected in "-00-00T00:00:00Z":
            c = self.peek()
            if (expected == "0" and not c.isdigit()) or (expected != "0" and c != expected):
                what = "digit" if expected == "0" else f"'{expected}'"
                raise self.error(f"Expected {what} in ISO8601 datetime, but found '{c}' instead.")
            self.i += 1
        try:
            return datetime.strptime(self.s[start : self.i], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        except ValueError:
            raise self.error(
                f"expected Zulu formatted DateTime, but got '{self.s[start : self.i]}'"
            ) from None

    def bare(self, start: int) -> Any:
        """An unquoted string from `start`: a bool, a `$variable` or text (escapes as in double quotes)."""
        s = self.s
        out = [s[start : self.i]]  # what number() read before it turned out to be a string
        escaped = False
        while self.i < len(s) and s[self.i] not in _BARE_END and s[self.i] != "'":
            if s[self.i] == "\\":
                out.append(self.escape())
                escaped = True
            else:
                out.append(s[self.i])
                self.i += 1
        text = "".join(out)
        if self.peek() == "'":
            self.i += 1  # nats-server's lexer ends a bare string at a quote and drops the quote
        if escaped:
            return text
        low = text.lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        if text.startswith("$"):
            return self.variable(text[1:], start)
        return text

    def escape(self) -> str:
        """The escape at `self.i` (a backslash): \\t \\n \\r \\" \\\\ or \\xHH."""
        esc = self.s[self.i + 1 : self.i + 2]
        if esc == "x":
            digits = self.s[self.i + 2 : self.i + 4]
            try:
                char = bytes.fromhex(digits).decode("latin-1") if len(digits) == 2 else ""
            except ValueError:
                char = ""
            if not char:
                raise self.error(f"Expected two hexadecimal digits after '\\x', but got '{digits}'", self.i)
            self.i += 4
            return char
        mapped = _ESCAPES.get(esc)
        if mapped is None:
            raise self.error(f"invalid escape character '\\{esc}'", self.i)
        self.i += 2
        return mapped

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
            if c in ",}":
                raise self.error(f"unexpected '{c}' in array")
            value = self.value()
            if value is not _NO_VALUE:
                items.append(value)
            self.value_end("]")

    def quoted(self) -> str:
        """A double-quoted string (it may span lines), with escapes."""
        start = self.i
        self.i += 1
        out: list[str] = []
        s = self.s
        while True:
            if self.i >= len(s):
                raise self.error("unterminated quoted string", start)
            c = s[self.i]
            if c == '"':
                self.i += 1
                return "".join(out)
            if c == "\\":
                out.append(self.escape())
                continue
            out.append(c)
            self.i += 1

    def block_string(self) -> str:
        """`( … )`: the text up to a `)` alone on its line."""
        start = self.i
        pos = self.i + 1
        while True:
            end = self.s.find("\n)", pos)
            if end < 0:
                raise self.error("Unexpected EOF processing block.", start)
            after = end + 2
            if after == len(self.s) or self.s[after] == "\n":
                self.i = after
                return self.s[start + 1 : end + 1]
            pos = end + 1

    def variable(self, name: str, start: int) -> Any:
        if name.startswith(_BCRYPT_PREFIX):  # a bcrypt hash, not a reference
            return "$" + name
        for scope in reversed(self.scopes):
            if name in scope:
                scope.used.add(name)
                return scope[name]
        if name in os.environ:
            return self.environment_value(name, start)
        raise self.error(f"variable reference for '{name}' can not be found", start)

    def environment_value(self, name: str, at: int) -> Any:
        """An environment variable's value, read as a configuration value (as nats-server does)."""
        try:
            parsed = _Parser(f"v: {os.environ[name]}", f"${name}", self.base, [ConfigMap()], self.depth + 1)
            return parsed.mapping("").get("v", "")
        except ConfigError:
            raise self.error(f"invalid value in environment variable '{name}'", at) from None

    def include(self, start: int) -> None:
        self.skip_space(newlines=False)
        c = self.peek()
        if c in "\"'":
            end = self.s.find(c, self.i + 1)
            if end < 0:
                raise self.error("Unexpected EOF in quoted include", start)
            name, self.i = self.s[self.i + 1 : end], end + 1
        else:
            if c == "" or c in "\r\n[{(-\\" or c.isdigit():
                raise self.error("Expected include value", start)
            begin = self.i
            while self.i < len(self.s) and self.s[self.i] not in " \t\r\n;}'":
                self.i += 1
            name = self.s[begin : self.i]
            if self.peek() == "'":
                self.i += 1
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
