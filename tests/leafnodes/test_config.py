"""The `leafnodes {}` block: every key pynatsd implements parsed into `LeafNodeOptions`, the rest refused by
name, and a reload that changes the block refused without showing its passwords."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import nkeys
import pytest

from pynatsd.base.blocks import LeafRemote
from pynatsd.base.options import Options, unreloadable_changes
from pynatsd.config.parser import parse
from pynatsd.config.schema import ConfigErrors, apply_config
from tests.conftest import need_tool
from tests.servers import nats_server_binary


def load(text: str) -> Options:
    opts = Options()
    apply_config(opts, parse(text, "t.conf"))
    return opts


def test_every_supported_key() -> None:
    leaf = load(
        """accounts { A {} }
        leafnodes {
          listen: "127.0.0.1:7422"
          advertise: "leaf.example.com:7422"
          no_advertise: true
          reconnect: "5s"
          authorization {
            timeout: 3
            users [ {user: a, password: b, account: A}, {username: c, pass: d} ]
          }
          remotes [
            { url: "nats-leaf://u:p@hub:7422", account: A, hub: true, no_randomize: true,
              deny_imports: ["x.>"], deny_exports: "y" }
            { urls: ["nats://h1:7422", "nats://h2"] }
            { url: "ws://hub:8080", ws_compression: true, websocket_no_masking: true }
          ]
        }"""
    ).leafnodes
    assert leaf is not None
    assert (leaf.host, leaf.port, leaf.advertise, leaf.no_advertise, leaf.reconnect) == (
        "127.0.0.1",
        7422,
        "leaf.example.com:7422",
        True,
        5.0,
    )
    assert leaf.auth_timeout == 3.0
    assert leaf.users == [
        {"user": "a", "password": "b", "account": "A"},
        {"user": "c", "password": "d", "account": ""},
    ]
    assert leaf.remotes == [
        LeafRemote(["nats-leaf://u:p@hub:7422"], "A", True, True, ["x.>"], ["y"]),
        LeafRemote(["nats://h1:7422", "nats://h2:7422"]),
        LeafRemote(["ws://hub:8080"], ws_compression=True, ws_no_masking=True),
    ]
    single = load(
        "accounts { B {} }\nleafnodes { port: -1, authorization { user: u, password: p, account: B } }"
    ).leafnodes
    assert single is not None
    assert (single.port, single.username, single.password, single.account) == (-1, "u", "p", "B")


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("leafnodes { compression: s2_auto }", '"compression": pynatsd does not support'),
        ("leafnodes { isolate: true }", '"isolate": pynatsd does not support'),
        (
            'leafnodes { remotes [ { url: "nats://h:1", tls { handshake_first: true } } ] }',
            '"handshake_first": pynatsd does not support',
        ),
        ("leafnodes { tls { pinned_certs: [] } }", '"pinned_certs": pynatsd does not support'),
        ("leafnodes { tls { verify: true } }", "leafnodes tls: cert_file and key_file are required"),
        ('leafnodes { remotes [ { url: "nats://h:1", tls { verify: true } } ] }', '"verify": pynatsd'),
        ("leafnodes { tls { insecure: true } }", '"insecure": pynatsd does not support'),
        ("leafnodes { remotes [ { account: A } ] }", "a url is required"),
        ("leafnodes { bogus: 1 }", 'unknown field "bogus"'),
        (
            "leafnodes { authorization { user: a, users [ {user: b} ] } }",
            "a single user/pass and a users array",
        ),
    ],
)
def test_refused(text: str, named: str) -> None:
    with pytest.raises(ConfigErrors) as err:
        load(text)
    assert named in str(err.value)


def test_a_tls_url_or_block_makes_a_remote_upgrade() -> None:
    """A `tls://` or `wss://` URL alone asks for TLS (the system's CAs, nats-server's default timeout); a
    `tls {}` block with `insecure` checks neither the hub's chain nor its name; a `ws://` URL with one
    does TLS too, before the upgrade (nats-server's)."""
    options = load(
        'leafnodes { remotes [ { url: "tls://hub:7422" }, { url: "nats://h:1", tls { insecure: true } },'
        ' { url: "wss://hub:443" }, { url: "ws://h:1", tls { timeout: 3 } } ] }'
    ).leafnodes
    assert options is not None
    assert [r.tls for r in options.remotes] == [
        {"timeout": 2.0},
        {"timeout": 2.0, "insecure": True},
        {"timeout": 2.0},
        {"timeout": 3.0},
    ]


def test_a_reload_refuses_leafnodes_changes_without_showing_passwords() -> None:
    old = load("leafnodes { port: 7422, authorization { user: u, password: secret1 } }")
    new = load("leafnodes { port: 7422, authorization { user: u, password: secret2 } }")
    changes = unreloadable_changes(old, new)
    assert changes == ["config reload not supported for leafnodes: the leafnodes block changed"]
    assert (
        unreloadable_changes(
            old, load("leafnodes { port: 7422, authorization { user: u, password: secret1 } }")
        )
        == []
    )


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (
            "leafnodes { authorization { users [ {user: a, password: a, account: NOPE} ] } }",
            'cannot find local account "NOPE" specified in leafnode authorization',
        ),
        (
            'leafnodes { remotes [ { url: "nats-leaf://h:1", account: TYPO } ] }',
            'cannot find local account "TYPO" specified in leafnode remote',
        ),
    ],
)
def test_accounts_a_leaf_binds_exist(text: str, error: str) -> None:
    """nats-server's words (it stops at start: a typo would have made an empty account of its own)."""
    with pytest.raises(ConfigErrors, match=error):
        load("accounts { A {} }\n" + text)
    load("accounts { A {} }\n" + text.replace("NOPE", "A").replace("TYPO", "A"))


_SEED = nkeys.encode_seed(bytes(32), nkeys.PREFIX_BYTE_USER).decode()
_KEY = nkeys.from_seed(_SEED.encode()).public_key.decode()


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("leafnodes { authorization { nkey: UABC } }", "Not a valid public nkey for leafnode authorization"),
        (
            f"leafnodes {{ authorization {{ nkey: {_KEY}, users [ {{user: a, password: b}} ] }} }}",
            "can not have a single nkey and a users array",
        ),
        (f"leafnodes {{ authorization {{ users [ {{nkey: {_KEY}}} ] }} }}", 'unknown field "nkey"'),
        (
            f'leafnodes {{ remotes [ {{ url: "nats://h:1", nkey: {_KEY} }} ] }}',
            f'Remote leafnode nkey is not a valid seed: "{_KEY}"',
        ),
        (
            f'leafnodes {{ remotes [ {{ url: "nats://h:1", seed: {_SEED}, credentials: "x.creds" }} ] }}',
            "Remote leafnode can not have both creds and nkey defined",
        ),
        (
            f'leafnodes {{ remotes [ {{ url: "nats://h:1", credentials: "x.creds", nkey: {_SEED} }} ] }}',
            "Remote leafnode can not have both creds and nkey defined",
        ),
        ('leafnodes { min_version: "2.7.9" }', "the minimum version should be at least 2.8.0"),
        ('leafnodes { minimum_version: "v2.9.0" }', "invalid leafnode's minimum version: invalid semver"),
        ('leafnodes { min_version: "2.8" }', "invalid leafnode's minimum version: invalid semver"),
        (
            'leafnodes { remotes [ { url: "nats://h:1", min_version: "2.9.0" } ] }',
            'unknown field "min_version"',
        ),
    ],
)
def test_errors_are_nats_servers(text: str, error: str, tmp_path: Path) -> None:
    """The nkey and min_version keys' errors in nats-server's words (its `-t` says the same)."""
    with pytest.raises(ConfigErrors, match=re.escape(error)):
        load(text)
    binary = nats_server_binary()
    need_tool(binary is not None, "nats-server")
    conf = tmp_path / "t.conf"
    conf.write_text(text + "\n")
    result = subprocess.run([str(binary), "-t", "-c", str(conf)], capture_output=True, text=True, timeout=30)
    assert error in result.stderr


def test_nkey_and_min_version_keys_are_read() -> None:
    leaf = load(
        f"""accounts {{ A {{}} }}
        leafnodes {{
          authorization {{ nkey: {_KEY}, account: A }}
          remotes [ {{ url: "nats://h:1", seed: {_SEED} }}, {{ url: "nats://h:2", nkey: {_SEED} }} ]
          min_version: "2.10.0-rc.1"
        }}"""
    ).leafnodes
    assert leaf is not None
    assert (leaf.nkey, leaf.account, leaf.min_version) == (_KEY, "A", "2.10.0-rc.1")
    assert [r.seed for r in leaf.remotes] == [_SEED, _SEED]
