"""A verified peer certificate's identities, as nats-server maps them to users (`verify_and_map`) and
checks them against route URLs (`verify_cert_and_check_known_urls`).

nats-server tries, in this order: the certificate's email addresses, its DNS names, its URIs (each as a
user name), then its subject as a distinguished name (compared with every user name that parses as an
RFC 4514 DN: in the same RDN order first, then in any order), then the subject as Go prints it (RFC 2253
order; with the domain components appended when there are any, then without). The subject is read
from the certificate's DER here: Python's ssl module names attribute types as OpenSSL does, Go by their
OIDs (dotted, for those it has no name for).
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field

# The attribute types Go parses into a certificate's subject fields, and the names it prints them with.
_PKIX_NAMES = {
    "2.5.4.6": "C",
    "2.5.4.10": "O",
    "2.5.4.11": "OU",
    "2.5.4.3": "CN",
    "2.5.4.5": "SERIALNUMBER",
    "2.5.4.7": "L",
    "2.5.4.8": "ST",
    "2.5.4.9": "STREET",
    "2.5.4.17": "POSTALCODE",
}
_DC = "0.9.2342.19200300.100.1.25"
# The DN comparison's names: pkix's and the domain component.
_DN_NAMES = {**_PKIX_NAMES, _DC: "DC"}
# The order in which Go rebuilds a subject from its parsed fields (pkix.Name.ToRDNSequence); the other
# attributes (emails, domain components, user ids...) are not part of that string.
_SUBJECT_ORDER = ("2.5.4.6", "2.5.4.8", "2.5.4.7", "2.5.4.9", "2.5.4.17", "2.5.4.10", "2.5.4.11")
_SINGLE = ("2.5.4.3", "2.5.4.5")  # CN and SERIALNUMBER: one value, the last one seen
_STRING_TAGS = {
    0x0C: "utf-8",
    0x13: "ascii",
    0x16: "ascii",
    0x12: "ascii",
    0x14: "latin-1",
    0x1E: "utf-16-be",
}

Attribute = tuple[str, str]  # (type, value) of a DN, types compared case-insensitively
DN = list[list[Attribute]]


class _Der:
    """A minimal DER reader: enough to walk a certificate to its subject."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def read(self) -> tuple[int, bytes]:
        data, pos = self.data, self.pos
        tag, length = data[pos], data[pos + 1]
        pos += 2
        if length & 0x80:
            size = length & 0x7F
            length = int.from_bytes(data[pos : pos + size], "big")
            pos += size
        if pos + length > len(data):
            raise ValueError("truncated DER")
        self.pos = pos + length
        return tag, data[pos : pos + length]

    def more(self) -> bool:
        return self.pos < len(self.data)


def _oid(body: bytes) -> str:
    parts, n = [], 0
    for byte in body[1:]:
        n = (n << 7) | (byte & 0x7F)
        if not byte & 0x80:
            parts.append(str(n))
            n = 0
    first = body[0]
    head = [min(first // 40, 2), first - 40 * min(first // 40, 2)]
    return ".".join([*map(str, head), *parts])


@dataclass
class _Value:
    """One attribute of the certificate's subject: its type (dotted OID) and value."""

    oid: str
    text: str | None  # None: not a string (Go keeps it out of the parsed name)


def _subject(der: bytes) -> list[list[_Value]]:
    """The subject RDN sequence of a DER certificate, in certificate order."""
    tbs = _Der(_Der(_Der(der).read()[1]).read()[1])
    tag, _ = tbs.read()
    if tag == 0xA0:  # explicit version; the serial number follows
        tbs.read()
    for _skip in range(3):  # signature algorithm, issuer, validity
        tbs.read()
    rdns: list[list[_Value]] = []
    name = _Der(tbs.read()[1])
    while name.more():
        rdn, values = _Der(name.read()[1]), []
        while rdn.more():
            atv = _Der(rdn.read()[1])
            oid = _oid(atv.read()[1])
            tag, body = atv.read()
            encoding = _STRING_TAGS.get(tag)
            values.append(_Value(oid, body.decode(encoding, "replace") if encoding else None))
        rdns.append(values)
    return rdns


def _escape(value: str) -> str:
    """A value as Go's pkix prints it (RFC 2253 escapes)."""
    out = []
    last = len(value) - 1
    for i, c in enumerate(value):
        if c in ',+"\\<>;' or (c == " " and i in (0, last)) or (c == "#" and i == 0):
            out.append("\\")
        out.append(c)
    return "".join(out)


def _rdn_string(rdns: list[list[_Value]]) -> str:
    """Go's `cert.Subject.ToRDNSequence().String()`: the parsed fields in a fixed order, printed last
    first; several values of one type make one multi-valued RDN."""
    fields: dict[str, list[str]] = {}
    for rdn in rdns:
        for v in rdn:
            if v.text is None or v.oid not in _PKIX_NAMES:
                continue
            if v.oid in _SINGLE:
                fields[v.oid] = [v.text]
            else:
                fields.setdefault(v.oid, []).append(v.text)
    ordered = [(oid, fields[oid]) for oid in _SUBJECT_ORDER if oid in fields]
    ordered += [(oid, fields[oid]) for oid in _SINGLE if fields.get(oid, [""]) != [""]]
    return ",".join(
        "+".join(f"{_PKIX_NAMES[oid]}={_escape(text)}" for text in texts) for oid, texts in reversed(ordered)
    )


@dataclass
class PeerCertificate:
    """The identities of a peer's (verified) certificate, in nats-server's order of matching."""

    emails: list[str] = field(default_factory=list)
    dns_names: list[str] = field(default_factory=list)
    uris: list[str] = field(default_factory=list)
    dn: DN | None = None  # the subject, last RDN first (RFC 4514 order); None when unreadable
    subject_names: list[str] = field(default_factory=list)  # with domain components, then without

    def names(self) -> list[tuple[str, bool]]:
        """Emails, DNS names and URIs, each with whether it is a DNS name."""
        return (
            [(e, False) for e in self.emails]
            + [(d, True) for d in self.dns_names]
            + [(u, False) for u in self.uris]
        )

    @classmethod
    def from_ssl(cls, sslobj: ssl.SSLObject | ssl.SSLSocket) -> PeerCertificate | None:
        """The certificate the peer presented and the handshake verified, or None (no certificate)."""
        info = sslobj.getpeercert()
        der = sslobj.getpeercert(binary_form=True)
        if not info or not der:
            return None
        return cls.parse(der, info.get("subjectAltName", ()))

    @classmethod
    def parse(cls, der: bytes, alt_names: object) -> PeerCertificate:
        cert = cls()
        for kind, value in alt_names if isinstance(alt_names, tuple | list) else ():
            target = {"email": cert.emails, "DNS": cert.dns_names, "URI": cert.uris}.get(kind)
            if target is not None:
                target.append(str(value))
        try:
            rdns = _subject(der)
        except (IndexError, ValueError):
            return cert
        cert.dn = [
            [(_DN_NAMES.get(v.oid, v.oid), v.text if v.text is not None else "") for v in reversed(rdn)]
            for rdn in reversed(rdns)
            if rdn
        ]
        subject = _rdn_string(rdns)
        dcs = [f"DC={v.text}" for rdn in rdns for v in rdn if v.oid == _DC and v.text is not None]
        if dcs:
            cert.subject_names.append(",".join([subject, *dcs]))
        cert.subject_names.append(subject)
        return cert


def peer_certificate(transport: object) -> PeerCertificate | None:
    """The verified certificate of the peer on an asyncio TLS transport, None without one."""
    get = getattr(transport, "get_extra_info", None)
    sslobj = get("ssl_object") if get is not None else None
    if not isinstance(sslobj, ssl.SSLObject | ssl.SSLSocket):
        return None
    return PeerCertificate.from_ssl(sslobj)


# -- RFC 4514 distinguished names, as nats-server's LDAP package reads a user name -------------------------
def parse_dn(text: str) -> DN | None:
    """The DN a user name stands for, None when it is not one (as go-ldap's ParseDN: backslash escapes,
    `#` hex values, unescaped leading and trailing spaces dropped)."""
    dn: DN = []
    rdn: list[Attribute] = []
    buf = bytearray()
    kind: str | None = None
    trailing = 0
    i = 0

    def take() -> str:
        nonlocal trailing
        s = bytes(buf[: len(buf) - trailing]).decode("utf-8", "replace")
        buf.clear()
        trailing = 0
        return s

    while i < len(text):
        c = text[i]
        if c == "\\":
            nxt = text[i + 1 : i + 2]
            if not nxt:
                return None
            if nxt in ' "#+,;<=>\\':
                buf += nxt.encode()
                i += 2
            else:
                try:
                    buf.append(int(text[i + 1 : i + 3], 16))
                except ValueError:
                    return None
                i += 3
            trailing = 0
            continue
        if c == "=":
            kind = take()
            if text[i + 1 : i + 2] == "#":
                ends = [at for at in (text.find(",", i + 2), text.find("+", i + 2)) if at > 0]
                end = min(ends, default=len(text))
                try:
                    _, body = _Der(bytes.fromhex(text[i + 2 : end])).read()
                except (ValueError, IndexError):
                    return None
                buf += body
                i = end
                continue
        elif c in ",+":
            if not kind:
                return None
            rdn.append((kind, take()))
            kind = None
            if c == ",":
                dn.append(rdn)
                rdn = []
        elif c != " " or buf:  # unescaped leading spaces are dropped
            trailing = trailing + 1 if c == " " else 0
            buf += c.encode()
        i += 1
    if buf:
        if not kind:
            return None
        rdn.append((kind, take()))
        dn.append(rdn)
    return dn


def _same_attribute(a: Attribute, b: Attribute) -> bool:
    return a[0].lower() == b[0].lower() and a[1] == b[1]


def _same_rdn(a: list[Attribute], b: list[Attribute]) -> bool:
    return (
        len(a) == len(b)
        and all(any(_same_attribute(x, y) for y in b) for x in a)
        and all(any(_same_attribute(y, x) for x in a) for y in b)
    )


def dn_equal(a: DN, b: DN) -> bool:
    """The same RDNs in the same order."""
    return len(a) == len(b) and all(_same_rdn(x, y) for x, y in zip(a, b, strict=True))


def dn_rdns_match(a: DN, b: DN) -> bool:
    """The same RDNs in any order."""
    return len(a) == len(b) and all(any(_same_rdn(x, y) for y in b) for x in a)


def dns_name_matches(dns_name: str, hosts: list[str]) -> bool:
    """A certificate's DNS name is for one of `hosts` (RFC 6125: a `*` matches the leftmost label only)."""
    labels = dns_name.lower().split(".")
    for host in hosts:
        host_labels = host.lower().split(".")
        if len(host_labels) != len(labels):
            continue
        skip = 1 if labels[0] == "*" else 0
        if labels[skip:] == host_labels[skip:]:
            return True
    return False


def admits_route(cert: PeerCertificate | None, known_hosts: list[str], map_user: str | None) -> bool:
    """nats-server's route check with `verify_cert_and_check_known_urls` (`known_hosts`: the configured
    route URLs' hosts, matched by the certificate's DNS names) and/or `verify_and_map` (`map_user`: the
    cluster user, which any of its names or its printed subject may be)."""
    if cert is None:
        return False
    map_user = map_user or None  # an empty name is never matched
    for name, is_dns in cert.names():
        if is_dns and dns_name_matches(name, known_hosts):
            return True
        if map_user is not None and name == map_user:
            return True
    return map_user is not None and map_user in cert.subject_names
