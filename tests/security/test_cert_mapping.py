"""`tls { verify_and_map: true }`: a client's certificate names its user, on pynatsd as on nats-server.

Each client certificate (our own throwaway CA) is matched as nats-server matches it: SAN emails, DNS
names, URIs, the subject as a DN (same RDN order, then any order), the subject as Go prints it. Which
user a client became shows in what it may publish and in /connz's `authorized_user` and `account`.
"""

from __future__ import annotations

import ipaddress
import json
import signal
import socket
import ssl
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from pynatsd.auth.certs import (
    PeerCertificate,
    admits_route,
    dn_equal,
    dn_rdns_match,
    dns_name_matches,
    parse_dn,
)
from pynatsd.auth.users import Authenticator, Connecting
from pynatsd.base.options import Options
from pynatsd.protocol.connect import ConnectOptions
from tests.security.certs import issue, self_signed, write_pem
from tests.servers import ServerProcess, free_port, require, start_server

# Client certificates: (subject attributes in certificate order, SANs). A user per way of mapping.
CLIENTS: dict[str, tuple[list[tuple[x509.ObjectIdentifier, str]], list[x509.GeneralName]]] = {
    "email": ([(NameOID.COMMON_NAME, "not-a-user")], [x509.RFC822Name("alice@example.com")]),
    "dns": ([(NameOID.COMMON_NAME, "not-a-user")], [x509.DNSName("bob.example.com")]),
    "uri": (
        [(NameOID.COMMON_NAME, "not-a-user")],
        [x509.UniformResourceIdentifier("spiffe://example.org/carol")],
    ),
    # The DN, the last RDN first (RFC 4514 order), domain components included.
    "dn": (
        [
            (NameOID.DOMAIN_COMPONENT, "com"),
            (NameOID.DOMAIN_COMPONENT, "example"),
            (NameOID.ORGANIZATION_NAME, "Acme"),
            (NameOID.COMMON_NAME, "dave"),
        ],
        [],
    ),
    # Its RDNs in another order than the configured name's.
    "reordered": ([(NameOID.ORGANIZATION_NAME, "Acme"), (NameOID.COMMON_NAME, "frank")], []),
    # An email attribute in the subject keeps the DN from matching; Go's subject string leaves it out.
    "subject": (
        [
            (NameOID.COUNTRY_NAME, "US"),
            (NameOID.ORGANIZATION_NAME, "Acme, Inc."),
            (NameOID.COMMON_NAME, "erin"),
            (NameOID.EMAIL_ADDRESS, "erin@example.com"),
        ],
        [],
    ),
    # Go prints both OUs as one RDN and appends the domain components: the DN itself has five RDNs.
    "printed": (
        [
            (NameOID.DOMAIN_COMPONENT, "example"),
            (NameOID.COUNTRY_NAME, "US"),
            (NameOID.ORGANIZATION_NAME, "Acme"),
            (NameOID.ORGANIZATIONAL_UNIT_NAME, "b"),
            (NameOID.ORGANIZATIONAL_UNIT_NAME, "a"),
            (NameOID.COMMON_NAME, "gina"),
        ],
        [],
    ),
    # An email that is no user, then a DNS name that is: emails come first, the next name still counts.
    "second": (
        [(NameOID.COMMON_NAME, "x")],
        [x509.RFC822Name("nobody@example.com"), x509.DNSName("bob.example.com")],
    ),
    "unknown": ([(NameOID.COMMON_NAME, "mallory")], [x509.DNSName("mallory.example.com")]),
}
# role -> (the user its certificate maps to, as configured; the subject that user may publish to)
USERS = {
    "email": ("alice@example.com", "email"),
    "dns": ("bob.example.com", "dns"),
    "uri": ("spiffe://example.org/carol", "uri"),
    "dn": ("CN=dave, O=Acme, dc=example, DC=com", "dn"),
    "reordered": ("O=Acme,CN=frank", "reordered"),
    "subject": ("CN=erin,O=Acme\\, Inc.,C=US", "subject"),
    "printed": ("CN=gina,OU=b+OU=a,O=Acme,C=US,DC=example", "printed"),
    "second": ("bob.example.com", "dns"),
}

CONFIG = """
tls {{
  cert_file: "{server}"
  key_file: "{server_key}"
  ca_file: "{ca}"
  verify_and_map: true
}}
authorization {{
  users = [
    {{user: "alice@example.com", permissions: {{publish: "email"}}}}
    {{user: "bob.example.com", permissions: {{publish: "dns"}}}}
    {{user: "spiffe://example.org/carol", permissions: {{publish: "uri"}}}}
    {{user: "CN=dave, O=Acme, dc=example, DC=com", permissions: {{publish: "dn"}}}}
    {{user: "O=Acme,CN=frank", permissions: {{publish: "reordered"}}}}
    {{user: "CN=gina,OU=b+OU=a,O=Acme,C=US,DC=example", permissions: {{publish: "printed"}}}}
  ]
}}
accounts {{
  A {{ users = [{{user: "CN=erin,O=Acme\\\\, Inc.,C=US", permissions: {{publish: "subject"}}}}] }}
}}
"""


def make_mapping_certs(directory: Path) -> dict[str, tuple[str, str]]:
    """A CA (`ca`: its file twice), a server certificate for 127.0.0.1 and one client certificate per
    entry of CLIENTS, as (cert, key) paths."""
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "cert mapping test CA")])
    ca = self_signed(ca_name, x509.BasicConstraints(ca=True, path_length=None), True)
    (directory / "ca.pem").write_bytes(ca[0].public_bytes(serialization.Encoding.PEM))
    paths = {"ca": (str(directory / "ca.pem"), str(directory / "ca.pem"))}
    server = issue(
        ca,
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "server")]),
        [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))],
        ExtendedKeyUsageOID.SERVER_AUTH,
    )
    paths["server"] = write_pem(directory / "server", server[1], server[0])
    for role, (attrs, sans) in CLIENTS.items():
        subject = x509.Name([x509.RelativeDistinguishedName([x509.NameAttribute(o, v)]) for o, v in attrs])
        cert, key = issue(ca, subject, sans, ExtendedKeyUsageOID.CLIENT_AUTH)
        paths[role] = write_pem(directory / role, key, cert)
    return paths


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, str]]:
    return make_mapping_certs(tmp_path_factory.mktemp("cert-mapping"))


@pytest.fixture(scope="module", params=["pynatsd", "nats-server"])
def server(
    request: pytest.FixtureRequest,
    certs: dict[str, tuple[str, str]],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ServerProcess]:
    kind = str(request.param)
    require(kind)
    conf = tmp_path_factory.mktemp(kind) / "map.conf"
    conf.write_text(
        CONFIG.format(server=certs["server"][0], server_key=certs["server"][1], ca=certs["ca"][0])
    )
    srv = start_server(kind, ["-c", str(conf)], http_port=free_port())
    yield srv
    srv.stop()


def tls_session(port: int, cert: tuple[str, str], name: str = "", **claims: str) -> ssl.SSLSocket:
    """A client connection upgraded to TLS after INFO, presenting `cert`, CONNECT sent (no verbose;
    `claims`: credentials it carries too)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    ctx.load_cert_chain(*cert)
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    info = b""
    while not info.endswith(b"\r\n"):
        info += raw.recv(4096)
    tls = ctx.wrap_socket(raw)
    tls.sendall(
        b"CONNECT "
        + json.dumps({"verbose": False, "pedantic": False, "name": name, **claims}).encode()
        + b"\r\n"
    )
    return tls


def roundtrip(tls: ssl.SSLSocket, ops: bytes) -> tuple[bytes, bool]:
    """Sends `ops` and a PING; (what came back up to the PONG, whether the connection closed)."""
    reply = b""
    try:
        tls.sendall(ops + b"PING\r\n")
        while b"PONG\r\n" not in reply:
            chunk = tls.recv(4096)
            if not chunk:
                return reply, True
            reply += chunk
    except OSError:  # ssl.SSLError included
        return reply, True
    return reply, False


def exchange(port: int, cert: tuple[str, str], ops: bytes) -> bytes:
    """Connects with `cert`, sends `ops` and a PING; what came back up to the PONG or the close."""
    with tls_session(port, cert) as tls:
        return roundtrip(tls, ops)[0]


def connz_user(srv: ServerProcess, name: str) -> dict[str, str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{srv.http_port}/connz?auth=true", timeout=10) as resp:
        conns = json.loads(resp.read())["connections"]
    return {k: c.get(k, "") for c in conns if c.get("name") == name for k in ("authorized_user", "account")}


def test_a_user_claimed_beside_the_certificate_is_warned_about(
    server: ServerProcess, certs: dict[str, tuple[str, str]]
) -> None:
    """The certificate decides; the user this CONNECT claims is named in nats-server's warning."""
    with tls_session(server.port, certs["dns"], user="claimed") as tls:
        assert roundtrip(tls, b"") == (b"PONG\r\n", False)
    warning = 'User "claimed" found in connect proto, but user required from cert'
    deadline = time.monotonic() + 10  # the log line may reach the file after the PONG
    while warning not in server.log() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert warning in server.log()


@pytest.mark.parametrize("role", list(USERS))
def test_certificate_names_the_user(
    server: ServerProcess, certs: dict[str, tuple[str, str]], role: str
) -> None:
    """The mapped user's permissions apply: it may publish on its own subject only."""
    own = USERS[role][1]
    reply = exchange(server.port, certs[role], f"PUB {own} 0\r\n\r\nPUB other 0\r\n\r\n".encode())
    assert reply == b"-ERR 'Permissions Violation for Publish to \"other\"'\r\nPONG\r\n"


def test_unknown_certificate_is_refused(server: ServerProcess, certs: dict[str, tuple[str, str]]) -> None:
    assert exchange(server.port, certs["unknown"], b"") == b"-ERR 'Authorization Violation'\r\n"


def test_connz_shows_the_mapped_user(server: ServerProcess, certs: dict[str, tuple[str, str]]) -> None:
    """/connz?auth=true: the configured name of the user the certificate mapped to, and its account."""
    for role in ("dn", "reordered", "subject"):
        with tls_session(server.port, certs[role], name="who") as tls:
            assert roundtrip(tls, b"") == (b"PONG\r\n", False)
            account = "A" if role == "subject" else ""  # /connz leaves the global account out
            assert connz_user(server, "who") == {"authorized_user": USERS[role][0], "account": account}


@pytest.mark.parametrize(
    ("text", "dn"),
    [
        ("CN=a\\,b, O = x ", [[("CN", "a,b")], [("O", "x")]]),
        ("CN=a+OU=b,O=c", [[("CN", "a"), ("OU", "b")], [("O", "c")]]),
        ("CN=\\41\\c3\\a9\\ ", [[("CN", "Aé ")]]),
        ("CN=#0c0461626364,O=x", [[("CN", "abcd")], [("O", "x")]]),
        ("alice", None),
        ("CN=a,b", None),
        ("CN=a\\", None),
    ],
)
def test_user_names_read_as_distinguished_names(text: str, dn: list[list[tuple[str, str]]] | None) -> None:
    """Escapes, multi-valued RDNs, BER hex values; a plain user name is no DN."""
    assert parse_dn(text) == dn


def test_dn_comparison() -> None:
    cert = parse_dn("CN=a,O=b+OU=c")
    assert cert is not None
    assert dn_equal(cert, parse_dn("cn=a,OU=c+o=b") or [])
    assert not dn_equal(cert, parse_dn("CN=A,O=b+OU=c") or [])  # values are case-sensitive
    assert dn_rdns_match(cert, parse_dn("OU=c+O=b,CN=a") or [])
    assert not dn_rdns_match(cert, parse_dn("O=b,OU=c,CN=a") or [])


def test_route_hosts_in_certificate_names() -> None:
    assert dns_name_matches("*.routes.example", ["x.example", "B.Routes.Example"])
    assert not dns_name_matches("*.routes.example", ["routes.example", "a.b.routes.example"])
    assert not dns_name_matches("a.*.example", ["a.b.example"])  # only the leftmost label
    cert = PeerCertificate(dns_names=["node.example"], subject_names=["CN=route"])
    assert admits_route(cert, ["node.example"], None)
    assert not admits_route(cert, [], None)
    assert admits_route(cert, [], "CN=route") and admits_route(cert, [], "node.example")
    assert not admits_route(PeerCertificate(subject_names=[""]), [], "")


@pytest.mark.parametrize("kind", ["pynatsd", "nats-server"])
def test_verify_without_ca_file_checks_the_system_store(
    kind: str, certs: dict[str, tuple[str, str]], tmp_path: Path
) -> None:
    """`verify: true` and no `ca_file`: client certificates are checked against the system's CAs, which
    SSL_CERT_FILE (read by Go and by OpenSSL) stands in for."""
    require(kind)
    conf = tmp_path / "verify.conf"
    server_cert, server_key = certs["server"]
    conf.write_text(f'tls {{ cert_file: "{server_cert}", key_file: "{server_key}", verify: true }}')
    for store, expected in ((certs["ca"][0], b"PONG\r\n"), (server_cert, b"")):
        srv = start_server(
            kind, ["-c", str(conf)], env={"SSL_CERT_FILE": store, "SSL_CERT_DIR": str(tmp_path)}
        )
        try:
            try:
                reply = exchange(srv.port, certs["unknown"], b"")
            except ssl.SSLError:  # refused during the handshake
                reply = b""
            assert reply == expected
        finally:
            srv.stop()


def test_a_certificate_user_is_not_claimed_by_name_elsewhere() -> None:
    """With mapping on, a user without a password is a certificate identity: a WebSocket client (no
    mapping there) naming it with no password is refused, as by nats-server; without mapping it gets in."""
    users = [{"user": "CN=dave"}, {"user": "nopass-ws", "connection_types": ["WEBSOCKET"]}]

    def login(tls_map: bool, name: str) -> tuple[str, str] | None:
        auth = Authenticator(Options(users=users, tls_map=tls_map))
        conn = SimpleNamespace(nonce="", connection_type="WEBSOCKET", transport=None, opts=ConnectOptions())
        return auth.authenticate(cast(Connecting, conn), ConnectOptions(user=name))

    assert login(False, "CN=dave") == ("CN=dave", "$G")
    assert login(True, "CN=dave") is None
    assert login(True, "nopass-ws") == ("nopass-ws", "$G")  # the client port can never map it


CALLOUT = """
tls {{ cert_file: "{server}", key_file: "{server_key}", ca_file: "{ca}", verify_and_map: true }}
accounts {{ AUTH {{ users: [ {{user: auth, password: pwd}} ] }} }}
authorization {{
  timeout: 0.5
  users = [ {{user: "bob.example.com"}} ]
  auth_callout {{ issuer: {issuer}, account: AUTH, auth_users: [ auth ] }}
}}
"""


@pytest.mark.parametrize("kind", ["pynatsd", "nats-server"])
def test_a_mapped_client_claiming_an_auth_user_is_still_called_out(
    kind: str, certs: dict[str, tuple[str, str]], tmp_path: Path
) -> None:
    """The certificate, not the CONNECT, says who the client is: one mapped to bob that claims to be the
    callout's `auth` user is delegated to the callout (no service answers here: refused), as by
    nats-server; it never bypasses the callout under bob's identity."""
    require(kind)
    from tests.jwt.issuer import Key

    paths = {"server": certs["server"][0], "server_key": certs["server"][1], "ca": certs["ca"][0]}
    conf = tmp_path / "callout.conf"
    conf.write_text(CALLOUT.format(**paths, issuer=Key("A").public))
    srv = start_server(kind, ["-c", str(conf)])
    try:
        with tls_session(srv.port, certs["dns"], user="auth") as tls:
            assert roundtrip(tls, b"") == (b"-ERR 'Authorization Violation'\r\n", True)
    finally:
        srv.stop()


RELOAD = """
tls {{ cert_file: "{server}", key_file: "{server_key}", ca_file: "{ca}", verify_and_map: true }}
authorization {{ users = [ {users} ] }}
"""


@pytest.mark.parametrize("kind", ["pynatsd", "nats-server"])
def test_reload_applies_to_mapped_clients(
    kind: str, certs: dict[str, tuple[str, str]], tmp_path: Path
) -> None:
    """SIGHUP: a mapped client keeps its connection under its user's new permissions, and is closed once
    no user matches its certificate any more."""
    require(kind)
    paths = {"server": certs["server"][0], "server_key": certs["server"][1], "ca": certs["ca"][0]}
    conf = tmp_path / "reload.conf"
    bob = '{{user: "bob.example.com", permissions: {{publish: "{}"}}}}'
    conf.write_text(RELOAD.format(**paths, users=bob.format("a")))
    srv = start_server(kind, ["-c", str(conf)])
    try:
        tls = tls_session(srv.port, certs["dns"])
        assert roundtrip(tls, b"PUB a 0\r\n\r\n") == (b"PONG\r\n", False)
        conf.write_text(RELOAD.format(**paths, users=bob.format("b")))
        srv.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10  # a loaded machine delays the reload
        while (reply := roundtrip(tls, b"PUB a 0\r\n\r\n"))[0] == b"PONG\r\n" and time.monotonic() < deadline:
            time.sleep(0.02)
        assert reply == (b"-ERR 'Permissions Violation for Publish to \"a\"'\r\nPONG\r\n", False)
        assert roundtrip(tls, b"PUB b 0\r\n\r\n") == (b"PONG\r\n", False)
        conf.write_text(RELOAD.format(**paths, users='{user: "someone.else"}'))
        srv.proc.send_signal(signal.SIGHUP)
        while not (reply := roundtrip(tls, b""))[1] and time.monotonic() < deadline + 10:
            time.sleep(0.02)
        assert reply[1]
        tls.close()
    finally:
        srv.stop()
