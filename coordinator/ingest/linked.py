"""Linked objects (RFC-017): ObjectLink columns, object storage and the AddData summary.

A column is an *ObjectLink* when its ODF schema field (RFC-016 ``DataSchema``, as in RFC-017's
examples) carries the extra attribute::

    extra:
      opendatafabric.org/type:
        kind: ObjectLink
        linkType:
          kind: Multihash

Its values are multibase multihashes (e.g. ``f1620…``) of objects stored next to the data
parts, under ``data/<multihash>``. ODF v0.34's read steps only carry DDL strings, so the caller
declares the link columns (:class:`LinkedObjects`, or :func:`link_columns_from_odf_schema` for
an RFC-016/017 field list).

Ingest mirrors kamu-cli HEAD (``DataWriterDataFusion::compute_linked_objects_summary``): only
top-level ``String`` columns may be links; after the slice is written, every non-null link in
it (all operation types) must name an object present in ``data/`` -- supplied with this ingest
or stored earlier -- or the ingest fails with :class:`DanglingObjectLink`. The summary counts
every reference ("naive": duplicates count again) and sums the referenced objects' sizes. It
goes into ``AddData.extra`` as ``{"opendatafabric.org/linkedObjects": {"numObjectsNaive": n,
"sizeNaive": s}}``, whenever the dataset has link columns.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import pyarrow as pa
import pyarrow.parquet as pq

from coordinator.errors import (
    DanglingObjectLink,
    InvalidMultihash,
    InvalidObjectLink,
    UnsupportedReadOption,
)
from coordinator.multiformats import Multicodec, Multihash
from coordinator.storage.objects import FsObjectRepository

__all__ = [
    "ATTR_LINKED_OBJECTS",
    "ATTR_TYPE",
    "LinkedObjects",
    "LinkedObjectsSummary",
    "extra_attributes_json",
    "link_columns_from_odf_schema",
    "store_objects",
    "summarize_links",
    "validate_link_columns",
]

#: Extra attribute holding a field's extended type.
ATTR_TYPE: Final = "opendatafabric.org/type"
#: Extra attribute of ``AddData`` holding the linked objects summary.
ATTR_LINKED_OBJECTS: Final = "opendatafabric.org/linkedObjects"
_READ_CHUNK: Final = 1 << 20


@dataclass(frozen=True, slots=True)
class LinkedObjects:
    """ObjectLink columns of the ingested data and the object files supplied with it."""

    columns: tuple[str, ...]
    objects: tuple[Path, ...] = field(default=())


@dataclass(frozen=True, slots=True)
class LinkedObjectsSummary:
    """kamu's ``LinkedObjectsSummary`` (duplicates are counted every time)."""

    num_objects_naive: int
    size_naive: int


def link_columns_from_odf_schema(fields: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    """Names of ObjectLink(Multihash) columns in an RFC-016 field list (``name``/``type``/
    ``extra``).

    Raises:
        UnsupportedReadOption: a link on a non-String or nested field, or a link type other
            than Multihash (kamu refuses those too).
    """
    out: list[str] = []
    for f in fields:
        name = str(f["name"])
        extra = f.get("extra") or {}
        ext = extra.get(ATTR_TYPE)
        core = (f.get("type") or {}).get("kind")
        if core == "Option":
            core = ((f.get("type") or {}).get("inner") or {}).get("kind")
        if not isinstance(ext, Mapping) or ext.get("kind") != "ObjectLink":
            if core == "Struct":
                nested = link_columns_from_odf_schema((f.get("type") or {}).get("fields") or [])
                if nested:
                    raise UnsupportedReadOption("Nested ObjectLink columns are not yet supported")
            continue
        link = ext.get("linkType") or {}
        if link.get("kind") != "Multihash":
            raise UnsupportedReadOption(f"Unsupported link type: {link!r}")
        if core != "String":
            raise UnsupportedReadOption("ObjectLink is only expected on String core type")
        out.append(name)
    return tuple(out)


def validate_link_columns(schema: pa.Schema, columns: Iterable[str]) -> None:
    """Link columns must be top-level string columns of ``schema``.

    Raises:
        UnsupportedReadOption: otherwise.
    """
    for c in columns:
        if c not in schema.names:
            raise UnsupportedReadOption(f"ObjectLink column {c!r} is not in the schema")
        t = schema.field(c).type
        if not (pa.types.is_string(t) or pa.types.is_large_string(t)):
            raise UnsupportedReadOption(
                f"ObjectLink column {c!r} has type {t}; ObjectLink is only expected on String"
            )


def _sha3_file(path: Path) -> Multihash:
    h = hashlib.sha3_256()
    with open(path, "rb") as f:
        while chunk := f.read(_READ_CHUNK):
            h.update(chunk)
    return Multihash(Multicodec.SHA3_256, h.digest())


def store_objects(repo: FsObjectRepository, paths: Iterable[Path]) -> list[Multihash]:
    """Store files as ``data/<sha3-256 multihash>`` (idempotent); returns their hashes."""
    out = []
    for p in paths:
        h = _sha3_file(p)
        repo.insert_file(p, h)
        out.append(h)
    return out


def summarize_links(
    slice_path: Path,
    columns: Sequence[str],
    repo: FsObjectRepository,
    *,
    offset_column: str = "offset",
) -> LinkedObjectsSummary:
    """Check every link in a written slice and summarise them.

    Raises:
        InvalidObjectLink: a value is not a multibase multihash.
        DanglingObjectLink: a referenced object is not in ``repo``.
    """
    count = 0
    size = 0
    known: dict[str, int] = {}
    pf = pq.ParquetFile(slice_path)
    for batch in pf.iter_batches(columns=[offset_column, *columns], batch_size=64 * 1024):
        offsets = batch.column(0)
        for i, name in enumerate(columns, start=1):
            col = batch.column(i)
            values = col.to_pylist()
            for row, link in enumerate(values):
                if link is None:
                    continue
                count += 1
                cached = known.get(link)
                if cached is not None:
                    size += cached
                    continue
                try:
                    h = Multihash.from_multibase(link)
                except InvalidMultihash as e:
                    raise InvalidObjectLink(
                        f"column {name!r} at offset {offsets[row].as_py()}: {link!r} is not a "
                        f"multibase multihash: {e}"
                    ) from None
                if not repo.contains(h):
                    raise DanglingObjectLink(
                        f"column {name!r} at offset {offsets[row].as_py()} links object {link} "
                        "which was not supplied (not found under data/)"
                    )
                known[link] = repo.size(h)
                size += known[link]
    return LinkedObjectsSummary(num_objects_naive=count, size_naive=size)


def extra_attributes_json(summary: LinkedObjectsSummary) -> str:
    """``AddData.extra`` entries as kamu serialises them (serde_json of a BTreeMap: compact,
    keys sorted, non-ASCII kept)."""
    return json.dumps(
        {
            ATTR_LINKED_OBJECTS: {
                "numObjectsNaive": summary.num_objects_naive,
                "sizeNaive": summary.size_naive,
            }
        },
        separators=(",", ":"),
        sort_keys=True,
        ensure_ascii=False,
    )
