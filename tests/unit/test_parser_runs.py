"""Parser(runs=True): PUBRUN ops stand for exactly the PUB ops a plain parser emits, however the stream is
split, whatever the payloads hold (including the PUB line itself)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pynatsd.protocol.ops import PUB, PUBMIX, PUBRUN, Op
from pynatsd.protocol.parser import Parser, expand_run

LINE_TRICKS = [b"", b"x", b"PUB a 3\r\n", b"\r\n", b"PUB a r 3\r\n", b"PUB a ", b"PUB a.b "]


@st.composite
def streams(draw: st.DrawFn) -> bytes:
    parts = []
    for _ in range(draw(st.integers(1, 12))):
        subject = draw(st.sampled_from([b"a", b"a.b", b"foo.bar.baz"]))
        reply = draw(st.sampled_from([b"", b" r", b" _INBOX.x"]))
        tricky = draw(st.booleans())
        payload = draw(st.sampled_from(LINE_TRICKS)) if tricky else draw(st.binary(max_size=12))
        frame = b"PUB " + subject + reply + b" %d\r\n" % len(payload) + payload + b"\r\n"
        if draw(st.integers(0, 9)) == 0:
            frame = frame.replace(b"\r\n", b"\n", 1)  # bare LF line: parsed, never part of a run
        parts.append(frame * draw(st.integers(1, 40)))
        if draw(st.integers(0, 5)) == 0:
            parts.append(b"PING\r\n")
    return b"".join(parts)


def plain_ops(ops: list[Op]) -> list[Op]:
    return [one for op in ops for one in (expand_run(op) if op[0] in (PUBRUN, PUBMIX) else [op])]


@settings(max_examples=300, deadline=None)
@given(streams(), st.lists(st.integers(1, 400), max_size=6))
def test_runs_expand_to_the_plain_ops(data: bytes, cuts: list[int]) -> None:
    expected = Parser().feed(data)
    parser = Parser(runs=True)
    got: list[Op] = []
    pos = 0
    for cut in [*cuts, len(data)]:
        got += parser.feed(data[pos : pos + cut])
        pos += cut
    got += parser.feed(data[pos:])
    assert plain_ops(got) == expected


def test_identical_frames_make_one_run_whose_replace_frames_every_message() -> None:
    frame = b"PUB s 16\r\n" + b"y" * 16 + b"\r\n"
    (op,) = Parser(runs=True).feed(frame * 1000)
    assert op[0] == PUBRUN and op[5] == 1000 and op[3] == b"PUB s " and op[6:] == (16000, 16)
    assert bytes(op[4]).replace(op[3], b"MSG s 9 ") == (b"MSG s 9 16\r\n" + b"y" * 16 + b"\r\n") * 1000


def test_one_subject_with_varying_sizes_makes_one_run() -> None:
    data = b"PUB s r 1\r\nx\r\nPUB s r 2\r\nxy\r\nPUB s r 1\r\nz\r\n"
    (op,) = Parser(runs=True).feed(data)
    assert op[0] == PUBRUN and op[5:] == (3, 4, -1)
    assert bytes(op[4]).replace(op[3], b"MSG s 9 ") == data.replace(b"PUB s ", b"MSG s 9 ")


def test_a_payload_holding_the_prefix_shows_in_the_replaced_length() -> None:
    """The contract the broker relies on to fall back to single PUBs (see pynatsd.protocol.ops.PUBRUN)."""
    frame = b"PUB a 6\r\nPUB a \r\n"
    (op,) = Parser(runs=True).feed(frame * 3)
    _, _, _, prefix, view, count, _, _ = op
    chunk = bytes(view)
    new = b"MSG a 1 "
    assert len(chunk.replace(prefix, new)) != len(chunk) + count * (len(new) - len(prefix))
    clean = b"PUB a 6\r\nPUB b \r\n" * 3
    (op,) = Parser(runs=True).feed(clean)
    assert len(bytes(op[4]).replace(op[3], new)) == len(clean) + 3 * (len(new) - len(op[3]))


def test_a_run_stops_at_the_first_different_frame() -> None:
    same = b"PUB a 1\r\nx\r\n"
    ops = Parser(runs=True).feed(same * 5 + b"PUB b 2\r\nxy\r\n" + same * 3)
    # The other frame and the next one make a mix of two subjects; the rest is a run again.
    assert [(op[0], op[5] if op[0] == PUBRUN else op[3]) for op in ops] == [
        (PUBRUN, 5),
        (PUBMIX, 2),
        (PUBRUN, 2),
    ]


def test_one_subject_with_a_new_reply_each_time_makes_no_run_and_one_reply_does() -> None:
    # Request-style traffic (one subject, a new reply each time) is per-message; one reply makes a run.
    data = b"".join(b"PUB svc _INBOX.%d 1\r\nx\r\n" % i for i in range(5))
    assert [op[0] for op in Parser(runs=True).feed(data)] == [PUB] * 5
    data = b"PUB svc r 1\r\nx\r\nPUB svc r 2\r\nyy\r\nPUB svc r 1\r\nz\r\n"
    ops = Parser(runs=True).feed(data)
    assert [op[0] for op in ops] == [PUBRUN]
    assert plain_ops(ops) == Parser().feed(data)


def test_a_run_after_a_longer_one_is_cut_exactly_where_it_ends() -> None:
    # The check of a run starts from the previous run's length: a shorter run must not be overrun.
    same = b"PUB a 1\r\nx\r\n"
    parser = Parser(runs=True)
    (op,) = parser.feed(same * 1000)
    assert op[0] == PUBRUN and op[5] == 1000
    data = (
        same * 3
        + b"PUB b 1\r\nx\r\n"
        + b"PUB b 2\r\nxy\r\n"
        + same * 700
        + b"PUB c 1\r\nx\r\n" * 2
        + same * 2
    )
    ops = parser.feed(data)
    assert [(op[0], op[5]) for op in ops] == [
        (PUBRUN, 3),
        (PUBRUN, 2),
        (PUBRUN, 700),
        (PUBRUN, 2),
        (PUBRUN, 2),
    ]
    assert plain_ops(ops) == Parser().feed(data)


def test_a_size_spelled_with_leading_zeros_makes_the_run_non_uniform() -> None:
    # Frames are then of different lengths although their payloads are not: nothing may assume offsets.
    data = b"PUB s 2\r\nxx\r\nPUB s 02\r\nyy\r\nPUB s 2\r\nzz\r\n"
    (op,) = Parser(runs=True).feed(data)
    assert op[0] == PUBRUN and op[5:] == (3, 6, -1)
    assert plain_ops([op]) == Parser().feed(data)


def test_interleaved_subjects_make_one_mix_with_a_prefix_per_subject() -> None:
    data = b"".join(b"PUB s%d %d\r\n%s\r\n" % (i % 3, i % 5, b"x" * (i % 5)) for i in range(300))
    parser = Parser(runs=True)
    parser.feed(data[:100])  # the lines are cached once seen: a mix is built from cached lines only
    ops = parser.feed(data[100:])
    (mix,) = [op for op in ops if op[0] == PUBMIX and op[3] > 100]
    assert sorted(mix[1]) == [(b"s%d" % i, b"PUB s%d " % i) for i in range(3)]
    chunk = bytes(mix[2])
    assert sum(chunk.count(prefix) for _, prefix in mix[1]) == mix[3]  # no payload here holds a prefix
    assert (
        mix[4] == sum(len(op[3]) for op in expand_run(mix)) == sum(mix[6])
    )  # payload bytes, per subject too
    assert len(mix[5]) == 2 * mix[3]  # an offset and a subject index per frame
    assert plain_ops(Parser(runs=True).feed(data)) == Parser().feed(data)


def test_a_mix_takes_neither_replies_nor_a_fifth_subject_nor_a_same_subject_run() -> None:
    parser = Parser(runs=True)
    warm = b"".join(b"PUB s%d 1\r\nx\r\n" % i for i in range(6)) + b"PUB s0 r 1\r\nx\r\n"
    parser.feed(warm)
    data = b"".join(b"PUB s%d 1\r\nx\r\n" % i for i in (0, 1, 2, 3, 4, 0, 1)) + b"PUB s0 r 1\r\nx\r\n"
    ops = parser.feed(data)
    assert [op[0] for op in ops] == [PUBMIX, PUBMIX, PUB]
    assert ops[0][3] == 4 and ops[1][3] == 3  # s0..s3, then s4 s0 s1; the request alone
    assert [subject for subject, _ in ops[1][1]] == [b"s4", b"s0", b"s1"]
    assert plain_ops(ops) == Parser().feed(data)


def test_a_mix_records_each_frame_offset_and_subject() -> None:
    frame = b"PUB s%d %d\r\n%s\r\n"
    data = b"".join(frame % (i % 2, 200 + i % 3, (b"PUB s1 " * 40)[: 200 + i % 3]) for i in range(9))
    parser = Parser(runs=True)
    ops = parser.feed(data)
    mixes = [op for op in ops if op[0] == PUBMIX]
    assert mixes
    for op in mixes:
        chunk, frames = bytes(op[2]), op[5]
        starts, indexes = frames[0::2], frames[1::2]
        assert len(starts) == op[3] and starts[0] == 0
        for start, index in zip(starts, indexes, strict=True):
            assert chunk.startswith(op[1][index][1], start)  # each recorded frame starts with its prefix
    assert plain_ops(ops) == Parser().feed(data)


def test_mix_pause_parses_that_many_reads_without_mixes() -> None:
    data = b"".join(b"PUB s%d 1\r\nx\r\n" % (i % 2) for i in range(10))
    parser = Parser(runs=True)
    parser.feed(data)
    parser.mix_pause = 2  # what a broker that had to expand a mix sets
    assert PUBMIX not in [op[0] for op in parser.feed(data)]
    assert PUBMIX not in [op[0] for op in parser.feed(data)]
    assert PUBMIX in [op[0] for op in parser.feed(data)]
