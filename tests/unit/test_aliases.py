"""Account-qualified aliases (``coordinator/storage/aliases.py``): kamu's grammar, comparison
ignoring ASCII case, and the order a reference's candidates are tried in."""

from __future__ import annotations

import pytest

from coordinator.errors import InvalidSnapshot
from coordinator.storage.aliases import (
    DatasetAlias,
    candidates,
    find,
    index,
    parse_alias,
    qualify,
)


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("orders", DatasetAlias(None, "orders")),
        ("com.acme.orders", DatasetAlias(None, "com.acme.orders")),
        ("alice/1pub1", DatasetAlias("alice", "1pub1")),
        ("my-org.eu/a-b.c", DatasetAlias("my-org.eu", "a-b.c")),
        ("a/b/c", None),
        ("/orders", None),
        ("alice/", None),
        ("-bad", None),
        ("bad-", None),
        ("a..b", None),
        ("did:odf:fed01", None),
        ("alice_x/y", None),
    ],
)
def test_parse_follows_kamus_grammar(text: str, parsed: DatasetAlias | None) -> None:
    assert parse_alias(text) == parsed


def test_qualify_as_kamus_multi_tenant_add() -> None:
    assert qualify("orders", None) == "orders"
    assert qualify("bob/orders", None) == "bob/orders"
    assert qualify("orders", "alice") == "alice/orders"
    assert qualify("Alice/orders", "alice") == "Alice/orders"
    with pytest.raises(InvalidSnapshot, match="account 'bob'"):
        qualify("bob/orders", "alice")
    with pytest.raises(InvalidSnapshot, match="invalid account"):
        qualify("orders", "al ice")


def test_candidates_and_find_ignore_case() -> None:
    assert candidates("orders", None) == ("orders",)
    assert candidates("orders", "alice") == ("alice/orders", "orders")
    assert candidates("alice/orders", "alice") == ("alice/orders", "orders")
    assert candidates("alice/orders", "bob") == ("alice/orders",)
    assert candidates("did:odf:x", "alice") == ("did:odf:x",)

    by_key = index([("orders", 1), ("Alice/Orders", 2), ("ORDERS", 3)])
    assert find("orders", None, by_key) == 1  # the first of two names differing by case
    assert find("orders", "ALICE", by_key) == 2
    assert find("alice/ORDERS", "bob", by_key) == 2
    assert find("carol/orders", "carol", by_key) == 1  # the node's own, for its account
    assert find("carol/orders", None, by_key) is None
