"""What the Go and C drivers send, so the tests can predict every byte they should receive.

Mirrors `payloadSizes`/`payload`/`headersFor` in go/natsinterop/main.go and the same helpers in c/common.c.
"""

from __future__ import annotations

PAYLOAD_SIZES = (0, 1, 2, 10, 127, 128, 1000, 4095, 4096, 65536)

# Patterns subscribed and subjects published (under a prefix) by the `wildcards` scenario.
WILDCARD_PATTERNS = ("*", ">", "a.*", "*.c", "a.>")
WILDCARD_SUBJECTS = ("a", "a.b", "x.c", "a.b.c", "a.c")


def payload(i: int) -> bytes:
    """Message i: byte j is (i + 7*j) % 256, so CR, LF and NUL bytes occur inside payloads."""
    size = PAYLOAD_SIZES[i % len(PAYLOAD_SIZES)]
    return bytes((i + 7 * j) % 256 for j in range(size))


def header_pairs(i: int, origin: str) -> list[list[str]]:
    """The headers the drivers attach to message i, as printed: keys sorted, values in wire order."""
    pairs = [
        ["X-Seq", str(i)],
        ["X-Multi", "one"],
        ["X-Multi", "two"],
        ["X-Spaces", "a  b c"],
        ["X-Colon", "k:v:w"],
        ["x-lower", "MiXeD"],
        ["X-Origin", origin],
    ]
    return sorted(pairs, key=lambda kv: kv[0])  # stable: X-Multi keeps one, two


def python_headers(i: int) -> dict[str, str]:
    """Headers nats-py publishes (a dict, so no repeated keys)."""
    return {
        "X-Seq": str(i),
        "X-Spaces": "a  b c",
        "X-Colon": "k:v:w",
        "x-lower": "MiXeD",
        "X-Origin": "python",
    }


def wildcard_expectation(prefix: str) -> dict[str, list[str]]:
    """Subjects each wildcard pattern must receive, in publish order."""

    def matches(pattern: str, subject: str) -> bool:
        p, s = pattern.split("."), subject.split(".")
        for k, token in enumerate(p):
            if token == ">":
                return len(s) > k
            if k >= len(s) or (token != "*" and token != s[k]):
                return False
        return len(p) == len(s)

    return {
        pat: [f"{prefix}.{subj}" for subj in WILDCARD_SUBJECTS if matches(pat, subj)]
        for pat in WILDCARD_PATTERNS
    }


def parse_header_block(block: bytes) -> tuple[bytes, list[list[str]]]:
    """Splits a raw NATS header block into its status line and [key, value] lines in wire order."""
    assert block.endswith(b"\r\n\r\n"), block
    lines = block[:-4].split(b"\r\n")
    pairs = []
    for line in lines[1:]:
        key, sep, value = line.partition(b":")
        assert sep, line
        pairs.append([key.decode(), value.strip().decode()])
    return lines[0], pairs
