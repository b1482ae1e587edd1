"""The configuration lexer against nats-server's, over generated layouts: newlines and comments between a key,
its separator and its value, brace styles, arrays, includes, quoting, units and variables. For each file,
`nats-server -t` and pynatsd's `-t` (run in-process: it is the same code path as the command) must both
accept it with the same digest of the parsed values, or both refuse it.

nats-server's digest is sha256 over its parsed map, so an equal digest means equal parsed values.
"""

from __future__ import annotations

import itertools
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from pynatsd.cli import main
from tests.conftest import need_tool
from tests.servers import nats_server_binary

_VALID = re.compile(r"configuration file .* is valid \((sha256:[0-9a-f]{64})\)")

# Between a key and its separator, and between the separator and the value.
GAPS = {
    "none": "",
    "blank": " ",
    "tab": "\t",
    "newline": "\n",
    "blank lines": "\n\n   ",
    "comment line": " # why\n",
    "slash comment line": "\n// why\n",
}
SEPARATORS = {"colon": ":", "equals": "=", "blank": " "}
VALUES = {
    "integer": "4096",
    "k": "4k",
    "KB": "4KB",
    "MiB": "1MiB",
    "mb": "1mb",
    "float with unit": "1.5k",
    "exponent": "1e3",
    "unknown unit": "4kbb",
    "negative": "-1",
    "quoted": '"4k"',
    "single-quoted": "'4096'",
    "variable": "$SIZE",
    "glued comment": "4096#x",
}


def _scalar_layouts() -> Iterator[tuple[str, str]]:
    """`max_payload` with every gap before and after every separator, and every value form."""
    for (gap1, before), (sep, separator), (gap2, after) in itertools.product(
        GAPS.items(), SEPARATORS.items(), GAPS.items()
    ):
        if not (before + separator + after).strip(" \t") and before + after == "":
            continue  # key and value glued into one word
        yield f"scalar {gap1} {sep} {gap2}", f"max_payload{before}{separator}{after}4096\n"
    for name, value in VALUES.items():
        for sep, separator in SEPARATORS.items():
            yield f"value {name} {sep}", f"SIZE = 2k\nmax_payload{separator} {value}\nmax_pending: 100MB\n"


# Where the opening brace of a block goes (K&R, Allman, after a separator, glued, after a comment).
BRACES = {
    "same line": " {",
    "next line": "\n{",
    "next line indented": "\n    {",
    "colon same line": ": {",
    "colon next line": ":\n{",
    "equals next line": " =\n{",
    "newline colon": "\n: {",
    "glued": "{",
    "comment before brace": " # auth\n{",
    "blank lines": "\n\n{",
}
# The entries inside the block: separators, and gaps around a key's separator (newlines are fine there).
ENTRIES = {
    "newlines": "\n  user: a\n  password: b\n",
    "commas": " user: a, password: b ",
    "semicolons": " user: a; password: b; ",
    "no separator": " user: a password: b ",
    "value on next line": "\n  user:\n    a\n  password =\n    b\n",
    "separator on next line": "\n  user\n  : a\n  password\n  = b\n",
    "no separator, value on next line": "\n  user\n  a\n  password\n  b\n",
    "comments": "\n  # who\n  user: a # the user\n  // and\n  password: b // the secret\n",
    "trailing comma": " user: a, password: b, ",
    "double comma": " user: a,, password: b ",
    "quoted keys": " \"user\": a, 'password': b ",
    "quoted values": " user: \"a\", password: 'b' ",
}
CLOSINGS = {"same line": "}", "own line": "\n}", "after comment": " # end\n}", "indented": "\n    }\n"}


def _block_layouts() -> Iterator[tuple[str, str]]:
    for brace, opening in BRACES.items():
        for closing, close in CLOSINGS.items():
            yield (
                f"authorization {brace}, closing {closing}",
                f"authorization{opening}{ENTRIES['newlines']}{close}\n",
            )
            yield (
                f"websocket {brace}, closing {closing}",
                f"websocket{opening}\n  port: -1\n  no_tls: true{close}\n",
            )
            yield f"jetstream {brace}, closing {closing}", f"jetstream{opening} max_mem: 1G{close}\n"
    for entries, text in ENTRIES.items():
        yield f"entries {entries}", f"authorization {{{text}}}\n"
        yield f"entries {entries}, Allman", f"authorization\n{{{text}}}\n"
    accounts = "users: [{user: a, password: b}]"
    for brace, opening in BRACES.items():
        yield f"account name, its block {brace}", f"accounts {{\n  A{opening} {accounts} }}\n}}\n"
        yield f"accounts {brace}", f"accounts{opening}\n  A: {{ {accounts} }}\n}}\n"


ARRAYS = {
    "one line": "[a, b]",
    "newlines": "[\n  a\n  b\n]",
    "trailing comma": "[a, b,]",
    "comments": "[ # tags\n  a, // first\n  b\n]",
    "next line": "\n[a, b]",
    "colon next line": None,
    "double comma": "[a,, b]",
    "semicolon": "[a; b]",
    "numbers": "[1, 2]",
    "numbers, blank before ]": "[1, 2 ]",
    "quoted": "['a', \"b\"]",
    "empty": "[]",
    "units": "[1k, 2MB ]",
}
QUOTED = {
    "escapes": '"a\\tb\\n\\"c\\\\"',
    "hex escape": '"\\x41"',
    "bad escape": '"\\q"',
    "bare escape": "a\\tb",
    "multi-line double": '"a\nb"',
    "multi-line single": "'a\nb'",
    "single keeps backslash": "'a\\tb'",
    "unterminated": '"abc',
    "hash inside": '"a # b"',
    "url": "nats://h:1//x",
    "quote ends bare": "ab'c'",
    "ip": "127.0.0.1:4222",
    "date": "2024-01-02T03:04:05Z",
    "partial date": "2024-01-02",
    "block string": "(\nmulti\nline\n)",
    "bool word": "yes",
    "glued comment": "a#b",
}


def _value_layouts() -> Iterator[tuple[str, str]]:
    for name, array in ARRAYS.items():
        text = f"server_tags:\n{ARRAYS['one line']}" if array is None else f"server_tags: {array}"
        yield f"array {name}", text + "\n"
    for name, value in QUOTED.items():
        yield f"string {name}", f"authorization {{ user: {value}, password: x }}\n"
        yield f"top-level string {name}", f"server_name: {value}\n"
    yield "top-level braces", "{\n  port: 4555\n  max_payload: 1k\n}\n"
    yield "top-level stray brace", "port: 4555 }\n"
    yield "variable in block", "PW = s3cret\nauthorization {\n  user: a\n  password: $PW\n}\n"
    yield "variable on next line", "SIZE\n= 2k\nmax_payload: $SIZE\n"
    yield "two values on one line", "port: 4555 max_payload: 1k\n"
    yield "key without value", "port\n"
    yield "separator without value", "port:\n"


INCLUDES = {
    "bare": "include sub.conf",
    "double-quoted": 'include "sub.conf"',
    "single-quoted": "include 'sub.conf'",
    "upper case": "INCLUDE sub.conf",
    "path on next line": "include\nsub.conf",
    "followed by semicolon": "include sub.conf; port: 4555",
    "in a block": "authorization {\n  include auth.conf\n}",
    "in a block, Allman": "authorization\n{\n  include 'auth.conf'\n}",
    "missing file": "include nothere.conf",
}


def _include_layouts() -> Iterator[tuple[str, str]]:
    for name, text in INCLUDES.items():
        yield f"include {name}", text + "\n"


LAYOUTS = dict(itertools.chain(_scalar_layouts(), _block_layouts(), _value_layouts(), _include_layouts()))


@pytest.fixture(scope="module")
def nats_server() -> str:
    binary = nats_server_binary()
    need_tool(binary is not None, "nats-server")
    return str(binary)


def _nats_server_check(binary: str, conf: Path) -> str | None:
    """nats-server's digest of the file, or None when it refuses it."""
    result = subprocess.run([binary, "-t", "-c", str(conf)], capture_output=True, text=True, timeout=30)
    match = _VALID.search(result.stderr)
    assert (result.returncode == 0) == (match is not None), result.stderr
    return match.group(1) if match else None


def _pynatsd_check(conf: Path, capsys: pytest.CaptureFixture[str]) -> str | None:
    with pytest.raises(SystemExit) as exit_status:
        main(["-t", "-c", str(conf)])
    err = capsys.readouterr().err
    match = _VALID.search(err)
    assert (exit_status.value.code in (0, None)) == (match is not None), err
    assert "Traceback" not in err
    return match.group(1) if match else None


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_layout_parses_as_nats_server_parses_it(
    layout: str, nats_server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "sub.conf").write_text("max_payload: 2048\n")
    (tmp_path / "auth.conf").write_text("user: a\npassword: b\n")
    conf = tmp_path / "layout.conf"
    conf.write_text(LAYOUTS[layout])
    expected = _nats_server_check(nats_server, conf)
    assert _pynatsd_check(conf, capsys) == expected, LAYOUTS[layout]


def test_the_command_prints_nats_server_digest(nats_server: str, tmp_path: Path) -> None:
    """The `-t` line names the digest, as nats-server's does, from the command itself."""
    conf = tmp_path / "c.conf"
    conf.write_text("authorization\n{\n  user\n  : a\n  password: b\n}\nport\n: 4555\n")
    expected = _nats_server_check(nats_server, conf)
    assert expected is not None
    from tests.config.test_differential import _run

    result = _run("pynatsd", ["-t", "-c", str(conf)])
    assert result.returncode == 0, result.stderr
    assert f"pynatsd: configuration file {conf} is valid ({expected})" in result.stderr
