"""Operator-mode configurations: what nats-server refuses at start pynatsd refuses too, for the same
reason; a valid one passes `-t` on both."""

from __future__ import annotations

from pathlib import Path

import pytest

from pynatsd.base.blocks import ResolverConfig
from pynatsd.base.options import Options, unreloadable_changes
from tests.config.test_differential import _run
from tests.jwt.issuer import Key, account_jwt
from tests.jwt.world import KINDS, World, require

W = World()
OTHER_SYSTEM = Key("A").public
# Appended to the valid operator-mode config: (text, a phrase both servers' errors contain).
BROKEN = {
    # nats-server falls back to a URL resolver from the operator JWT (here none: it cannot fetch).
    "no resolver": ("", ""),
    "accounts block": ("accounts { X { users = [{user: x, password: x}] } }", "do not allow Accounts"),
    "config users": ("authorization { users = [{user: x, password: x}] }", "do not allow users"),
    "trusted keys too": (f'trusted_keys: ["{W.operator.public}"]', "TrustedKeys"),
    "other system account": (f"system_account: {OTHER_SYSTEM}", "system_account in config and operator JWT"),
}


def _config(directory: Path, resolver: bool = True, extra: str = "") -> Path:
    conf = W.config(directory)
    text = conf.read_text()
    if not resolver:  # the operator alone, without resolver nor preload
        text = text.split("resolver:")[0]
    conf.write_text(text.replace(f"system_account: {W.system.public}\n", "") + extra + "\n")
    return conf


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", list(BROKEN))
def test_refused_alike(kind: str, case: str, tmp_path: Path) -> None:
    require(kind)
    extra, phrase = BROKEN[case]
    conf = _config(tmp_path, resolver=case != "no resolver", extra=extra)
    # nats-server checks these when starting, not with -t: a start that fails at once.
    result = _run(kind, ["-c", str(conf), "-a", "127.0.0.1", "-p", "-1"])
    assert result.returncode != 0
    assert phrase in result.stdout + result.stderr


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("case", "operator"),
    [
        ("missing operator file", "no-such-operator.jwt"),
        ("tampered operator JWT", W.operator_jwt.rsplit(".", 1)[0] + "." + "A" * 86),
        ("account JWT as operator", account_jwt(W.operator, W.a)),
    ],
)
def test_bad_operator_refused(kind: str, case: str, operator: str, tmp_path: Path) -> None:
    require(kind)
    conf = tmp_path / "bad.conf"
    conf.write_text(f'operator: "{operator}"\nresolver: MEMORY\n')
    result = _run(kind, ["-t", "-c", str(conf)])
    assert result.returncode != 0
    assert "operator" in (result.stdout + result.stderr).lower()


@pytest.mark.parametrize("kind", KINDS)
def test_valid_operator_config(kind: str, tmp_path: Path) -> None:
    require(kind)
    result = _run(kind, ["-t", "-c", str(_config(tmp_path))])
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("before", "after", "message"),
    [
        (None, ResolverConfig(), "moving to or from an account resolver"),
        (ResolverConfig(), None, "moving to or from an account resolver"),
        (ResolverConfig(), ResolverConfig("full", "x", 0), "not supported for resolver"),
    ],
)
def test_reload_keeps_the_resolver(
    before: ResolverConfig | None, after: ResolverConfig | None, message: str
) -> None:
    old, new = Options(), Options()
    for opts, resolver in ((old, before), (new, after)):
        if resolver is not None:
            opts.resolver = resolver
    assert [m for m in unreloadable_changes(old, new) if message in m]


def test_reload_keeps_the_system_account() -> None:
    old, new = Options(), Options()
    old.system_account, new.system_account = "AOLD", "ANEW"
    assert [m for m in unreloadable_changes(old, new) if "SystemAccount" in m]


@pytest.mark.parametrize(
    ("after", "shown"),
    [
        (
            ResolverConfig("full", "x", 0, delete="hard"),
            "{'type': 'full', 'dir': 'x', 'limit': 0, 'delete': 'hard'}",
        ),
        (
            ResolverConfig("cache", "x", 1000, ttl=5.0),
            "{'type': 'cache', 'dir': 'x', 'limit': 1000, 'ttl': 5.0}",
        ),
    ],
)
def test_a_refused_resolver_change_shows_both_resolvers(after: ResolverConfig, shown: str) -> None:
    """As the config schema's dicts showed them: MEMORY, or the directory's settings."""
    old, new = Options(resolver=ResolverConfig()), Options(resolver=after)
    assert unreloadable_changes(old, new) == [
        f"config reload not supported for resolver: old='MEMORY', new={shown}"
    ]
