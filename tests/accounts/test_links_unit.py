"""The pure parts of pynatsd.accounts.links: subject relations, mappings, shadow subjects, linking rules,
the Nats-Request-Info header (the servers' behaviour is compared in the other files)."""

from __future__ import annotations

import pytest

from pynatsd.accounts.links import _shadow_subject, _with_request_info
from pynatsd.auth.specs import (
    AccountSpec,
    Export,
    Import,
    LinkError,
    StreamLink,
    Transform,
    link,
)
from pynatsd.protocol.subjects import overlap, subset


@pytest.mark.parametrize(
    ("inner", "outer", "expected"),
    [
        (b"a.b", b"a.b", True), (b"a.b", b"a.*", True), (b"a.*", b"a.b", False), (b"a.b.c", b"a.>", True),
        (b"a.>", b"a.*", False), (b"a.*", b"a.>", True), (b"a", b"a.>", False), (b"a.*.c", b"a.>", True),
        (b"a.b", b"a.b.c", False),
    ],
)  # fmt: skip
def test_subset(inner: bytes, outer: bytes, expected: bool) -> None:
    assert subset(inner, outer) is expected


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [(b"a.*", b"*.b", True), (b"a.b", b"a.c", False), (b"a.>", b"a.b.c", True), (b"a", b"a.b", False),
     (b">", b"x", True)],
)  # fmt: skip
def test_overlap(a: bytes, b: bytes, expected: bool) -> None:
    assert overlap(a, b) is expected


def test_transform_positional_and_references() -> None:
    t = Transform(b"ev.*.*", b"re.$2.$1")
    assert t.apply(b"ev.a.b") == b"re.b.a"
    assert t.reverse().apply(b"re.b.a") == b"ev.a.b"
    assert t.reverse().apply(b"re.*.a") == b"ev.a.*"  # wildcard tokens of a subscription move too
    tail = Transform(b"foo.>", b"p.foo.>")
    assert tail.apply(b"foo.x.y") == b"p.foo.x.y"
    assert tail.reverse().apply(b"p.foo.x") == b"foo.x"


@pytest.mark.parametrize(("source", "target"), [(b"a.*", b"b"), (b"a.*", b"b.>"), (b"a.*", b"b.$2")])
def test_transform_refuses_what_does_not_fit(source: bytes, target: bytes) -> None:
    with pytest.raises(LinkError):
        Transform(source, target)


def test_mapping_functions_are_refused_by_name() -> None:
    with pytest.raises(LinkError, match="not supported by pynatsd"):
        Transform(b"a.*", b"{{partition(3,1)}}")


def _stream(source: bytes, local: bytes) -> StreamLink:
    specs = {
        "A": AccountSpec("A", exports=[Export("A", source, False)]),
        "B": AccountSpec("B", imports=[Import(False, "A", source, to=local)]),
    }
    return link(specs)[0][0]


@pytest.mark.parametrize(
    ("source", "local", "sub", "shadow"),
    [
        (b"foo.>", b"p.foo.>", b"p.foo.x", b"foo.x"),  # narrower: mapped back
        (b"foo.>", b"p.foo.>", b"p.>", b"foo.>"),  # wider: the whole import
        (b"foo.>", b"p.foo.>", b"p.*.y", b"foo.y"),  # overlapping wildcards
        (b"foo.>", b"p.foo.>", b"q.>", None),  # unrelated
        (b"foo", b"bar", b"bar", b"foo"),  # literal
        (b"foo", b"bar", b"*", b"foo"),
    ],
)
def test_shadow_subjects(source: bytes, local: bytes, sub: bytes, shadow: bytes | None) -> None:
    assert _shadow_subject(_stream(source, local), sub) == shadow


def test_link_errors_and_private_exports() -> None:
    specs = {
        "A": AccountSpec("A", exports=[Export("A", b"s.>", False, approved=frozenset({"B"})),
                                       Export("A", b"svc", True)]),
        "B": AccountSpec("B", imports=[Import(False, "A", b"s.x", prefix=b"p"), Import(True, "A", b"svc")]),
        "C": AccountSpec("C", imports=[Import(False, "A", b"s.x"), Import(True, "Z", b"svc"),
                                       Import(True, "A", b"nope")]),
    }  # fmt: skip
    streams, services, errors = link(specs)
    assert [(s.importer, s.local) for s in streams] == [("B", b"p.s.x")]
    assert [(s.importer, s.local, s.remote) for s in services] == [("B", b"svc", b"svc")]
    assert errors == [
        'Error adding stream import "s.x": stream import not authorized',
        '"Z" account not defined for service import',
        'Error adding service import "nope": service import not authorized',
    ]


def test_token_required_exports_ask_the_checker() -> None:
    export = Export("A", b"priv", False, token_required=True)
    specs = {
        "A": AccountSpec("A", exports=[export]),
        "B": AccountSpec("B", imports=[Import(False, "A", b"priv", token="t")]),
    }
    seen: list[tuple[str, str]] = []

    def check(e: Export, imp: Import, importer: str) -> bool:
        seen.append((imp.token, importer))
        return False

    assert link(specs, check)[2] == ['Error adding stream import "priv": stream import not authorized']
    assert seen == [("t", "B")]
    assert len(link(specs, lambda *_: True)[0]) == 1


def test_request_info_header() -> None:
    assert _with_request_info(None, b'{"acc":"B"}') == b'NATS/1.0\r\nNats-Request-Info: {"acc":"B"}\r\n\r\n'
    mine = b"NATS/1.0\r\nX: 1\r\nNats-Request-Info: old\r\n\r\n"
    assert _with_request_info(mine, b"new") == b"NATS/1.0\r\nX: 1\r\nNats-Request-Info: new\r\n\r\n"
