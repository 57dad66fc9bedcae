"""Which linked objects (RFC-017) a pulled ``AddData`` references.

An ``AddData`` whose part has ObjectLink columns carries kamu's summary in ``extra``:
``{"opendatafabric.org/linkedObjects": {"numObjectsNaive": n, "sizeNaive": s}}`` -- every
non-null link counted (duplicates again) and the referenced objects' sizes summed. The objects
live next to the parts under ``data/<multihash>``.

ODF v0.34 blocks do not say *which* columns are links (the Arrow schema in ``SetDataSchema``
carries no ODF extended types, and ingest takes the link columns from the caller), so the pull
infers them from the verified part: a candidate is a top-level string column whose every
non-null value is a multibase sha3-256 multihash, and the chosen candidates' non-null values
must add up to ``numObjectsNaive`` exactly. After the objects are fetched and verified by
hash, their sizes (times their reference counts) must add up to ``sizeNaive``. A block whose
summary cannot be matched that way is rejected, naming the block.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from coordinator.errors import DecodeError
from coordinator.ingest.linked import ATTR_LINKED_OBJECTS
from coordinator.metadata import model as m
from coordinator.multiformats import Multicodec, Multihash

_MAX_SUBSET_COLUMNS = 12  # beyond this many candidate columns, only "all of them" is tried


@dataclass(frozen=True, slots=True)
class LinkSummary:
    """kamu's ``LinkedObjectsSummary`` as read from ``AddData.extra``."""

    num_objects_naive: int
    size_naive: int


class LinkSummaryError(DecodeError):
    """``AddData.extra`` holds a malformed linked-objects summary."""


def link_summary(event: m.MetadataEvent) -> LinkSummary | None:
    """The linked-objects summary of an ``AddData`` (``None``: it has none).

    Raises:
        LinkSummaryError: the attribute is present but malformed.
    """
    if not isinstance(event, m.AddData) or event.extra is None:
        return None
    try:
        entries = json.loads(event.extra.entries)
    except ValueError as e:
        raise LinkSummaryError(f"extra is not JSON: {e}") from e
    if not isinstance(entries, dict) or ATTR_LINKED_OBJECTS not in entries:
        return None
    raw = entries[ATTR_LINKED_OBJECTS]
    try:
        n, s = raw["numObjectsNaive"], raw["sizeNaive"]
    except (TypeError, KeyError) as e:
        raise LinkSummaryError(f"malformed {ATTR_LINKED_OBJECTS}: {raw!r}") from e
    if not (isinstance(n, int) and isinstance(s, int)) or n < 0 or s < 0:
        raise LinkSummaryError(f"malformed {ATTR_LINKED_OBJECTS}: {raw!r}")
    return LinkSummary(n, s)


def _link_candidates(part: Path) -> dict[str, Counter[Multihash]]:
    """Per top-level string column whose non-null values are all sha3-256 multihashes: the
    referenced hashes with their counts."""
    pf = pq.ParquetFile(part)
    names = [
        f.name
        for f in pf.schema_arrow
        if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)
    ]
    found: dict[str, Counter[Multihash]] = {n: Counter() for n in names}
    if not names:
        return found
    for batch in pf.iter_batches(columns=names, batch_size=64 * 1024):
        for i, name in enumerate(names):
            counts = found.get(name)
            if counts is None:
                continue  # already disqualified
            for v in batch.column(i).to_pylist():
                if v is None:
                    continue
                try:
                    h = Multihash.from_multibase(v)
                except (DecodeError, ValueError):
                    del found[name]
                    break
                if h.code != Multicodec.SHA3_256:
                    del found[name]
                    break
                counts[h] += 1
    return {n: c for n, c in found.items() if c}


def link_choices(part: Path, summary: LinkSummary) -> list[Counter[Multihash]]:
    """Possible sets of linked objects (hash -> reference count) of a verified part, best first.

    Each choice is a set of candidate columns whose non-null values number exactly
    ``summary.num_objects_naive``; usually there is exactly one. Empty list: none matches.

    Raises:
        DecodeError-like ``pyarrow`` errors when the part is not parquet (the caller maps them).
    """
    if summary.num_objects_naive == 0:
        return [Counter()]
    cands = _link_candidates(part)
    cols = sorted(cands)
    if len(cols) > _MAX_SUBSET_COLUMNS:
        subsets: list[tuple[str, ...]] = [tuple(cols)]
    else:
        subsets = [
            combo for r in range(1, len(cols) + 1) for combo in itertools.combinations(cols, r)
        ]
    out: list[Counter[Multihash]] = []
    for combo in subsets:
        if sum(cands[c].total() for c in combo) != summary.num_objects_naive:
            continue
        refs: Counter[Multihash] = Counter()
        for c in combo:
            refs.update(cands[c])
        out.append(refs)
    return out
