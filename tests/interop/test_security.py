"""User/password and token auth, and TLS, with the Go and C clients against both servers."""

from __future__ import annotations

from pathlib import Path

import pytest
import trustme

from tests.interop.conftest import ServerFactory
from tests.interop.drivers import Driver
from tests.jwt.issuer import creds
from tests.jwt.world import World

# How each client words a rejected TLS certificate.
TLS_REJECTED = {
    "go": "certificate signed by unknown authority",
    "c": "ssl handshake error",
    "python": "certificate verify failed",
}


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A throwaway CA and a server certificate for 127.0.0.1 and localhost."""
    directory = tmp_path_factory.mktemp("tls")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("interop-client")
    files = {"ca": directory / "ca.pem", "cert": directory / "server.pem", "key": directory / "server.key"}
    files |= {"client_cert": directory / "client.pem", "client_key": directory / "client.key"}
    ca.cert_pem.write_to_path(str(files["ca"]))
    cert.cert_chain_pems[0].write_to_path(str(files["cert"]))
    cert.private_key_pem.write_to_path(str(files["key"]))
    client.cert_chain_pems[0].write_to_path(str(files["client_cert"]))
    client.private_key_pem.write_to_path(str(files["client_key"]))
    return files


def check_auth(driver: Driver, events: list[dict[str, str]]) -> None:
    results = {e["case"]: e for e in events}
    assert results["good"]["result"] == "ok"
    for case in ("bad", "none"):
        text = (results[case]["result"] + " " + results[case].get("detail", "")).lower()
        # both clients surface the server's -ERR 'Authorization Violation'
        assert "authorization violation" in text, results[case]


def test_user_password(driver: Driver, server_kind: str, server_factory: ServerFactory) -> None:
    srv = server_factory(["--user", "alice", "--pass", "s3cr3t"])
    check_auth(driver, driver.run("auth", srv.url, "user", "alice:s3cr3t", "alice:wrong"))


def test_token(driver: Driver, server_kind: str, server_factory: ServerFactory) -> None:
    srv = server_factory(["--auth", "t0ken-xyz"])
    check_auth(driver, driver.run("auth", srv.url, "token", "t0ken-xyz", "not-the-token"))


def test_tls(
    driver: Driver,
    server_kind: str,
    server_factory: ServerFactory,
    tls_files: dict[str, Path],
) -> None:
    args = ["--tls", "--tlscert", str(tls_files["cert"]), "--tlskey", str(tls_files["key"])]
    srv = server_factory(args)
    events = {e["case"]: e for e in driver.run("tls", f"tls://127.0.0.1:{srv.port}", str(tls_files["ca"]))}
    assert events["trusted"]["result"] == "ok", events
    if driver.lang == "go":
        assert events["trusted"]["version"] in ("TLS 1.2", "TLS 1.3")
    # without the test CA the certificate must be rejected
    untrusted = (events["untrusted"]["result"] + " " + events["untrusted"].get("detail", "")).lower()
    assert TLS_REJECTED[driver.lang] in untrusted, events


def test_mutual_tls(
    driver: Driver,
    server_kind: str,
    server_factory: ServerFactory,
    tls_files: dict[str, Path],
) -> None:
    args = ["--tlsverify", "--tlscert", str(tls_files["cert"]), "--tlskey", str(tls_files["key"])]
    srv = server_factory([*args, "--tlscacert", str(tls_files["ca"])])
    files = [str(tls_files[k]) for k in ("ca", "client_cert", "client_key")]
    events = {e["case"]: e for e in driver.run("mtls", f"tls://127.0.0.1:{srv.port}", *files)}
    assert events["with_cert"]["result"] == "ok", events
    # Without a certificate the server refuses the client: nats-server with a TLS alert, pynatsd by
    # closing after the handshake; every client reports a failed connect or round trip.
    assert events["without_cert"]["result"] != "ok", events


def test_creds_file(driver: Driver, server_kind: str, server_factory: ServerFactory, tmp_path: Path) -> None:
    """Operator mode: a `.creds` file (user JWT and nkey seed) connects and round-trips; an expired user
    JWT and no credentials are refused with nats-server's Authorization Violation."""
    world = World()
    good = creds(tmp_path / "good.creds", *world.user("good"))
    expired = creds(tmp_path / "expired.creds", *world.user("expired", claims={"exp": 1}))
    srv = server_factory(["-c", str(world.config(tmp_path))])
    check_auth(driver, driver.run("auth", srv.url, "creds", str(good), str(expired)))
