"""Dataset aliases with an optional account (``name`` or ``account/name``), as kamu spells and
compares them, and how a reference to one resolves among a repository's aliases.

kamu-cli's grammar (``src/odf/metadata/src/formats/grammar.rs``): ``DatasetAlias =
(AccountName "/")? DatasetName``, both hostnames (dot-separated labels of ASCII letters, digits
and inner dashes). Names and account names compare **ignoring ASCII case**
(``newtype_str!`` in ``src/odf/metadata/src/formats/macros.rs``): ``Alice/Orders`` and
``alice/orders`` are one dataset.

An odf-node repository is one namespace of aliases, each kept as written: a dataset created
from a snapshot named ``alice/1pub1`` (or named ``1pub1`` and created with ``--account alice``)
is called ``alice/1pub1``, as in kamu's multi-tenant workspaces. A reference resolves as kamu's
multi-tenant registry does, with the account the command runs as (``dataset create
--account``) standing for kamu's logged-in account:

* ``account/name`` names that alias; when the account is the one the command runs as, it
  also finds a ``name`` created without an account (that node's own datasets);
* ``name`` names ``account/name`` when the command runs as an account (kamu qualifies an
  unqualified reference with the current account), else, or failing that, ``name`` itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final, TypeVar

from coordinator.errors import InvalidSnapshot

_NAME_CHARS: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class DatasetAlias:
    """A parsed alias: the account (``None``: none) and the dataset name, as written."""

    account: str | None
    name: str

    def __str__(self) -> str:
        return self.name if self.account is None else f"{self.account}/{self.name}"

    @property
    def key(self) -> str:
        """The form two aliases are compared by (ASCII case folded, as kamu compares them)."""
        return alias_key(str(self))


def is_hostname(text: str) -> bool:
    """Whether ``text`` is an account or dataset name of kamu's grammar."""
    # Labels of ASCII letters and digits joined by '.', each made of runs joined by single
    # '-' (kamu's grammar); checked without a regular expression, in one linear pass.
    return all(
        part and set(part) <= _NAME_CHARS for label in text.split(".") for part in label.split("-")
    )


def parse_alias(text: str) -> DatasetAlias | None:
    """``text`` as an alias, or ``None`` if it is not one (a DID, a URL, a bad name)."""
    account, slash, name = text.rpartition("/")
    if not is_hostname(name) or (slash and not is_hostname(account)):
        return None
    return DatasetAlias(account if slash else None, name)


def alias_key(text: str) -> str:
    """The comparison form of an alias (kamu folds ASCII case; other characters are not valid
    in an alias)."""
    return text.lower()


def qualify(alias: str, account: str | None) -> str:
    """The alias a dataset named ``alias`` gets when it is created as ``account``.

    kamu's multi-tenant ``add``: an unqualified name takes the account; a name already in that
    account is kept as written.

    Raises:
        InvalidSnapshot: ``alias`` is not an alias, ``account`` is not an account name, or
            the alias names another account (kamu: "Cannot create a dataset in account ...").
    """
    parsed = parse_alias(alias)
    if parsed is None:
        raise InvalidSnapshot(f"invalid dataset name {alias!r}")
    if account is None:
        return alias
    if not is_hostname(account):
        raise InvalidSnapshot(
            f"invalid account name {account!r}: use letters, digits, inner '-' and '.'"
        )
    if parsed.account is None:
        return f"{account}/{parsed.name}"
    if alias_key(parsed.account) != alias_key(account):
        raise InvalidSnapshot(
            f"cannot create {alias!r} as account {account!r}: the name is in account "
            f"{parsed.account!r} (drop the account from the name, or create it as that account)"
        )
    return alias


def candidates(ref: str, account: str | None) -> tuple[str, ...]:
    """The aliases ``ref`` may name, in the order they are tried (see the module docstring)."""
    parsed = parse_alias(ref)
    if parsed is None:
        return (ref,)
    if parsed.account is None:
        return (f"{account}/{parsed.name}", ref) if account is not None else (ref,)
    if account is not None and alias_key(parsed.account) == alias_key(account):
        return (ref, parsed.name)
    return (ref,)


def find(ref: str, account: str | None, by_key: Mapping[str, T]) -> T | None:
    """The first of ``ref``'s :func:`candidates` found in ``by_key`` (keys: :func:`alias_key`)."""
    for candidate in candidates(ref, account):
        found = by_key.get(alias_key(candidate))
        if found is not None:
            return found
    return None


def index(items: Iterable[tuple[str, T]]) -> dict[str, T]:
    """``{alias_key(alias): item}``; an alias that differs from an earlier one only by case is
    not indexed over it (the earlier stays found)."""
    out: dict[str, T] = {}
    for alias, item in items:
        out.setdefault(alias_key(alias), item)
    return out


__all__ = [
    "DatasetAlias",
    "alias_key",
    "candidates",
    "find",
    "index",
    "is_hostname",
    "parse_alias",
    "qualify",
]
