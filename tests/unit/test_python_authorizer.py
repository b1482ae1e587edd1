"""pynatsd.auth.python without a server: what an authorizer's answer becomes (the server side is in
tests/security/test_python_authorizer.py)."""

from __future__ import annotations

import pytest

from pynatsd.auth.python import (
    ResponsePermission,
    SubjectRule,
    UserPermissions,
    permissions_of,
)


def test_rules_take_the_config_users_semantics() -> None:
    perms = permissions_of(
        UserPermissions(
            publish=SubjectRule(allow="orders.>", deny=["orders.secret"]),
            subscribe=SubjectRule(allow=["work workers"]),
        )
    )
    assert perms is not None
    assert perms.can_publish(b"orders.new") and not perms.can_publish(b"orders.secret")
    assert not perms.can_publish(b"other")
    assert perms.can_subscribe(b"work", b"workers") and not perms.can_subscribe(b"work", b"others")
    assert permissions_of(None) is None


def test_an_empty_allow_list_allows_nothing_and_none_everything() -> None:
    nothing = permissions_of(UserPermissions(publish=SubjectRule(allow=[])))
    anything = permissions_of(UserPermissions(publish=SubjectRule(deny="x")))
    assert nothing is not None and anything is not None
    assert not nothing.can_publish(b"a")
    assert anything.can_publish(b"a") and not anything.can_publish(b"x")


@pytest.mark.parametrize(
    ("given", "expected"),
    [(True, ResponsePermission()), (ResponsePermission(3, 5.0), ResponsePermission(3, 5.0))],
)
def test_allow_responses(given: bool | ResponsePermission, expected: ResponsePermission) -> None:
    perms = permissions_of(UserPermissions(subscribe=SubjectRule(allow="svc.>"), allow_responses=given))
    assert perms is not None and perms.responses == expected
    assert not perms.can_publish(b"anything")  # as in the config: responses only


@pytest.mark.parametrize(
    "given",
    [
        UserPermissions(publish=SubjectRule(allow=["a b"])),  # a queue form is for subscribe only
        UserPermissions(subscribe=SubjectRule(deny=["a b c"])),
        UserPermissions(subscribe=SubjectRule(allow=[""])),
        UserPermissions(publish={"allow": ["a"]}),  # type: ignore[arg-type]
        UserPermissions(allow_responses="yes"),  # type: ignore[arg-type]
        {"publish": ["a"]},
    ],
)
def test_bad_permissions_are_refused(given: UserPermissions) -> None:
    with pytest.raises(ValueError):
        permissions_of(given)
