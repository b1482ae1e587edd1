"""The `cluster {}` block and the cluster flags (pynatsd.config.cluster), and their reload."""

from __future__ import annotations

import pytest

from pynatsd.base.options import Options, unreloadable_changes
from pynatsd.config.cluster import ClusterOptions, apply_flags, cluster_options
from pynatsd.config.parser import parse
from pynatsd.config.schema import ConfigErrors, ConfigValueError, apply_config


def load(text: str) -> Options:
    opts = Options()
    apply_config(opts, parse(text, "t.conf"))
    return opts


def test_every_supported_key() -> None:
    opts = load(
        """
        cluster {
          name: C1
          listen: "127.0.0.1:6333"
          authorization { user: ruser, password: rpass, timeout: 3 }
          routes: ["nats-route://a:6222", "nats://b:6222", "nats://a:6222", "nats-route://a:6222"]
          advertise: "10.0.0.1:6222"
          no_advertise: true
          connect_retries: 5
          pool_size: 3
          compression: off
          ping_interval: "30s"
          ping_max: 4
        }
        """
    )
    cluster = cluster_options(opts)
    assert cluster == ClusterOptions(
        name="C1",
        host="127.0.0.1",
        port=6333,
        advertise="10.0.0.1:6222",
        urls=["nats-route://a:6222", "nats://b:6222", "nats://a:6222"],  # a repeat is kept once
        pool_size=3,
        no_advertise=True,
        connect_retries=5,
        username="ruser",
        password="rpass",
        auth_timeout=3.0,
        ping_interval=30.0,
        ping_max=4,
    )


def test_host_and_port_keys_and_no_port_means_no_cluster() -> None:
    cluster = cluster_options(load("cluster { host: 127.0.0.2, port: -1 }"))
    assert cluster is not None and (cluster.host, cluster.port) == ("127.0.0.2", -1)
    assert cluster_options(load("cluster { name: C }")) is None


@pytest.mark.parametrize(
    ("block", "words"),
    [
        ("tls { cert_file: x, key_file: y, insecure: true }", '"insecure": pynatsd does not support'),
        ("tls { cert_file: x, key_file: y, pinned_certs: [] }", '"pinned_certs": pynatsd does not support'),
        ("tls { cert_file: x }", "cert_file and key_file are required"),
        ("tls { cert_file: no-such.pem, key_file: no-such.key }", "no-such.pem: no such file"),
        ("accounts: [A, B, A]", 'found duplicate account name "A" in pinned accounts list ["A" "B" "A"]'),
        ("pool_size: -1, accounts: [A]", "pool_size cannot be negative if pinned accounts are specified"),
        ("compression: s2_fast", "compressed routes"),
        ("compression: { mode: s2_auto }", "compressed routes"),
        ("compression: bogus", 'unsupported compression mode "bogus"'),  # nats-server's words
        ("authorization { users: [{user: a, password: b}] }", "does not allow multiple users"),
        ("authorization { token: t }", "controls who may connect"),
        ("authorization { password: p }", "a password needs a user"),
        ("connect_backoff: true", "connect_backoff"),
        ("bogus: 1", 'unknown field "bogus"'),
        ('name: "a b"', "cannot contain spaces"),
        ('routes: ["nats://nohostport"]', "host and port required"),
    ],
)
def test_what_is_not_implemented_stops_the_server(block: str, words: str) -> None:
    with pytest.raises(ConfigErrors) as exc:
        load(f"cluster {{ port: 6222, {block} }}")
    assert words in str(exc.value)
    assert str(exc.value).startswith("t.conf:1:1:")


def test_pinned_accounts_are_read() -> None:
    cluster = cluster_options(load("cluster { port: 6222, accounts: [A, B] }"))
    assert cluster is not None and cluster.accounts == ["A", "B"]


def test_accepted_compression_modes_run_uncompressed() -> None:
    for mode in ("off", "disabled", "accept", "false"):
        assert cluster_options(load(f"cluster {{ port: 6222, compression: {mode} }}")) is not None


def test_flags_override_the_block_as_nats_server() -> None:
    opts = load("cluster { name: FILE, listen: 127.0.0.1:6222, authorization { user: u, password: p } }")
    apply_flags(opts, "nats://0.0.0.0:7222", "FLAG", "nats://x:1,nats://y:2", "adv:1", True, 2)
    cluster = cluster_options(opts)
    assert cluster is not None
    assert (cluster.host, cluster.port, cluster.name) == ("0.0.0.0", 7222, "FLAG")
    assert cluster.urls == ["nats://x:1", "nats://y:2"]
    assert (cluster.advertise, cluster.no_advertise, cluster.connect_retries) == ("adv:1", True, 2)
    assert (cluster.username, cluster.password) == ("", "")  # --cluster without credentials clears them
    apply_flags(opts, "nats://ru:rp@127.0.0.1:-1", None, None, None, None, None)
    assert (cluster.username, cluster.password, cluster.port) == ("ru", "rp", -1)
    with pytest.raises(ConfigValueError, match="expected cluster password"):
        apply_flags(opts, "nats://ru@127.0.0.1:-1", None, None, None, None, None)


def test_flags_alone_without_a_listen_address_configure_no_cluster() -> None:
    opts = Options()
    apply_flags(opts, None, "C", None, None, True, None)
    assert cluster_options(opts) is None
    apply_flags(Options(), None, None, None, None, None, None)


def test_a_reload_refuses_cluster_changes() -> None:
    old, new = load("cluster { port: 6222, name: A }"), load("cluster { port: 6222, name: B }")
    assert any("cluster" in line for line in unreloadable_changes(old, new))
    assert unreloadable_changes(old, load("cluster { port: 6222, name: A }")) == []
