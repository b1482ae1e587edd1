"""Coverage-guided atheris target for the parser: any exception but ProtocolError is a finding."""

from __future__ import annotations

import sys

import atheris

with atheris.instrument_imports():
    from pynatsd.protocol.errors import ProtocolError
    from pynatsd.protocol.parser import Parser

MAX_CONTROL_LINE = 64
MAX_PAYLOAD = 128


def test_one_input(data: bytes) -> None:
    """Feed `data` in two chunks split at its first byte's value; check the buffer bound."""
    if not data:
        return
    cut = data[0] % len(data)
    parser = Parser(max_control_line=MAX_CONTROL_LINE, max_payload=MAX_PAYLOAD, headers=True)
    for chunk in (data[1 : cut + 1], data[cut + 1 :]):
        try:
            parser.feed(chunk)
        except ProtocolError:
            return
        if parser.buffered > MAX_CONTROL_LINE + MAX_PAYLOAD + 16:
            raise AssertionError(f"parser buffers {parser.buffered} bytes")


if __name__ == "__main__":
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
