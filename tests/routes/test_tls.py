"""TLS between routes (cluster `tls {}`): mutual TLS with nats-server, and no route without it."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.routes.conftest import Start, connect, wait_logged, wait_routed
from tests.servers import ServerProcess, free_port

pytestmark = pytest.mark.asyncio


def _write(path: Path, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate) -> tuple[str, str]:
    path.with_suffix(".pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    path.with_suffix(".key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return str(path.with_suffix(".pem")), str(path.with_suffix(".key"))


def route_certs(
    directory: Path, ca_name: str = "routes CA", others: dict[str, list[str]] | None = None
) -> dict[str, str]:
    """A CA and a node certificate for both ends of a route (server and client usage, 127.0.0.1); with
    `others`, more node certificates (`<name>`, `<name>_key`) for the DNS names given."""
    now = datetime.datetime.now(datetime.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ca_name)])
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )

    def node(sans: list[x509.GeneralName]) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "node")]))
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                critical=False,
            )
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        return key, cert

    paths = {}
    paths["ca"], _ = _write(directory / "ca", ca_key, ca)
    local = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    paths["cert"], paths["key"] = _write(directory / "node", *node(local))
    for other, names in (others or {}).items():
        sans: list[x509.GeneralName] = [x509.DNSName(n) for n in names]
        paths[other], paths[f"{other}_key"] = _write(directory / other, *node(sans))
    return paths


def tls_conf(path: Path, certs: dict[str, str], port: int, routes: list[int]) -> Path:
    urls = ", ".join(f'"nats://127.0.0.1:{p}"' for p in routes)
    path.write_text(
        f'cluster {{ name: T, listen: "127.0.0.1:{port}", routes: [{urls}]\n'
        f'  tls {{ cert_file: "{certs["cert"]}", key_file: "{certs["key"]}", ca_file: "{certs["ca"]}", '
        "timeout: 3 } }\n"
    )
    return path


@pytest.mark.parametrize(
    ("seed_kind", "joiner_kind"), [("pynatsd", "nats-server"), ("nats-server", "pynatsd")]
)
async def test_routes_over_mutual_tls_with_nats_server(
    node: Start, tmp_path: Path, seed_kind: str, joiner_kind: str
) -> None:
    certs = route_certs(tmp_path)
    seed_port, joiner_port = free_port(), free_port()
    seed = node(
        seed_kind, args=["-c", str(tls_conf(tmp_path / "a.conf", certs, seed_port, []))], listen_flag=False
    )
    seed.extra["route_port"] = seed_port
    joiner = node(
        joiner_kind,
        args=["-c", str(tls_conf(tmp_path / "b.conf", certs, joiner_port, [seed_port]))],
        listen_flag=False,
    )
    a, b = await connect(seed), await connect(joiner)
    try:
        await wait_routed(a, b)
        await wait_routed(b, a)
    finally:
        await a.close()
        await b.close()


@pytest.mark.parametrize("kinds", [("pynatsd", "nats-server"), ("nats-server", "pynatsd")])
async def test_no_route_with_a_peer_of_another_ca_or_without_tls(
    node: Start, tmp_path: Path, kinds: tuple[str, str]
) -> None:
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    ours, foreign = route_certs(tmp_path / "one"), route_certs(tmp_path / "two", "another CA")
    port = free_port()
    seed = node(kinds[0], args=["-c", str(tls_conf(tmp_path / "a.conf", ours, port, []))], listen_flag=False)
    other_ca = node(
        kinds[1],
        args=["-c", str(tls_conf(tmp_path / "b.conf", foreign, free_port(), [port]))],
        listen_flag=False,
    )
    plain = node(kinds[1], args=["--routes", f"nats://127.0.0.1:{port}"])
    a, b, c = await connect(seed), await connect(other_ca), await connect(plain)
    try:
        for client in (b, c):
            with pytest.raises(AssertionError, match="no route"):
                await wait_routed(client, a, timeout=2.0)
    finally:
        for client in (a, b, c):
            await client.close()


# How the seed checks a peer's certificate: its DNS name against the route URLs' hosts, or its names
# against the cluster user (any of them may be; here its DNS name).
CHECKS = {
    "known urls": ('routes: ["nats://b.routes.example:PORT"]', "verify_cert_and_check_known_urls: true"),
    "map": ('authorization { user: "*.routes.example", password: "unused" }', "verify_and_map: true"),
}


@pytest.mark.parametrize("check", list(CHECKS))
@pytest.mark.parametrize("seed_kind", ["pynatsd", "nats-server"])
async def test_route_admitted_by_its_certificate(
    node: Start, tmp_path: Path, seed_kind: str, check: str
) -> None:
    """`verify_cert_and_check_known_urls`: the seed takes a route only from a peer whose certificate has
    a DNS name of one of its configured route URLs' hosts (a `*` standing for the leftmost label);
    `verify_and_map`: only from one whose certificate names the cluster user (no password asked)."""
    certs = route_certs(tmp_path, others={"known": ["*.routes.example"], "stranger": ["stranger.example"]})
    port = free_port()
    setting, flag = CHECKS[check]
    (tmp_path / "seed.conf").write_text(
        f'cluster {{ name: T, listen: "127.0.0.1:{port}", {setting.replace("PORT", str(free_port()))}\n'
        f'  tls {{ cert_file: "{certs["cert"]}", key_file: "{certs["key"]}", ca_file: "{certs["ca"]}", '
        f"{flag} }} }}\n"
    )
    seed = node(seed_kind, args=["-c", str(tmp_path / "seed.conf")], listen_flag=False)

    def joiner(which: str) -> ServerProcess:
        conf = tmp_path / f"{which}.conf"
        conf.write_text(
            f'cluster {{ name: T, listen: "127.0.0.1:{free_port()}", routes: ["nats://127.0.0.1:{port}"]\n'
            f'  tls {{ cert_file: "{certs[which]}", key_file: "{certs[which + "_key"]}", '
            f'ca_file: "{certs["ca"]}" }} }}\n'
        )
        return node("pynatsd", args=["-c", str(conf)], listen_flag=False)

    stranger = joiner("stranger")
    wait_logged(stranger, "Authorization Violation")  # the seed refused its route
    known = joiner("known")
    a, b, c = await connect(seed), await connect(known), await connect(stranger)
    try:
        await wait_routed(b, a)
        await wait_routed(a, b)
        with pytest.raises(AssertionError, match="no route"):
            await wait_routed(c, a, timeout=1.0)
    finally:
        for client in (a, b, c):
            await client.close()
