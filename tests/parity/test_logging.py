"""Logs as nats-server writes them: the start banner line for line, trace in both directions, reload,
size-limited rotation and syslog (remote over UDP, local over a unix socket)."""

from __future__ import annotations

import contextlib
import json
import re
import signal
import socket
import ssl
import time
import urllib.request
from collections import Counter
from pathlib import Path

import nats
import nats.aio.client
import pytest

from pynatsd import __version__
from pynatsd.base.build import git_commit
from tests.parity.conftest import KINDS, Running, Spawn, run
from tests.security.certs import make_certs
from tests.servers import free_port, wait_for_port
from tests.wire import WireClient

NKEY_ID = re.compile(r"\bN[A-Z2-7]{55}\b")


def banner(server: Running) -> list[tuple[str, str]]:
    """The log up to `Server is ready`, with what differs by design (ids, our name and version, the
    random ports) replaced by placeholders."""
    lines = []
    for level, text in server.lines():
        text = NKEY_ID.sub("<ID>", text)
        text = re.sub(r"(Listening for client connections on|monitor on) \S+", r"\1 <ADDR>", text)
        text = text.replace("Starting nats-server", "Starting <SERVER>").replace(
            "Starting pynatsd", "Starting <SERVER>"
        )
        text = re.sub(r"^  Version:  .*", "  Version:  <VERSION>", text)
        text = re.sub(r"^  Git:      \[.*\]", "  Git:      [<COMMIT>]", text)
        lines.append((level, text))
        if text == "Server is ready":
            break
    return lines


def test_banner_line_for_line(spawn: Spawn, tmp_path: Path) -> None:
    """Plaintext password warning, the configuration file with the same digest, the monitor, TLS."""
    certs = make_certs(tmp_path)
    conf = tmp_path / "banner.conf"
    conf.write_text(
        f"listen: 127.0.0.1:{free_port()}\nhttp: 127.0.0.1:{free_port()}\n"
        "authorization { user: alice, password: secret }\n"
        f'tls {{ cert_file: "{certs["server"]}", key_file: "{certs["server_key"]}" }}\n'
    )
    got = {}
    for kind in KINDS:  # one after the other, on the same ports, from the very same file
        server = spawn(kind, "-c", str(conf))
        got[kind] = banner(server)
        server.stop()
    assert got["pynatsd"] == got["nats-server"]
    texts = [text for _, text in got["pynatsd"]]
    assert "TLS required for client connections" in texts
    assert ("WRN", "Plaintext passwords detected, use nkeys or bcrypt") in got["pynatsd"]
    assert any(t.startswith(f"Using configuration file: {conf} (sha256:") for t in texts)


def test_banner_names_our_version_and_build(spawn: Spawn) -> None:
    text = spawn("pynatsd", "-a", "127.0.0.1", "-p", str(free_port())).text()
    assert "[INF] Starting pynatsd\n" in text
    assert f"[INF]   Version:  {__version__} " in text
    assert f"[INF]   Git:      [{git_commit() or 'not set'}]" in text
    assert "[DBG]" not in text  # the Python build line is debug, as nats-server's Go build line


def session(port: int) -> None:
    """A client that exercises every traced frame: CONNECT with secrets, SUB, PUB/HPUB, PING, -ERR."""
    connect = {"verbose": True, "pedantic": False, "user": "u", "pass": "p1", "auth_token": "t1",
               "sig": "s1", "nkey": "k1", "protocol": 1, "headers": True}  # fmt: skip
    with WireClient(port) as c:
        c.send(f"CONNECT {json.dumps(connect, separators=(',', ':'))}\r\n".encode())
        c.exchange(
            b"SUB foo 1\r\nPUB foo r 11\r\nhello world\r\nHPUB foo 12 14\r\nNATS/1.0\r\n\r\nhi\r\n"
            b'PUB foo 2\r\nab\r\nPUB foo 0\r\n\r\nPUB foo 7\r\n\x00\xff"\xc3\xa9\n\t\r\n'
        )
        c.send(b"bogus\r\n")
        c.read_until(b"-ERR", timeout=5)


def traced(server: Running) -> Counter[str]:
    """The trace lines, without the client prefix (nats-server adds the account and user)."""
    lines = (
        re.sub(r"^.*? - cid:\d+ - (?:\"[^\"]*\" - )?", "", t) for level, t in server.lines() if level == "TRC"
    )
    return Counter(line for line in lines if not line.startswith("<->"))  # nats-server's internal DELSUB


def test_trace_in_both_directions_with_truncation(spawn: Spawn) -> None:
    """The same `<<-` and `->>` lines as nats-server (order aside: pynatsd traces what it writes when it
    flushes, after the read), payloads cut at --max_traced_msg_len, secrets redacted."""
    got = {}
    for kind in KINDS:
        port = free_port()
        server = spawn(kind, "-a", "127.0.0.1", "-p", str(port), "-V", "--max_traced_msg_len", "5")
        session(port)
        time.sleep(0.3)
        got[kind] = traced(server)
    assert got["pynatsd"] == got["nats-server"]
    lines = got["pynatsd"]
    assert '->> MSG_PAYLOAD: ["hello..."]' in lines and '<<- MSG_PAYLOAD: ["hello..."]' in lines
    assert "->> [MSG foo 1 r 11]" in lines and "->> [-ERR Unknown Protocol Operation]" in lines


async def test_trace_covers_tls_connections(spawn: Spawn, tmp_path: Path) -> None:
    """After the TLS upgrade the connection writes through a new transport: still traced `->>`."""
    certs = make_certs(tmp_path)
    port = free_port()
    server = spawn("pynatsd", "-a", "127.0.0.1", "-p", str(port), "-V", "--tlscert", certs["server"],
                   "--tlskey", certs["server_key"])  # fmt: skip
    ctx = ssl.create_default_context(cafile=certs["ca"])
    nc = await nats.connect(f"tls://127.0.0.1:{port}", tls=ctx)
    await nc.flush()
    await nc.close()
    time.sleep(0.2)
    assert "->> [PONG]" in traced(server)


def test_trace_does_not_turn_on_debug(spawn: Spawn) -> None:
    for kind in KINDS:
        port = free_port()
        trace_only = spawn(kind, "-a", "127.0.0.1", "-p", str(port), "-V")
        with WireClient(port) as c:
            c.exchange(b"CONNECT {}\r\n")
        time.sleep(0.2)
        levels = {level for level, _ in trace_only.lines()}
        assert "TRC" in levels and "DBG" not in levels, kind
    both = spawn("pynatsd", "-a", "127.0.0.1", "-p", str(free_port()), "-DV")
    assert "DBG" in {level for level, _ in both.lines()}


def test_no_password_is_ever_traced(spawn: Spawn) -> None:
    """Issue 18 item 10: every key a secret can come under is redacted, `password` and `jwt` included."""
    port = free_port()
    server = spawn("pynatsd", "-a", "127.0.0.1", "-p", str(port), "-V")
    secrets = {"password": "S1-password", "pass": "S2-pass", "auth_token": "S3-token", "sig": "S4-sig",
               "jwt": "S5-jwt", "Password": "S6-Password", "passphrase": "S7-phrase",
               "nested": {"opts": [{"password": "S8-nested"}]}}  # fmt: skip
    with WireClient(port) as c:
        c.exchange(f"CONNECT {json.dumps({'verbose': False, 'user': 'u', **secrets})}\r\n".encode())
    time.sleep(0.2)
    text = server.text()
    assert "<<- [CONNECT" in text
    assert re.findall(r"S\d-\w+", text) == []  # every secret above is `S<n>-…`


def test_reload_logs_what_it_reloaded(spawn: Spawn, tmp_path: Path) -> None:
    """Every `Reloaded: …` line pynatsd logs is one nats-server logs for the same change."""
    got = {}
    for kind in KINDS:
        conf = tmp_path / f"{kind}.conf"
        port = free_port()
        conf.write_text(f"listen: 127.0.0.1:{port}\nauthorization {{ user: u, password: p }}\n")
        server = spawn(kind, "-c", str(conf))
        conf.write_text(
            f"listen: 127.0.0.1:{port}\ndebug: true\ntrace: true\nmax_traced_msg_len: 10\n"
            "authorization { user: u, password: q, timeout: 3 }\n"
        )
        server.signal(signal.SIGHUP)
        server.wait_for("Reloaded server configuration")
        got[kind] = {text for _, text in server.lines() if text.startswith("Reloaded")}
    ours = got["pynatsd"]
    assert {t for t in ours if t.startswith("Reloaded:")} <= got["nats-server"]
    for line in ("Reloaded: debug = true", "Reloaded: trace = true", "Reloaded: max_traced_msg_len = 10",
                 "Reloaded: authorization password", "Reloaded: authorization timeout = 3"):  # fmt: skip
        assert line in ours
    assert any(re.fullmatch(r"Reloaded server configuration \(sha256:[0-9a-f]{64}\)", t) for t in ours)


def test_reload_turns_trace_on_for_open_connections(spawn: Spawn, tmp_path: Path) -> None:
    for kind in KINDS:
        conf = tmp_path / f"{kind}-trace.conf"
        port = free_port()
        conf.write_text(f"listen: 127.0.0.1:{port}\n")
        server = spawn(kind, "-c", str(conf))
        with WireClient(port) as client:
            client.exchange(b'CONNECT {"verbose":false}\r\n')
            conf.write_text(f"listen: 127.0.0.1:{port}\ntrace: true\n")
            server.signal(signal.SIGHUP)
            server.wait_for("Reloaded server configuration")
            client.exchange(b"SUB foo 1\r\n")
        time.sleep(0.2)
        lines = traced(server)
        assert {"<<- [SUB foo 1]", "<<- [PING]", "->> [PONG]"} <= set(lines), (kind, lines)


def test_log_size_limit_rotates(spawn: Spawn, tmp_path: Path) -> None:
    """Past --log_size_limit the file is renamed `<file>.YYYY.MM.DD.hh.mm.ss.nnnnnnnnn` and the new one
    starts with `Rotated log, backup saved as "…"`, for both servers."""
    for kind in KINDS:
        log = tmp_path / kind / "server.log"
        log.parent.mkdir()
        port = free_port()
        args = ["-a", "127.0.0.1", "-p", str(port), "-l", str(log), "-V", "--log_size_limit", "2000"]
        server = spawn(kind, *args, ready=False)  # the log is in the file: wait for the port
        wait_for_port(port, server.proc)
        with WireClient(port) as c:
            c.exchange(b'CONNECT {"verbose":false}\r\n' + b"SUB foo 1\r\nPUB foo 10\r\n0123456789\r\n" * 40)
        time.sleep(0.3)
        backups = sorted(p for p in log.parent.iterdir() if p != log)
        assert backups, kind
        assert all(re.fullmatch(r"server\.log\.\d{4}(\.\d\d){5}\.\d{9}", p.name) for p in backups), backups
        assert 'Rotated log, backup saved as "' in log.read_text(), kind


def test_log_max_num_purges_old_backups(spawn: Spawn, tmp_path: Path) -> None:
    """`logfile_max_num: 2`: the current file and one backup remain; `Purged log file "…"` is logged."""
    for kind in KINDS:
        log = tmp_path / kind / "server.log"
        log.parent.mkdir()
        port = free_port()
        conf = log.parent / "rotate.conf"
        conf.write_text(
            f'listen: 127.0.0.1:{port}\nlog_file: "{log}"\ntrace: true\n'
            "logfile_size_limit: 1000\nlogfile_max_num: 2\n"
        )
        server = spawn(kind, "-c", str(conf), ready=False)
        wait_for_port(port, server.proc)
        with WireClient(port) as c:
            c.exchange(b'CONNECT {"verbose":false}\r\n' + b"SUB foo 1\r\nPUB foo 10\r\n0123456789\r\n" * 60)
        time.sleep(0.3)
        backups = [p for p in log.parent.iterdir() if p.name.startswith("server.log.")]
        assert len(backups) == 1, (kind, backups)
        assert 'Purged log file "' in log.read_text() + backups[0].read_text(), kind


def receive(sock: socket.socket, needle: bytes, timeout: float = 10) -> bytes:
    sock.settimeout(0.5)
    got, deadline = b"", time.monotonic() + timeout
    while needle not in got and time.monotonic() < deadline:
        with contextlib.suppress(TimeoutError):
            got += sock.recv(65536) + b"\n"
    return got


def test_remote_syslog_over_udp(spawn: Spawn) -> None:
    """`-r udp://host:port`: each line a datagram at daemon/notice or the record's severity."""
    for kind in KINDS:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sink:
            sink.bind(("127.0.0.1", 0))
            url = f"udp://127.0.0.1:{sink.getsockname()[1]}"
            spawn(kind, "-a", "127.0.0.1", "-p", str(free_port()), "-r", url, ready=False)
            got = receive(sink, b"Server is ready")
        assert b"Server is ready" in got, (kind, got)
        assert b"Listening for client connections on 127.0.0.1:" in got
        if kind == "pynatsd":
            assert re.search(rb"<29>pynatsd\[\d+\]: Server is ready", got), got  # daemon.notice


def test_syslog_over_a_unix_socket(spawn: Spawn, tmp_path: Path) -> None:
    path = tmp_path / "syslog.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sink:
        sink.bind(str(path))
        spawn("pynatsd", "-a", "127.0.0.1", "-p", str(free_port()), "-r", f"unix://{path}", ready=False)
        assert b"Server is ready" in receive(sink, b"Server is ready")


def test_syslog_that_cannot_be_reached_stops_the_server(tmp_path: Path) -> None:
    """nats-server: `error connecting to syslog`, exit 1; never a server that logs nowhere."""
    missing = f"unix://{tmp_path / 'no-such.sock'}"
    for kind in KINDS:
        done = run(kind, "-p", str(free_port()), "-r", missing, timeout=10)
        assert done.returncode == 1, (kind, done)
        assert "error connecting to syslog" in done.stdout + done.stderr


@pytest.mark.parametrize("kind", KINDS)
def test_local_syslog_flag(kind: str) -> None:
    """`-s` with no local syslog daemon fails as nats-server does (with one, it logs there)."""
    if any(Path(p).is_socket() for p in ("/dev/log", "/var/run/syslog")):
        pytest.skip("a local syslog daemon is listening")
    done = run(kind, "-p", str(free_port()), "-s", timeout=10)
    assert done.returncode == 1 and "error connecting to syslog" in done.stdout + done.stderr


# What a misbehaving client sends (after a CONNECT where it needs one), one connection each
BAD_CLIENTS = (
    b"FOO bar\r\n",
    b'CONNECT {"verbose":false}\r\nPUB x 2000000\r\n',
    b"CONNECT {bad json\r\n",
    b'CONNECT {"verbose":false, "name" "x"}\r\n',
    b'CONNECT {"verbose":false}\r\nPUB x y z w\r\n',
    b'CONNECT {"verbose":false}\r\nPING\r\nXYZ 1 2 3\r\n',
)
CLIENT_PREFIX = re.compile(r"^127\.0\.0\.1:\d+ - cid:\d+ - ")


async def test_client_lines_carry_the_tag_and_name_what_went_wrong(spawn: Spawn) -> None:
    """Each bad client's error line as nats-server words it (the parser's op snippet, both sizes of a
    payload over the limit, Go's words for a malformed CONNECT, the PUB arguments) and, once a client
    has connected, nats-server's tag after its address: `"v<version>:<lang>:<name>" - "<account>/<user>"`."""
    got = {}
    for kind in KINDS:
        port = free_port()
        server = spawn(kind, "-a", "127.0.0.1", "-p", str(port), "-D", "--user", "u", "--pass", "p")
        for frames in BAD_CLIENTS:
            with WireClient(port) as client:
                client.send(frames.replace(b'"verbose":false', b'"verbose":false,"user":"u","pass":"p"'))
                with contextlib.suppress(OSError, TimeoutError):
                    client.read_until(b"-ERR", timeout=5)
        nc = await nats.connect(f"nats://u:p@127.0.0.1:{port}", name="tagged")
        await nc.close()
        server.wait_for("Client connection closed: Client Closed")
        got[kind] = [
            (level, CLIENT_PREFIX.sub("<CLIENT> - ", text))
            for level, text in server.lines()
            if CLIENT_PREFIX.match(text) and (level == "ERR" or "Client Closed" in text)
        ]
    assert got["pynatsd"] == got["nats-server"]
    version = nats.aio.client.__version__
    assert ("DBG", f'<CLIENT> - "v{version}:python3:tagged" - "$G/user:u" - Client connection closed: '
            "Client Closed") in got["pynatsd"]  # fmt: skip


def jetstream_block(server: Running) -> list[str]:
    """The lines of the `JETSTREAM` block of the start-up log."""
    texts = [text for _, text in server.lines()]
    start = texts.index("---------------- JETSTREAM ----------------")
    return texts[start : texts.index("-------------------------------------------", start) + 1]


def test_jetstream_banner_agrees_with_jsz(spawn: Spawn, tmp_path: Path) -> None:
    """The JetStream block line for line as nats-server's with configured limits (but the API level each
    serves), and with none the limits in effect and the store directory /jsz reports."""
    got = {}
    for kind in KINDS:
        store = tmp_path / f"{kind}-store"
        conf = tmp_path / f"{kind}-js.conf"
        conf.write_text(
            f"listen: 127.0.0.1:{free_port()}\n"
            f'jetstream {{ store_dir: "{store}", max_memory_store: 64MB, max_file_store: 1GB }}\n'
        )
        server = spawn(kind, "-c", str(conf))
        got[kind] = [line.replace(str(store), "<STORE>") for line in jetstream_block(server)]
        server.stop()
    api_level = re.compile(r"  API Level:       \d+")
    assert [t for t in got["pynatsd"] if not api_level.fullmatch(t)] == [
        t for t in got["nats-server"] if not api_level.fullmatch(t)
    ]
    assert '  Store Directory: "<STORE>/jetstream"' in got["pynatsd"]
    assert "  Max Memory:      64.00 MB" in got["pynatsd"]

    http = free_port()
    server = spawn(
        "pynatsd", "-a", "127.0.0.1", "-p", str(free_port()), "-m", str(http), "-js", "-sd", str(tmp_path)
    )
    with urllib.request.urlopen(f"http://127.0.0.1:{http}/jsz", timeout=5) as resp:
        jsz = json.load(resp)
    block = jetstream_block(server)
    gib = jsz["config"]["max_memory"] / 1024**3
    assert f"  Max Memory:      {gib:.2f} GB" in block
    assert f'  Store Directory: "{jsz["config"]["store_dir"]}"' in block
    assert f"  API Level:       {jsz['api']['level']}" in block


def test_reload_applies_limits_and_logs_who_it_disconnects(spawn: Spawn, tmp_path: Path) -> None:
    """A reload of max_payload, max_control_line, ping_interval, ping_max and write_deadline applies
    (new clients' INFO, connected clients' next PUB) and is logged as nats-server logs it; a user whose
    password the reload changes is disconnected with nats-server's error line, one it removes without
    one (nats-server closes it as a client closed)."""
    got = {}
    for kind in KINDS:
        conf = tmp_path / f"{kind}-limits.conf"
        port = free_port()
        users = "{user: alice, password: a}, {user: bob, password: b}, {user: carol, password: c}"
        conf.write_text(f"listen: 127.0.0.1:{port}\nauthorization {{ users: [{users}] }}\n")
        server = spawn(kind, "-c", str(conf))
        with WireClient(port) as alice, WireClient(port) as bob, WireClient(port) as carol:
            alice.exchange(b'CONNECT {"verbose":false,"user":"alice","pass":"a"}\r\n')
            bob.exchange(b'CONNECT {"verbose":false,"user":"bob","pass":"b"}\r\n')
            carol.exchange(b'CONNECT {"verbose":false,"user":"carol","pass":"c"}\r\n')
            conf.write_text(
                f"listen: 127.0.0.1:{port}\nmax_payload: 2048\nmax_control_line: 512\nping_interval: 30s\n"
                "ping_max: 3\nwrite_deadline: 5s\n"
                "authorization { users: [{user: alice, password: a}, {user: bob, password: new}] }\n"
            )
            server.signal(signal.SIGHUP)
            server.wait_for("Reloaded server configuration")
            for gone in (bob, carol):
                with contextlib.suppress(OSError):  # an -ERR may be lost to the reset of the closed socket
                    assert gone.read_until(b"\r\n\r\n", timeout=5)[1]  # closed
            with WireClient(port) as fresh:
                assert fresh.info["max_payload"] == 2048
            alice.send(b"PUB x 4000\r\n")
            rejected, _ = alice.read_until(b"Maximum Payload Violation", timeout=5)
            assert b"Maximum Payload Violation" in rejected
        server.wait_for("maximum payload exceeded: 4000 vs 2048")
        got[kind] = sorted(
            CLIENT_PREFIX.sub("<CLIENT> - ", text)
            for level, text in server.lines()
            if text.startswith("Reloaded: ") or (level == "ERR" and "authentication error" in text)
        )
    assert got["pynatsd"] == got["nats-server"]
    assert "Reloaded: max_payload = 2048" in got["pynatsd"]
    assert "Reloaded: ping_interval = 30s" in got["pynatsd"]
    assert '<CLIENT> - "$G/user:bob" - authentication error - User "bob"' in got["pynatsd"]
