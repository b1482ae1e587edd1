"""A throwaway CA with a server certificate (for 127.0.0.1/localhost) and a client certificate."""

from __future__ import annotations

import datetime
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def write_pem(path: Path, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate) -> tuple[str, str]:
    """`cert` and `key` written as PEM beside `path` (.pem, .key); their paths."""
    key_path, cert_path = path.with_suffix(".key"), path.with_suffix(".pem")
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return str(cert_path), str(key_path)


def _valid_for_now(
    subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePrivateKey
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=2))
    )


def self_signed(
    subject: x509.Name, extension: x509.ExtensionType, critical: bool
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A self-signed certificate (valid from yesterday to the day after tomorrow) with `extension`, and its
    key: a CA with BasicConstraints, a lone server certificate with its names."""
    key = ec.generate_private_key(ec.SECP256R1())
    builder = _valid_for_now(subject, subject, key).add_extension(extension, critical=critical)
    return builder.sign(key, hashes.SHA256()), key


def issue(
    ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey],
    subject: x509.Name,
    sans: list[x509.GeneralName],
    usage: x509.ObjectIdentifier,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A certificate signed by `ca` for `subject`, with `sans` (if any) and the extended key `usage`."""
    key = ec.generate_private_key(ec.SECP256R1())
    builder = _valid_for_now(subject, ca[0].subject, key).add_extension(
        x509.ExtendedKeyUsage([usage]), critical=False
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(ca[1], hashes.SHA256()), key


def make_certs(directory: Path) -> dict[str, str]:
    """Writes ca.pem, server.pem/.key and client.pem/.key; returns their paths by name."""
    import ipaddress

    ca = self_signed(_name("pynatsd test CA"), x509.BasicConstraints(ca=True, path_length=None), True)
    paths = {}
    paths["ca"], _ = write_pem(directory / "ca", ca[1], ca[0])
    sans: list[x509.GeneralName] = [
        x509.DNSName("localhost"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
    ]
    for role, usage in (
        ("server", ExtendedKeyUsageOID.SERVER_AUTH),
        ("client", ExtendedKeyUsageOID.CLIENT_AUTH),
    ):
        cert, key = issue(ca, _name(role), sans, usage)
        paths[role], paths[f"{role}_key"] = write_pem(directory / role, key, cert)
    return paths
