"""``DatasetSnapshot``: the user-written description of a new dataset (kamu RFC-013 YAML).

A snapshot is a manifest ``kind: DatasetSnapshot``, ``version: 1`` whose ``content`` holds the
dataset ``name`` (an alias: ``name`` or ``account/name``), its ``kind`` (``Root`` /
``Derivative``) and ``metadata``, a list of events in the same YAML form as in blocks (see
:mod:`coordinator.metadata.yaml_serde`). Turning a snapshot into a chain (Seed generation, event
checks, transform normalisation) is not done here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

from coordinator.errors import DecodeError, EncodeError
from coordinator.metadata import model as m
from coordinator.metadata import yaml_serde as ys

KIND_DATASET_SNAPSHOT: Final = "DatasetSnapshot"
DATASET_SNAPSHOT_VERSION: Final = 1

# kamu Grammar: DatasetAlias = (AccountName "/")? DatasetName; both are Hostname, where
# Hostname = Subdomain ("." Subdomain)* and Subdomain = [a-zA-Z0-9]+ ("-" [a-zA-Z0-9]+)*.
_SUBDOMAIN: Final = r"[A-Za-z0-9]+(?:-[A-Za-z0-9]+)*"
_HOSTNAME: Final = rf"{_SUBDOMAIN}(?:\.{_SUBDOMAIN})*"
_DATASET_ALIAS: Final = re.compile(rf"(?:{_HOSTNAME}/)?{_HOSTNAME}", re.ASCII)
_KINDS: Final = {
    "Root": m.DatasetKind.ROOT,
    "root": m.DatasetKind.ROOT,
    "Derivative": m.DatasetKind.DERIVATIVE,
    "derivative": m.DatasetKind.DERIVATIVE,
}
_KIND_NAMES: Final = {m.DatasetKind.ROOT: "Root", m.DatasetKind.DERIVATIVE: "Derivative"}
_CONTENT_KEYS: Final = ("name", "kind", "metadata")


def is_dataset_alias(text: str) -> bool:
    """Whether ``text`` is a valid dataset alias (``name`` or ``account/name``) per kamu."""
    return _DATASET_ALIAS.fullmatch(text) is not None


@dataclass(frozen=True, slots=True, kw_only=True)
class DatasetSnapshot:
    """A dataset to be created: alias, kind and the metadata events to apply after the Seed."""

    name: str
    kind: m.DatasetKind
    metadata: tuple[m.MetadataEvent, ...]


def snapshot_to_dict(snapshot: DatasetSnapshot) -> dict[str, Any]:
    """The ``content`` of the snapshot manifest as plain data (``name``, ``kind``, ``metadata``).

    Raises:
        EncodeError: invalid name, kind or events.
    """
    if not isinstance(snapshot, DatasetSnapshot):
        raise EncodeError(f"expected DatasetSnapshot, got {type(snapshot).__name__}")
    if not isinstance(snapshot.name, str) or not is_dataset_alias(snapshot.name):
        raise EncodeError(f"content.name: {snapshot.name!r} is not a valid dataset alias")
    if snapshot.kind not in _KIND_NAMES:
        raise EncodeError(f"content.kind: {snapshot.kind!r} is not a DatasetKind")
    return {
        "name": snapshot.name,
        "kind": _KIND_NAMES[m.DatasetKind(snapshot.kind)],
        "metadata": [ys.event_to_dict(e) for e in snapshot.metadata],
    }


def snapshot_from_dict(data: Any, path: str = "content") -> DatasetSnapshot:
    """Build a snapshot from plain data (the manifest ``content``).

    Raises:
        DecodeError: naming the offending field path (e.g. ``content.metadata[0].fetch.kind``).
    """
    if not isinstance(data, dict):
        raise DecodeError(f"{path}: invalid type, expected a mapping")
    for key in data:
        if key not in _CONTENT_KEYS:
            raise DecodeError(f"{path}.{key}: unknown field, expected one of: name, kind, metadata")
    for key in _CONTENT_KEYS:
        if data.get(key) is None:
            raise DecodeError(f"{path}.{key}: missing field")
    name, kind, metadata = data["name"], data["kind"], data["metadata"]
    if not isinstance(name, str):
        raise DecodeError(f"{path}.name: invalid type, expected a string")
    if not is_dataset_alias(name):
        raise DecodeError(f"{path}.name: {name!r} is not a valid dataset alias")
    if not isinstance(kind, str) or kind not in _KINDS:
        raise DecodeError(f"{path}.kind: unknown variant {kind!r}, expected Root or Derivative")
    if not isinstance(metadata, list):
        raise DecodeError(f"{path}.metadata: invalid type, expected a sequence")
    events = tuple(ys.event_from_dict(e, f"{path}.metadata[{i}]") for i, e in enumerate(metadata))
    return DatasetSnapshot(name=name, kind=_KINDS[kind], metadata=events)


def snapshot_to_yaml(snapshot: DatasetSnapshot) -> str:
    """kamu's YAML text of a snapshot (``kind: DatasetSnapshot``, ``version: 1``)."""
    content = snapshot_to_dict(snapshot)
    return ys.write_manifest(KIND_DATASET_SNAPSHOT, DATASET_SNAPSHOT_VERSION, content)


def _from_manifest(doc: Any) -> DatasetSnapshot:
    version, content = ys.check_manifest(doc, KIND_DATASET_SNAPSHOT)
    if version != DATASET_SNAPSHOT_VERSION:
        raise DecodeError(f"version: unsupported DatasetSnapshot manifest version {version}")
    return snapshot_from_dict(content, "content")


def snapshot_from_yaml(text: str | bytes) -> DatasetSnapshot:
    """Parse one ``DatasetSnapshot`` manifest.

    Raises:
        DecodeError: malformed YAML, wrong kind or version, invalid content (with field path).
    """
    return _from_manifest(ys.load_yaml(text))


def snapshots_from_yaml(text: str | bytes) -> list[DatasetSnapshot]:
    """Parse a multi-document YAML stream of snapshots (``kamu add`` accepts such files).

    Raises:
        DecodeError: as :func:`snapshot_from_yaml` (naming the 1-based document when there are
            several), or no document at all (empty or comment-only text): a file that creates
            nothing is a mistake, not a success.
    """
    docs = ys.load_yaml_all(text)
    if not docs:
        raise DecodeError("no DatasetSnapshot in the YAML text (it is empty or only comments)")
    if len(docs) == 1:
        return [_from_manifest(docs[0])]
    out = []
    for number, doc in enumerate(docs, start=1):
        try:
            out.append(_from_manifest(doc))
        except DecodeError as e:
            raise DecodeError(f"document {number} of {len(docs)}: {e}") from e
    return out


__all__ = [
    "DATASET_SNAPSHOT_VERSION",
    "KIND_DATASET_SNAPSHOT",
    "DatasetSnapshot",
    "is_dataset_alias",
    "snapshot_from_dict",
    "snapshot_from_yaml",
    "snapshot_to_dict",
    "snapshot_to_yaml",
    "snapshots_from_yaml",
]
