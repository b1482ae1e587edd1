"""The config schema, key by key: every spelling and alias nats-server accepts, and every refusal.

Each config here is written for this test (none is taken from nats-server). Positions are checked as
nats-server reports them for unknown fields: the 1-based line and column of the key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pynatsd.auth.users import Authenticator
from pynatsd.base.options import Options
from pynatsd.config.parser import parse
from pynatsd.config.schema import (
    BLOCK_PARSERS,
    ConfigErrors,
    Ctx,
    Where,
    apply_config,
    register_block,
)
from tests.security.certs import make_certs

# A valid public user nkey (made for these tests with nkeys.from_seed of a fixed seed).
USER_NKEY = "UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4"
ACCOUNT_NKEY = "AAB2CB576PHBBPQ5ODORRZ2LYCMWPZGWGCN2KDK7DXOIMZASKUY3QPZV"  # from a fixed seed too


def load(text: str) -> tuple[Options, list[str]]:
    opts = Options()
    return opts, apply_config(opts, parse(text, "t.conf"))


def errors_of(text: str) -> str:
    with pytest.raises(ConfigErrors) as exc:
        load(text)
    return str(exc.value)


# -- top-level keys and aliases ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "field", "value"),
    [
        ("listen: 127.0.0.1:-1", "port", -1),
        ("listen: 127.0.0.1:5000", "host", "127.0.0.1"),
        ("listen: 5000", "port", 5000),
        ('listen: "[::1]:5000"', "host", "::1"),
        ("port: 5001", "port", 5001),
        ("PORT: 5001", "port", 5001),
        ("host: 10.0.0.1", "host", "10.0.0.1"),
        ("net: 10.0.0.2", "host", "10.0.0.2"),
        ("Net: 10.0.0.3", "host", "10.0.0.3"),
        ("server_name: srv", "server_name", "srv"),
        ("client_advertise: a.example:4222", "client_advertise", "a.example:4222"),
        ('http: "127.0.0.1:-1"', "http_port", -1),
        ("http: 8223", "http_port", 8223),
        ('https: "127.0.0.1:8443"', "https_port", 8443),
        ("http_port: 8224", "http_port", 8224),
        ("monitor_port: 8225", "http_port", 8225),
        ("https_port: 8444", "https_port", 8444),
        ("http_base_path: /nats", "http_base_path", "/nats"),
        ("debug: true", "debug", True),
        ("trace: on", "trace", True),
        ("logtime: false", "logtime", False),
        ("logtime_utc: yes", "logtime_utc", True),
        ("logfile: /tmp/a.log", "log_file", "/tmp/a.log"),
        ("log_file: /tmp/b.log", "log_file", "/tmp/b.log"),
        ("pidfile: /tmp/a.pid", "pid_file", "/tmp/a.pid"),
        ("pid_file: /tmp/b.pid", "pid_file", "/tmp/b.pid"),
        ("ports_file_dir: /tmp", "ports_file_dir", "/tmp"),
        ("max_control_line: 2kb", "max_control_line", 2048),
        ("max_payload: 2MB", "max_payload", 2 * 1024 * 1024),
        ("max_pending: 10MB", "max_pending", 10 * 1024 * 1024),
        ("max_connections: 10", "max_connections", 10),
        ("max_conn: 0", "max_connections", -1),
        ("max_subscriptions: 7", "max_subscriptions", 7),
        ("max_subs: 8", "max_subscriptions", 8),
        ("max_closed_clients: 5", "max_closed_clients", 5),
        ('ping_interval: "30s"', "ping_interval", 30.0),
        ("ping_max: 4", "ping_max", 4),
        ('write_deadline: "3s"', "write_deadline", 3.0),
        ("no_fast_producer_stall: true", "no_fast_producer_stall", True),
        ('lame_duck_duration: "45s"', "lame_duck_duration", 45.0),
        ('lame_duck_grace_period: "2s"', "lame_duck_grace_period", 2.0),
        ("no_header_support: true", "no_header_support", True),
        ("disable_sublist_cache: true", "disable_sublist_cache", True),
        ("no_sublist_cache: true", "disable_sublist_cache", True),
    ],
)
def test_top_level_keys_and_aliases(text: str, field: str, value: Any) -> None:
    opts, warnings = load(text)
    assert getattr(opts, field) == value
    assert warnings == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("bogus: 1", 't.conf:1:1: unknown field "bogus"'),
        ("port: 1\n  max_paylod: 3", 't.conf:2:3: unknown field "max_paylod"'),
        ('port: "abc"', "port: expected an integer"),
        ("max_payload: true", "max_payload: expected an integer"),
        ("max_payload: 3GB", "max_payload value is too big"),
        ('lame_duck_duration: "10s"', "invalid lame_duck_duration of 10s, minimum is 30 seconds"),
        ("lame_duck_duration: 40", "lame_duck_duration: expected a string"),
        ('lame_duck_grace_period: "-1s"', "lame_duck_grace_period: invalid duration"),
        ('listen: "127.0.0.1"', "could not parse address string"),
        ('listen: "a:b:4222"', "too many colons"),
        ('http: "localhost:x"', 'could not parse port "x"'),
        ('server_name: "a b"', "server name can not contain spaces"),
        ("max_sub_tokens: 300", "max_sub_tokens value is too big"),
        ("write_timeout: never", "write_timeout must be 'default', 'close' or 'retry'"),
        ('include "missing.conf"', "error opening include file 'missing.conf'"),
    ],
)
def test_invalid_top_level_values(text: str, message: str) -> None:
    with pytest.raises(Exception, match=message.replace("(", r"\(").replace(")", r"\)")):
        load(text)


def test_every_error_is_reported_at_once() -> None:
    out = errors_of("foo: 1\nauthorization {\n   denny: 1\n}\nport: x\n")
    assert out.splitlines() == [
        't.conf:1:1: unknown field "foo"',
        't.conf:3:4: unknown field "denny"',
        "t.conf:5:1: port: expected an integer, got 'x'",
    ]


def test_variables_defined_for_reference_are_not_unknown_keys() -> None:
    opts, _ = load("PASS: s3cret\nauthorization { user: a, password: $PASS }")
    assert opts.password == "s3cret"
    assert 'unknown field "UNUSED"' in errors_of("UNUSED: 1\nport: 4222")


def test_durations_as_numbers_warn_like_nats_server() -> None:
    opts, warnings = load("ping_interval: 30")
    assert opts.ping_interval == 30.0
    assert warnings == ["t.conf:1:1: ping_interval should be converted to a duration"]


@pytest.mark.parametrize(
    "text",
    [
        "trace_verbose: true",
        "trace_headers: true",
        "prof_port: 6060",
        "connect_error_reports: 10",
        "reconnect_error_reports: 10",
        "allow_non_tls: true",
        "max_sub_tokens: 20",
        "max_subscription_tokens: 20",
        "write_timeout: close",
        "server_tags: [a, b]",
    ],
)
def test_harmless_unimplemented_keys_warn(text: str) -> None:
    _, warnings = load(text)
    assert len(warnings) == 1 and "is not supported by pynatsd and is ignored" in warnings[0]


@pytest.mark.parametrize(
    ("text", "system"),
    [
        ("accounts { A { users = [{user: a, password: a}] } }", "$SYS"),
        ("accounts { A { users = [{user: a, password: a}] } }\nsystem_account: A", "A"),
        ("accounts { A { users = [{user: a, password: a}] } }\nsystem: A", "A"),
        ("accounts { A { users = [{user: a, password: a}] } }\nno_system_account: true", ""),
        ("no_sys_acc: true", ""),
        ("accounts { A {} }\nsystem_account: A\nno_system_account: true", "A"),  # only the default goes
        ("port: 4222", "$SYS"),
    ],
)
def test_system_account(text: str, system: str) -> None:
    """As nats-server: `$SYS` unless another account is named, none with `no_system_account`."""
    opts, warnings = load(text)
    assert warnings == []
    assert Authenticator(opts).system_account == system


@pytest.mark.parametrize("text", ["system_account: NOPE", "accounts { A {} }\nsystem_account: B"])
def test_system_account_must_exist(text: str) -> None:
    assert "error resolving system account: account missing" in errors_of(text)


@pytest.mark.parametrize(
    ("text", "field", "value"),
    [
        ("syslog: true", "syslog", True),
        ('remote_syslog: "udp://127.0.0.1:514"', "remote_syslog", "udp://127.0.0.1:514"),
        ("log_size_limit: 1MB", "log_size_limit", 1024 * 1024),
        ("logfile_size_limit: 1MB", "log_size_limit", 1024 * 1024),
        ("log_max_num: 3", "log_max_num", 3),
        ("logfile_max_num: 3", "log_max_num", 3),
        ("max_traced_msg_len: 100", "max_traced_msg_len", 100),
    ],
)
def test_logging_keys_are_applied(text: str, field: str, value: object) -> None:
    opts, warnings = load(text)
    assert warnings == [] and getattr(opts, field) == value


# -- refusals: access control and features pynatsd does not have ----------------------------------------
@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("account_resolver: URL(http://127.0.0.1:1/)", "account_resolver"),
        ("resolver_tls: { cert_file: x }", "resolver_tls"),
        ("resolver_pinned_accounts: [x]", "resolver_pinned_accounts"),
        ("default_sentinel: abc", "default_sentinel"),
        ("proxies: { trusted: [] }", "proxies"),
        ("authorization { users = [{user: a, password: b, proxy_required: true}] }", "proxy_required"),
        ('accounts { A { exports = [{service: "x", latency: "l"}] } }', "latency"),
        ('accounts { A { exports = [{service: "x", allow_trace: true}] } }', "allow_trace"),
        ('accounts { A { imports = [{service: {account: B, subject: "x"}, share: true}] } }', "share"),
        ("accounts { A { jetstream: { cluster_traffic: owner } } }", "cluster_traffic"),
        ("accounts { A { limits { max_connections: 1 } } }", "limits"),
        ('tls { pinned_certs: ["aa"] }', "pinned_certs"),
        ("tls { ocsp_peer: true }", "ocsp_peer"),
        ("gateway { name: A, port: 7222, tls { handshake_first: true } }", "handshake_first"),
        ("gateway { name: A, port: 7222, connect_backoff: true }", "connect_backoff"),
        ("gateway { name: A, port: 7222, write_deadline: 1s }", "write_deadline"),
        (
            "gateway { name: A, port: 7222, authorization { user: u, permissions { publish: x } } }",
            "permissions",
        ),
        (
            'gateway { name: A, port: 7222, gateways: [{name: B, url: "nats://h:1", tls: {verify: true}}] }',
            "verify",
        ),
        ("leafnodes { port: 7422, tls { pinned_certs: [] } }", "pinned_certs"),
        ("leaf { port: 7422, compression: s2_auto }", "compression"),
        ("mappings { a: b }", "mappings"),
        ("default_js_domain { A: hub }", "default_js_domain"),
        ("proxy_protocol: true", "proxy_protocol"),
        ("ocsp: true", "ocsp"),
        ("cluster { port: 6222, tls { cert_file: x, key_file: y, insecure: true } }", "insecure"),
        ("cluster { port: 6222, compression: s2_fast }", "compression"),
    ],
)
def test_unsupported_keys_are_refused_by_name(text: str, key: str) -> None:
    out = errors_of(text)
    assert f'"{key}": pynatsd does not support' in out
    assert out.startswith("t.conf:1:")


def test_a_registered_block_parser_takes_the_block() -> None:
    seen: list[tuple[str, Any, Where]] = []

    def parser(ctx: Ctx, opts: Options, key: str, value: Any, where: Where) -> None:
        seen.append((key, dict(value), where))

    before = BLOCK_PARSERS.get("cluster")
    register_block("cluster", parser)
    try:
        load("cluster { port: 8080 }")
    finally:
        if before is None:
            del BLOCK_PARSERS["cluster"]
        else:
            BLOCK_PARSERS["cluster"] = before
    assert seen == [("cluster", {"port": 8080}, Where("t.conf", 1, 1))]


# -- authorization, users, permissions ----------------------------------------------------------------
def _auth(text: str) -> Authenticator:
    return Authenticator(load(text)[0])


@pytest.mark.parametrize(
    "text",
    [
        "authorization { users = [ {user: u, password: p} ] }",
        "Authorization { Users = [ {User: u, Password: p} ] }",
        "AUTHORIZATION { USERS = [ {USER: u, PASS: p} ] }",
        "authorization { users = [ {username: u, pass: p} ] }",
    ],
)
def test_user_spellings(text: str) -> None:
    auth = _auth(text)
    assert set(auth.users) == {"u"} and auth.users["u"].password == "p"


@pytest.mark.parametrize(
    ("perms", "pub_ok", "pub_denied", "sub_ok", "sub_denied"),
    [
        ('{pub: "a.>", sub: "b.>"}', "a.1", "c", "b.1", "c"),
        ('{publish: ["a.>"], subscribe: ["b.>"]}', "a.1", "c", "b.1", "c"),
        ('{import: "a.>", export: "b.>"}', "a.1", "c", "b.1", "c"),
        ('{Publish: {Allow: "a.>"}, Subscribe: {ALLOW: "b.>"}}', "a.1", "c", "b.1", "c"),
        ('{PUB: {DENY: "c"}, SUB: {deny: ["c"]}}', "a.1", "c", "b.1", "c"),
    ],
)
def test_permission_spellings(perms: str, pub_ok: str, pub_denied: str, sub_ok: str, sub_denied: str) -> None:
    auth = _auth(f"authorization {{ users = [ {{user: u, password: p, permissions: {perms}}} ] }}")
    p = auth.permissions("u")
    assert p is not None
    assert p.can_publish(pub_ok.encode()) and not p.can_publish(pub_denied.encode())
    assert p.can_subscribe(sub_ok.encode(), None) and not p.can_subscribe(sub_denied.encode(), None)


@pytest.mark.parametrize("key", ["permissions", "default_permissions", "default_permission"])
def test_authorization_default_permissions(key: str) -> None:
    auth = _auth(
        f'authorization {{ {key}: {{publish: "x"}}, users = [{{user: a, password: a}}, '
        '{user: b, password: b, permissions: {publish: "y"}}] }'
    )
    a, b = auth.permissions("a"), auth.permissions("b")
    assert a is not None and a.can_publish(b"x") and not a.can_publish(b"y")
    assert b is not None and b.can_publish(b"y") and not b.can_publish(b"x")


def test_account_default_permissions_and_nkey_users() -> None:
    auth = _auth(
        f'accounts {{ A {{ default_permissions: {{publish: "x"}}, users = [{{user: a, password: a}}, '
        f"{{nkey: {USER_NKEY}}}] }} }}"
    )
    a = auth.permissions("a")
    assert a is not None and a.can_publish(b"x") and not a.can_publish(b"y")
    assert auth.nkeys[USER_NKEY].account == "A" and "" not in auth.users
    assert auth.required


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('authorization { users = [{user: a, password: b, permissions: {publish: {denny: "x"}}}] }',
         "t.conf:1:73: Unknown field name \"denny\" parsing subject permissions"),
        ("authorization { users = [{user: a, password: b, permissions: {publsh: x}}] }",
         'Unknown field "publsh" parsing permissions'),
        ("authorization { users = [{user: a, password: b, pasword: c}] }", 'unknown field "pasword"'),
        ("authorization { tokn: x }", 'unknown field "tokn"'),
        ("authorization { token: x, users = [] }", "Can not have a token and a users array"),
        ("authorization { user: a, password: b, token: c }", "Cannot have a user/pass and token"),
        ("authorization { user: a, password: b, users = [{user: c, password: d}] }",
         "Can not have a single user/pass and a users array"),
        ("authorization { users = [{user: a, password: b}, {user: a, password: c}] }", 'Duplicate user "a"'),
        ("accounts { A { users = [{user: a, password: b}] }, B { users = [{user: a, password: c}] } }",
         'Duplicate user "a"'),
        ("authorization { token: t }\naccounts { A { users = [{user: a, password: b}] } }",
         "Can not have a token and accounts"),
        ("authorization { users = [{password: b}] }", "User entry requires a user"),
        ("authorization { users = [{nkey: UBAD}] }", "Not a valid public nkey for a user"),
        (f"authorization {{ users = [{{nkey: {USER_NKEY}, password: x}}] }}",
         "Nkey users do not take usernames or passwords"),
        ('authorization { users = [{user: a, password: b, permissions: {publish: "a..b"}}] }',
         'subject "a..b" is not a valid subject'),
        ('authorization { users = [{user: a, password: b, permissions: {subscribe: "a q r"}}] }',
         'subject "a q r" is not a valid subject'),
        ('authorization { users = [{user: a, password: b, allowed_connection_types: ["FOO"]}] }',
         "invalid connection types"),
        ('authorization { users = [{user: a, password: b, permissions: {allow_responses: "yes"}}] }',
         "error parsing response permissions, expected a boolean or a map"),
        ("accounts { $G { users = [] } }", '"$G" is a Reserved Account'),
        ("accounts { A: 1 }", "Expected map entries for accounts"),
        ("authorization { users = [{user: a, password: b}] }\nno_auth_user: zz",
         'no_auth_user: "zz" not present'),
    ],
)  # fmt: skip
def test_invalid_auth_configs(text: str, message: str) -> None:
    assert message in errors_of(text)


def test_connection_types_restrict_the_user() -> None:
    auth = _auth(
        'authorization { users = [{user: a, password: b, allowed_connection_types: ["WEBSOCKET"]}] }'
    )
    assert auth.users["a"].connection_types == frozenset({"WEBSOCKET"})


# -- tls ----------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return make_certs(tmp_path_factory.mktemp("certs"))


def test_tls_keys_and_aliases(certs: dict[str, str]) -> None:
    opts, _ = load(
        f"""TLS {{
          CERT_FILE: "{certs["server"]}", Key_File: "{certs["server_key"]}", ca_file: "{certs["ca"]}"
          verify: true, timeout: 3, first: true, min_version: "1.3"
          cipher_suites: ["TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "TLS_AES_128_GCM_SHA256"]
          curve_preferences: ["CurveP384", "X25519"]
        }}"""
    )
    assert (opts.tls_cert, opts.tls_key, opts.tls_ca_cert) == (
        certs["server"],
        certs["server_key"],
        certs["ca"],
    )
    assert opts.tls_verify and opts.tls_handshake_first and opts.tls_timeout == 3.0
    assert opts.tls_ciphers == ["ECDHE-ECDSA-AES128-GCM-SHA256"]
    assert opts.tls_curves == ["secp384r1", "X25519"]
    assert opts.tls_min_version == "1.3"


def test_tls_several_certificates(certs: dict[str, str]) -> None:
    opts, _ = load(
        f"""tls {{ certs = [
          {{cert_file: "{certs["server"]}", key_file: "{certs["server_key"]}"}}
          {{cert_file: "{certs["client"]}", key_file: "{certs["client_key"]}"}}
        ] }}"""
    )
    assert opts.tls_certs == [(certs["server"], certs["server_key"]), (certs["client"], certs["client_key"])]


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ('cipher_suites: ["TLS_RSA_WITH_AES_128_CBC_SHA"]',
         "insecure cipher suites configured without 'allow_insecure_cipher_suites' option set"),
        ('cipher_suites: ["TLS_NOPE"]', "unrecognized cipher TLS_NOPE"),
        ("cipher_suites: []", "'cipher_suites' cannot be empty"),
        ('curve_preferences: ["P999"]', "unrecognized curve preference P999"),
        ("curve_preferences: []", "'curve_preferences' cannot be empty"),
        ('min_version: "1.1"', "unsupported TLS version"),
        ("verify_cert_and_check_known_urls: true", "not supported in this context"),
        ("cert_fil: x", 'error parsing tls config, unknown field "cert_fil"'),
        ('certs = [{cert_file: "a"}]', "both 'cert_file' and 'cert_key' options are required"),
        ('cert_file: "/no/such.pem", key_file: "/no/such.key"',
         "open /no/such.pem: no such file or directory"),
    ],
)  # fmt: skip
def test_invalid_tls(block: str, message: str) -> None:
    out = errors_of(f"tls {{\n {block}\n}}")
    assert message in out and out.startswith("t.conf:")


def test_insecure_ciphers_allowed_when_asked(certs: dict[str, str]) -> None:
    opts, _ = load(
        f"""tls {{ cert_file: "{certs["server"]}", key_file: "{certs["server_key"]}"
          allow_insecure_cipher_suites: true, cipher_suites: ["TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256"] }}"""
    )
    assert opts.tls_ciphers == ["ECDHE-ECDSA-AES128-SHA256"]


def test_missing_certificate_names_path_and_position(tmp_path: Path) -> None:
    conf = tmp_path / "m.conf"
    conf.write_text('port: 4222\ntls {\n  cert_file: "nope.pem"\n  key_file: "nope.key"\n}\n')
    from pynatsd.config.parser import parse_file

    with pytest.raises(ConfigErrors) as exc:
        apply_config(Options(), parse_file(conf))
    assert (
        str(exc.value)
        == f"{conf}:2:1: error parsing X509 certificate/key pair: open nope.pem: no such file or directory"
    )


@pytest.mark.parametrize("key", ["permissions", "permission", "authorization", "Permissions"])
def test_user_permission_key_aliases(key: str) -> None:
    p = _auth(f'authorization {{ users = [{{user: u, password: p, {key}: {{publish: "a"}}}}] }}').permissions(
        "u"
    )
    assert p is not None and p.can_publish(b"a") and not p.can_publish(b"b")


@pytest.mark.parametrize("key", ["allowed_connection_types", "connection_types", "clients"])
def test_connection_type_aliases(key: str) -> None:
    auth = _auth(f'authorization {{ users = [{{user: u, password: p, {key}: ["STANDARD"]}}] }}')
    assert auth.users["u"].connection_types == frozenset({"STANDARD"})


@pytest.mark.parametrize(
    "value", ["true", "{max: 2}", '{max_msgs: 2, expires: "1m"}', '{MAX_RESPONSES: 2, TTL: "1m"}']
)
@pytest.mark.parametrize("key", ["allow_responses", "publish_allow_responses", "Allow_Responses"])
def test_allow_responses_aliases(key: str, value: str) -> None:
    p = _auth(
        f"authorization {{ users = [{{user: u, password: p, permissions: {{{key}: {value}}}}}] }}"
    ).permissions("u")
    assert p is not None and p.responses is not None


@pytest.mark.parametrize(("key", "value"), [("user", "u"), ("username", "u"), ("USER", "u")])
def test_single_user_aliases(key: str, value: str) -> None:
    opts, _ = load(f"authorization {{ {key}: {value}, pass: p, timeout: 3 }}")
    assert (opts.username, opts.password, opts.auth_timeout) == ("u", "p", 3.0)


def test_accounts_as_a_list_of_names() -> None:
    opts, _ = load("accounts: [A, B]")
    assert list(opts.accounts) == ["A", "B"]
    assert "Duplicate Account Entry: A" in errors_of("accounts: [A, A]")


@pytest.mark.parametrize("key", ["handshake_first", "first", "immediate"])
def test_tls_handshake_first_aliases(key: str, certs: dict[str, str]) -> None:
    opts, _ = load(
        f'tls {{ cert_file: "{certs["server"]}", key_file: "{certs["server_key"]}", {key}: true }}'
    )
    assert opts.tls_handshake_first


def test_tls_certificates_alias(certs: dict[str, str]) -> None:
    opts, _ = load(
        f'tls {{ certificates = [{{cert_file: "{certs["server"]}", key_file: "{certs["server_key"]}"}}] }}'
    )
    assert opts.tls_certs == [(certs["server"], certs["server_key"])]


def test_unreadable_certificate_is_named(tmp_path: Path, certs: dict[str, str]) -> None:
    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate\n")
    out = errors_of(f'tls {{ cert_file: "{bad}", key_file: "{certs["server_key"]}" }}')
    assert out.startswith("t.conf:1:1: error parsing X509 certificate/key pair:")


def test_errors_in_an_included_file_name_that_file(tmp_path: Path) -> None:
    from pynatsd.config.parser import parse_file

    (tmp_path / "inc.conf").write_text("port: 4222\nbogus_inc: 1\n")
    main = tmp_path / "main.conf"
    main.write_text('include "inc.conf"\n')
    with pytest.raises(ConfigErrors) as exc:
        apply_config(Options(), parse_file(main))
    assert str(exc.value) == f'{tmp_path / "inc.conf"}:2:1: unknown field "bogus_inc"'


@pytest.mark.parametrize(
    ("value", "warned"), [("true", False), ('"on"', False), ('"auto"', True), ('"50ms"', True)]
)
def test_handshake_first_values(value: str, warned: bool, certs: dict[str, str]) -> None:
    opts, warnings = load(
        f'tls {{ cert_file: "{certs["server"]}", key_file: "{certs["server_key"]}", first: {value} }}'
    )
    assert opts.tls_handshake_first
    assert bool(warnings) == warned
    assert 'field "first"\'s value "maybe" is invalid' in errors_of('tls { first: "maybe" }')


def test_jetstream_block_keys_are_checked() -> None:
    opts, warnings = load("jetstream { store_dir: /tmp/js, max_file_store: 1GB, domain: hub }")
    assert warnings == [] and opts.jetstream["store_dir"] == "/tmp/js"  # type: ignore[index]
    assert 'unknown field "max_fie_store"' in errors_of("jetstream { max_fie_store: 1GB }")
    out = errors_of('jetstream { store_dir: /tmp/js, key: "s3cret" }')
    assert '"key": pynatsd does not support JetStream encryption at rest' in out


# -- a Python authorizer (tests/security/test_python_authorizer.py runs one) ------------------------------
def test_python_authorizer_block_takes_a_path_and_a_timeout() -> None:
    import json

    opts, _ = load('authorization { python { callable: "json:dumps", timeout: "250ms" } }')
    assert opts.python_authorizer is not None
    assert (opts.python_authorizer.path, opts.python_authorizer.timeout) == ("json:dumps", 0.25)
    assert opts.python_authorizer.target is json.dumps


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ('authorization { python: "json:dumps", users: [{user: a, password: b}] }', "Can not have a python"),
        ('authorization { python: "json:dumps", token: t }', "Can not have a python"),
        (
            'authorization { python: "json:dumps" }\naccounts { A: { users: [{user: a}] } }',
            "users in accounts",
        ),
        ('authorization { python { callable: "json:dumps", retries: 2 } }', 'unknown field "retries"'),
        ('authorization { python: "json" }', "no entry point of that name in group pynatsd.authorizers"),
        ('authorization { python: "json:nothing" }', "json has no nothing"),
        ('authorization { python: "json:__name__" }', "__name__ is not callable"),
        (
            'authorization { python: "json:dumps", auth_callout { issuer: '
            f"{ACCOUNT_NKEY}, account: A, auth_users: [x] }} }}\naccounts {{ A {{}} }}",
            "Can not have a python authorizer and an auth_callout",
        ),
        (
            'authorization { python: "json:dumps", default_permissions: { publish: "a" } }',
            "Can not have a python authorizer and default_permissions",
        ),
        (
            "websocket { port: -1, no_tls: true, authorization { token: t } }\n"
            'authorization { python: "json:dumps" }',
            "Can not have a python authorizer and a websocket authorization",
        ),
        (
            'authorization { python: "json:dumps" }\nws { port: -1, no_tls: true, user_cookie: u }',
            "Can not have a python authorizer and a websocket user_cookie",
        ),
    ],
)
def test_python_authorizer_refusals(text: str, error: str) -> None:
    assert error in errors_of(text)
