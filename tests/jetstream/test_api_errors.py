"""Malformed and out-of-range JetStream API requests against nats-server -js and pynatsd -js: the same error
(code, err_code, description) or the same accepted config. A table of the cases that diverged, and a
property-based differential over generated stream/consumer configs and API bodies (wrong types,
out-of-range numbers, unknown fields, deep nesting).

The generated run is derandomized and bounded for CI (~30 s); JS_API_FUZZ_EXAMPLES=<n> runs more."""

from __future__ import annotations

import json
import os
from typing import Any

import nats
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nats.aio.client import Client

from pynatsd.jetstream.util import filters_regex
from pynatsd.protocol.subjects import matches
from tests.jetstream.conftest import JsServer
from tests.servers import ServerProcess

DEEP = b"[" * 1100 + b"]" * 1100
SUBJ = "$JS.API.STREAM.CREATE."
CC = "$JS.API.CONSUMER.CREATE.E"
DURABLE = "$JS.API.CONSUMER.DURABLE.CREATE.E."

# (subject, body): each answered with an error or a config; both servers must agree on which and on it.
CASES: list[tuple[str, Any]] = [
    (SUBJ + "A", {"name": "A", "num_replicas": "3"}),
    (SUBJ + "A", {"name": "A", "max_age": "1h"}),
    (SUBJ + "A", {"name": "A", "metadata": [1]}),
    (SUBJ + "A", {"name": "A", "metadata": {"a": 1}}),
    (SUBJ + "A", {"name": "A", "max_msgs": 9223372036854775808}),
    (SUBJ + "A", {"name": "A", "max_msgs": 1.5}),
    (SUBJ + "A", {"name": "A", "max_msg_size": 3_000_000_000}),
    (SUBJ + "A", {"name": "A", "bogus_field": 1}),
    (SUBJ + "A", {"name": "A", "subjects": "x"}),
    (SUBJ + "A", {"name": "A", "retention": 5}),
    (SUBJ + "A", {"name": "A", "storage": "Memory"}),
    (SUBJ + "A", {"name": "A", "compression": None}),
    (SUBJ + "A", {"name": "A", "sealed": "yes"}),
    (SUBJ + "A", {"name": "A", "max_age": -7}),
    (SUBJ + "A", {"name": "A", "max_age": 5}),
    (SUBJ + "A", {"name": "A", "duplicate_window": -7}),
    (SUBJ + "A", {"name": "A", "description": "x" * 4097}),
    (SUBJ + "A", {"name": "A", "republish": 5}),
    (SUBJ + "A", b'{"name":"A","x":' + DEEP + b"}"),
    (SUBJ + "A", b'{"name":"A","subjects":' + b"[" * 9000 + b"]" * 9000 + b"}"),
    (SUBJ + "A", b"[" * 20000 + b"]" * 20000),
    (SUBJ + "A", b"[]"),
    (SUBJ + "A", b"null"),
    (SUBJ + "A", b'{"name":"A"} x'),
    (SUBJ + "A", b'{"name":"A",}'),
    (SUBJ + "A", b'{"name":"A"} {"name":"B"}'),
    (SUBJ + "N" * 256, {"name": "N" * 256}),
    (SUBJ + "E", {"name": "E", "subjects": ["e.>"]}),
    ("$JS.API.STREAM.INFO.E", {"subjects_filter": 5}),
    ("$JS.API.STREAM.INFO.E", b'{"x":' + DEEP + b"}"),
    ("$JS.API.STREAM.NAMES", {"offset": "x"}),
    ("$JS.API.STREAM.PURGE.E", {"seq": -1}),
    ("$JS.API.STREAM.PURGE.E", {"keep": "x"}),
    ("$JS.API.STREAM.PURGE.E", {"filter": 5}),
    ("$JS.API.STREAM.MSG.GET.E", {"seq": "x"}),
    ("$JS.API.STREAM.MSG.DELETE.E", {"seq": "x"}),
    ("$JS.API.STREAM.MSG.DELETE.E", {"seq": 0}),
    ("$JS.API.STREAM.MSG.DELETE.E", {"seq": 100}),
    ("$JS.API.STREAM.MSG.DELETE.E", b""),
    ("$JS.API.STREAM.PURGE.E", {"filter": "zz"}),
    ("$JS.API.STREAM.PURGE.E", b'"x"'),
    (CC, {"stream_name": "E", "config": {"direct": True}}),
    (DURABLE + "dd", {"stream_name": "E",
                      "config": {"durable_name": "dd", "direct": True, "deliver_subject": "d"}}),
    (CC, {"stream_name": "E", "config": {"ack_wait": "1s"}}),
    (CC, {"stream_name": "E", "config": {"ack_wait": -1}}),
    (CC, {"stream_name": "E", "config": {"backoff": [-1, "x"]}}),
    (CC, {"stream_name": "E", "config": {"ack_policy": "explicit", "backoff": [-1]}}),
    (CC, {"stream_name": "E", "config": {"opt_start_time": "yesterday", "deliver_policy": "by_start_time"}}),
    (CC, {"stream_name": "E", "config": {"opt_start_time": "2020-01-01"}}),
    (CC, {"stream_name": "E", "config": {"opt_start_time": "2020-13-01T00:00:00Z"}}),
    (CC, {"stream_name": "E", "config": {"opt_start_time": 5}}),
    (CC, {"stream_name": "E", "config": {"filter_subject": "a..b"}}),
    (CC, {"stream_name": "E", "config": {"filter_subjects": ["e.a", "a..b"]}}),
    (CC, {"stream_name": "E", "config": {"sample_freq": "abc%"}}),
    (CC, {"stream_name": "E", "config": {"sample_freq": "-5"}}),
    (CC, {"stream_name": "E", "config": {"deliver_subject": "x", "idle_heartbeat": 1_000_000}}),
    # a deliver subject with wildcard tokens is refused; `*` or `>` inside a token is a literal
    (CC, {"stream_name": "E", "config": {"deliver_subject": "dl.*"}}),
    (CC, {"stream_name": "E", "config": {"deliver_subject": "dl.>"}}),
    (CC, {"stream_name": "E", "config": {"deliver_subject": "dl*"}}),
    (CC, {"stream_name": "E", "config": {"deliver_subject": ">dl.x>"}}),
    (CC, {"stream_name": "E", "config": {"max_deliver": "x"}}),
    (CC, {"stream_name": "E", "config": {"bogus": 1}}),
    (CC, {"stream_name": "E", "bogus": 1}),
    (CC, {"stream_name": "E", "config": {"metadata": {"a": [1]}}}),
    (CC, {"stream_name": "E", "config": {"deliver_policy": "nope"}}),
    (CC, {"stream_name": "E", "config": {"ack_policy": None}}),
    (CC, {"stream_name": "E", "config": {"opt_start_seq": -1}}),
    (CC, {"stream_name": "E", "config": {"max_ack_pending": 9223372036854775808}}),
    (CC, {"stream_name": "E", "action": "bogus", "config": {}}),
    (CC, {"stream_name": "E", "config": {"num_replicas": "1"}}),
    # issue 38: every CONSUMER.CREATE form with mismatched or invalid names
    (CC + ".n1", {"stream_name": "E", "config": {"durable_name": "n2"}}),
    (CC + ".n1", {"stream_name": "E", "config": {"durable_name": "n2", "name": "n1"}}),
    (CC + ".n1", {"stream_name": "E", "config": {"durable_name": "n2", "name": "n2"}}),
    (CC + ".n1.e.a", {"stream_name": "E", "config": {"durable_name": "n2", "filter_subject": "e.a"}}),
    (CC + ".n1.e.a", {"stream_name": "E", "config": {"filter_subjects": ["e.a"]}}),
    (CC + ".n1.e.a", {"stream_name": "E", "config": {"filter_subject": "e.b"}}),
    (CC + ".n*", {"stream_name": "E", "config": {"name": "n*"}}),
    (CC + ".n/x", {"stream_name": "E", "config": {"name": "n/x"}}),
    (CC + ".n/x", {"stream_name": "E", "config": {"durable_name": "n/x"}}),
    (CC + ".nx", {"stream_name": "E", "config": {"durable_name": "n.x"}}),
    (CC + ".F" + "F" * 255, {"stream_name": "E", "config": {}}),
    (CC, {"stream_name": "E", "config": {"name": "n x"}}),
    (CC, {"stream_name": "E", "config": {"name": "n\\x"}}),
    (CC, {"stream_name": "E", "config": {"durable_name": "d"}}),
    (CC, {"config": {"name": "nostream"}}),
    ("$JS.API.CONSUMER.DURABLE.CREATE.E.d1", {"stream_name": "E", "config": {"durable_name": "d2"}}),
    ("$JS.API.CONSUMER.DURABLE.CREATE.E.d1", {"stream_name": "E", "config": {"name": "d1"}}),
    ("$JS.API.CONSUMER.DURABLE.CREATE.E.d/1", {"stream_name": "E", "config": {"durable_name": "d/1"}}),
    ("$JS.API.CONSUMER.DURABLE.CREATE.E.d*", {"stream_name": "E", "config": {"durable_name": "d*"}}),
    (DURABLE + "G" * 256, {"stream_name": "E", "config": {"durable_name": "G" * 256}}),
    (DURABLE + "G" * 255, {"stream_name": "E", "config": {"durable_name": "G" * 255}}),
    ("$JS.API.CONSUMER.NAMES.E", {"offset": -5}),
    ("$JS.API.STREAM.NAMES", {"offset": -1}),
]  # fmt: skip

# Fields whose values are the servers' own (versions, times, generated names).
_VOLATILE = {"created", "ts", "metadata", "cluster", "state", "name"}


def outcome(resp: dict[str, Any]) -> Any:
    """An error verbatim, or an answer's config and paging without the server's own values."""
    if "error" in resp:
        return resp["error"]
    config = resp.get("config")
    if isinstance(config, dict):
        config = {k: v for k, v in config.items() if k not in _VOLATILE}
    paging = {k: resp[k] for k in ("total", "offset", "limit") if k in resp}
    return {"config": config, **paging}


async def ask(nc: Client, subject: str, body: Any) -> Any:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    msg = await nc.request(subject, data, timeout=5)
    return outcome(json.loads(msg.data))


async def test_malformed_requests_answered_as_nats_server(clients: tuple[Client, Client]) -> None:
    ref, ours = clients
    diffs = []
    for subject, body in CASES:
        want, got = await ask(ref, subject, body), await ask(ours, subject, body)
        if want != got:
            shown = body[:80] if isinstance(body, bytes) else json.dumps(body)[:160]
            diffs.append(f"{subject[:60]} {shown}\n  nats-server {want}\n  pynatsd     {got}")
    assert not diffs, "\n".join(diffs)


async def test_direct_consumers_and_required_api_levels_as_nats_server(
    clients: tuple[Client, Client],
) -> None:
    """A direct consumer (the feed of a mirror or source on another server) is created, neither listed nor
    counted; a request needing a higher API level than the server's is refused (10185) by either server."""
    seen = []
    for nc in clients:
        await nc.request(SUBJ + "DC", json.dumps({"name": "DC", "subjects": ["dc.>"]}).encode())
        config = {"name": "feed", "deliver_subject": "feed.dc", "direct": True, "idle_heartbeat": 10**9}
        body = json.dumps({"stream_name": "DC", "config": config}).encode()
        created = json.loads((await nc.request("$JS.API.CONSUMER.CREATE.DC", body)).data)
        info = json.loads((await nc.request("$JS.API.STREAM.INFO.DC", b"")).data)
        names = json.loads((await nc.request("$JS.API.CONSUMER.NAMES.DC", b"")).data)
        too_high = await nc.request(
            "$JS.API.CONSUMER.CREATE.DC", body, headers={"Nats-Required-Api-Level": "99"}
        )
        seen.append(
            (
                created["config"].get("direct"),
                created["name"].startswith("feed"),
                info["state"]["consumer_count"],
                names["consumers"],
                json.loads(too_high.data)["error"],
            )
        )
        await nc.request("$JS.API.STREAM.DELETE.DC", b"")
    assert seen[0] == seen[1]
    assert seen[1][:4] == (True, True, 0, [])


async def test_unimplemented_stream_options_refused_by_name(clients: tuple[Client, Client]) -> None:
    """Fail closed: an option nats-server has and pynatsd lacks is an error naming it, not ignored."""
    _, ours = clients
    for option, value in (("placement", {"cluster": "c"}), ("persist_mode", "async")):
        got = await ask(ours, SUBJ + "U", {"name": "U", option: value})
        assert got["err_code"] == 10052 and option in got["description"], got
    got = await ask(ours, CC + ".u", {"stream_name": "E", "config": {"rate_limit_bps": 1000}})
    assert got["err_code"] == 10012 and "rate_limit_bps" in got["description"], got


async def test_255_byte_durable_survives_restart(js_server: JsServer) -> None:
    """A durable nats-server accepts (255 bytes) is kept after a restart; 256 is refused (10102)."""
    nc = await js_server.connect()
    await nc.request(SUBJ + "R", b'{"name": "R"}')
    name = "é" * 127 + "d"  # 255 bytes in UTF-8
    for durable, code in ((name, None), (name + "x", 10102)):
        body = json.dumps({"stream_name": "R", "config": {"durable_name": durable}}).encode()
        resp = json.loads((await nc.request(f"$JS.API.CONSUMER.DURABLE.CREATE.R.{durable}", body)).data)
        assert resp.get("error", {}).get("err_code") == code, resp
    await nc.flush()
    await js_server.restart()
    nc = await js_server.connect()
    names = json.loads((await nc.request("$JS.API.CONSUMER.NAMES.R", b"")).data)
    assert names["consumers"] == [name]


# -- generated ------------------------------------------------------------------------------------------

_EXAMPLES = int(os.environ.get("JS_API_FUZZ_EXAMPLES", "200"))

# Values of every JSON type, numbers at and past Go's integer bounds, deep nesting.
_odd = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from([0, 1, -1, -2, 100, 2**31, 2**32, 2**63 - 1, 2**63, 2**64, -(2**63), -(2**63) - 1]),
    st.sampled_from([1.5, 1e3, -0.5]),
    st.sampled_from(["", "x", "1h", "50%", "abc%", "limits", "memory", "explicit", "a..b", "e.>", "*"]),
    st.sampled_from(["2020-01-01T00:00:00Z", "2020-01-01", "2020-13-01T00:00:00Z", "yesterday"]),
    st.lists(st.sampled_from([1, "x", -1, 1_000_000_000, "e.a"]), max_size=3),
    st.dictionaries(st.sampled_from(["a", "b"]), st.sampled_from([1, "x", [1]]), max_size=2),
    st.just({"deep": json.loads("[" * 40 + "]" * 40)}),
)
_STREAM_KEYS = [
    "subjects", "retention", "max_consumers", "max_msgs", "max_age", "max_msgs_per_subject",
    "max_msg_size", "discard", "storage", "num_replicas", "duplicate_window", "compression", "allow_direct",
    "sealed", "deny_delete", "deny_purge", "allow_rollup_hdrs", "metadata", "description", "no_ack",
    "allow_msg_ttl", "subject_delete_marker_ttl",
    "unknown_field",
]  # fmt: skip
_CONSUMER_KEYS = [
    "deliver_policy", "opt_start_seq", "opt_start_time", "ack_policy", "ack_wait", "max_deliver", "backoff",
    "filter_subject", "filter_subjects", "replay_policy", "sample_freq", "max_waiting", "max_ack_pending",
    "headers_only", "max_batch", "max_expires", "max_bytes", "deliver_subject", "idle_heartbeat",
    "inactive_threshold", "num_replicas", "metadata", "description", "flow_control", "unknown_field",
]  # fmt: skip
# Other requests with a body: the fields each takes (and one it does not).
_BODIES = {
    "$JS.API.STREAM.INFO.E": ["offset", "subjects_filter", "deleted_details", "unknown_field"],
    "$JS.API.STREAM.NAMES": ["offset", "subject", "unknown_field"],
    "$JS.API.STREAM.LIST": ["offset", "subject", "unknown_field"],
    "$JS.API.CONSUMER.NAMES.E": ["offset", "unknown_field"],
    "$JS.API.STREAM.PURGE.E": ["seq", "filter", "keep", "unknown_field"],
    "$JS.API.STREAM.MSG.GET.E": ["seq", "last_by_subj", "next_by_subj", "start_time", "unknown_field"],
    "$JS.API.STREAM.MSG.DELETE.E": ["seq", "no_erase", "unknown_field"],
}

_request = st.one_of(
    st.dictionaries(st.sampled_from(_STREAM_KEYS), _odd, max_size=3).map(
        lambda cfg: (SUBJ + "G", {"name": "G", **cfg})
    ),
    st.dictionaries(st.sampled_from(_CONSUMER_KEYS), _odd, max_size=3).map(
        lambda cfg: (CC + ".g", {"stream_name": "E", "config": cfg})
    ),
    st.sampled_from(sorted(_BODIES)).flatmap(
        lambda subject: st.tuples(
            st.just(subject), st.dictionaries(st.sampled_from(_BODIES[subject]), _odd, max_size=2)
        )
    ),
)


@settings(
    max_examples=_EXAMPLES,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(requests=st.lists(_request, min_size=1, max_size=4))
def test_generated_requests_answered_as_nats_server(
    servers: tuple[ServerProcess, ServerProcess], requests: list[tuple[str, Any]]
) -> None:
    """Each example against the module's pair of servers: stream E kept, G and consumer g made anew."""
    import asyncio

    async def run() -> None:
        ref_server, our_server = servers
        ref, ours = await nats.connect(ref_server.url), await nats.connect(our_server.url)

        async def reset(nc: Client) -> None:  # the stream the consumer requests use; G and g made anew
            await nc.request(SUBJ + "E", b'{"name": "E", "subjects": ["e.>"]}', timeout=5)
            await nc.request("$JS.API.STREAM.DELETE.G", b"", timeout=5)
            # every consumer of E goes (g, and those other tests left: ephemeral ones expire on each server's
            # own schedule, which made CONSUMER.NAMES.E's total differ now and then)
            names = json.loads((await nc.request("$JS.API.CONSUMER.NAMES.E", b"", timeout=5)).data)
            for name in names.get("consumers") or []:
                await nc.request(f"$JS.API.CONSUMER.DELETE.E.{name}", b"", timeout=5)

        try:  # each step on both servers at once (5.6 s for the 200 examples before, one after the other)
            await asyncio.gather(reset(ref), reset(ours))
            for subject, body in requests:
                want, got = await asyncio.gather(ask(ref, subject, body), ask(ours, subject, body))
                assert got == want, f"{subject} {json.dumps(body)[:300]}\n  ref {want}\n  our {got}"
        finally:
            await ref.close()
            await ours.close()

    asyncio.run(run())


async def test_deep_bodies_leave_no_traceback(
    servers: tuple[ServerProcess, ServerProcess], clients: tuple[Client, Client]
) -> None:
    """A deep pull request is a 400 on both servers (it raised RecursionError in pynatsd); nothing in the
    log from any of the deep bodies above."""
    for nc in clients:
        await nc.request(SUBJ + "P", b'{"name": "P"}')
        await nc.request(CC.replace(".E", ".P") + ".c", b'{"stream_name": "P", "config": {"name": "c"}}')
        reply = await nc.request("$JS.API.CONSUMER.MSG.NEXT.P.c", b'{"batch": ' + DEEP + b"}", timeout=5)
        assert reply.headers and reply.headers.get("Status") == "400"
    log = servers[1].log()
    assert "Traceback" not in log and "RecursionError" not in log


UNCLOSED = {
    "deep unclosed array": b"[" * 1100,
    "deep unclosed object": b'{"a":' * 1100,
    # Scanned from every quote again before: 41 KB took 8.3 s of the loop, this one minutes.
    "unclosed string of escaped quotes": b"[" * 1100 + b'"' + b'\\"' * 100_000,
    "an integer past 4,300 digits": b'{"name": "N", "max_msgs": ' + b"9" * 5000 + b"}",
}


@pytest.mark.parametrize("body", list(UNCLOSED.values()), ids=list(UNCLOSED))
async def test_unclosed_and_huge_bodies_answered_as_nats_server(
    servers: tuple[ServerProcess, ServerProcess], clients: tuple[Client, Client], body: bytes
) -> None:
    """Bodies the bounded decoder let through as RecursionError or ValueError (a traceback and an
    'internal error' each) or scanned in quadratic time: nats-server's answer, nothing in the log."""
    answers = [await ask(nc, SUBJ + "N", body) for nc in clients]
    assert answers[0] == answers[1]
    log = servers[1].log()
    assert "Traceback" not in log and "internal error" not in log


async def test_a_wildcard_reply_neither_answered_nor_stalling_the_queue(js_server: JsServer) -> None:
    """A queued request (stream info) whose reply is a wildcard is dropped; the requests behind it are
    answered (publishing the answer raised in the queue's worker and stranded them)."""
    nc = await js_server.connect()
    await nc.request(SUBJ + "W", b'{"name": "W"}')
    await nc.publish("$JS.API.STREAM.INFO.W", b"", reply="answers.*")
    info = json.loads((await nc.request("$JS.API.STREAM.INFO.W", b"", timeout=5)).data)
    assert info["config"]["name"] == "W"


async def test_an_accounts_requests_are_answered_in_order(js_server: JsServer) -> None:
    """A consumer info sent right behind a (queued) consumer create finds the consumer: while the queue holds
    requests, every request joins it."""
    nc = await js_server.connect()
    await nc.request(SUBJ + "O", b'{"name": "O"}')
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox + ".*")
    body = json.dumps({"stream_name": "O", "config": {"name": "c"}}).encode()
    await nc.publish("$JS.API.CONSUMER.CREATE.O.c", body, reply=inbox + ".create")
    await nc.publish("$JS.API.CONSUMER.INFO.O.c", b"", reply=inbox + ".info")
    answers = {}
    for _ in range(2):
        msg = await sub.next_msg(timeout=5)
        answers[msg.subject.rsplit(".", 1)[1]] = json.loads(msg.data)
    assert "error" not in answers["create"] and "error" not in answers["info"], answers


async def test_durable_state_of_the_earlier_layout_still_loads(js_server: JsServer) -> None:
    """State written as obs/<name>.json (before obs/<name>/state.json) is restored, once."""
    nc = await js_server.connect()
    await nc.request(SUBJ + "L", b'{"name": "L"}')
    body = json.dumps({"stream_name": "L", "config": {"durable_name": "d"}}).encode()
    await nc.request("$JS.API.CONSUMER.DURABLE.CREATE.L.d", body)
    await js_server.stop()
    obs = js_server.store_dir / "jetstream" / "$G" / "streams" / "L" / "obs"
    (obs / "d" / "state.json").rename(obs / "d.json")
    (obs / "d").rmdir()
    await js_server.start()
    nc = await js_server.connect()
    names = json.loads((await nc.request("$JS.API.CONSUMER.NAMES.L", b"")).data)
    assert names["consumers"] == ["d"]


_token = st.sampled_from(["a", "b", "ab", "*", ">"])


@settings(max_examples=300, derandomize=True)
@given(
    filters=st.lists(st.lists(_token, min_size=1, max_size=3).map(".".join), max_size=2),
    subject=st.lists(st.sampled_from(["a", "b", "ab"]), min_size=1, max_size=4).map(".".join),
)
def test_filters_regex_agrees_with_matches(filters: list[str], subject: str) -> None:
    """The regex that counts pending messages and purges by filter agrees with subjects.matches."""
    fs = [f.encode() for f in filters if ">" not in f[:-1]]  # '>' only last, as in a valid filter
    want = not fs or any(matches(f, subject.encode()) for f in fs)
    assert (filters_regex(fs).fullmatch(subject.encode()) is not None) == want
