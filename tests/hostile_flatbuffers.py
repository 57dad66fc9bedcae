"""Hand-made FlatBuffers whose offsets share one object: the amplification shapes.

A FlatBuffers vector holds offsets, and nothing in the format stops N of them from pointing at the
same string or table. A builder never writes that (kamu's and ours create every object anew), but a
stranger can: a block of a few hundred KiB then names gigabytes of decoded text, and the block's
hash proves nothing because the block is named by it. These builders write such buffers directly,
front to back, so that the shapes can be made at any size (up to the 16 MiB block cap) in well
under a second, without a FlatBuffers builder that would refuse or be slow to write them.

Shapes (every one is otherwise a well-formed block or schema):

* :func:`flat_keywords_block`: ``SetInfo.keywords`` holds ``n`` offsets to one ``length``-byte
  string (decodes to ``n * length`` characters);
* :func:`nested_temporal_tables_block`: ``SetTransform``'s ``TransformSql.temporal_tables`` holds
  ``n`` offsets to one ``TemporalTable`` whose ``primary_key`` holds ``m`` offsets to one string
  (``n * m`` strings: quadratic in the block's size);
* :func:`dense_keywords_block`: the honest counterpart, ``n`` distinct strings and no sharing (what
  the largest legitimate block of tiny objects costs to decode);
* :func:`flat_fields_schema` / :func:`nested_struct_schema`: the same two shapes in a bare Arrow
  ``Schema`` FlatBuffer (``Schema.fields`` / ``Struct`` children sharing one ``Field``).
"""

from __future__ import annotations

import struct
from array import array

from coordinator.metadata.timestamp import Timestamp
from coordinator.multiformats import Multicodec

REF = None
"""A table field that is a uoffset, linked to its target later with :meth:`ForwardBuffer.link`."""

_SET_INFO = 8  # MetadataEvent union codes (coordinator.metadata.flatbuffers_serde.UNIONS)
_SET_TRANSFORM = 5
_TRANSFORM_SQL = 1
_ARROW_UTF8 = 5  # org.apache.arrow.flatbuf.Type codes
_ARROW_STRUCT = 13
_SYSTEM_TIME = Timestamp.parse("2024-01-01T00:00:00Z")


class ForwardBuffer:
    """A FlatBuffer written front to back.

    A uoffset is unsigned, so its target must lie after it: every object is written after the
    objects that refer to it and linked once placed. Each table's vtable sits just before it.
    """

    def __init__(self) -> None:
        self.buf = bytearray(4)  # the root uoffset, linked with link(0, root)

    def _align(self, n: int = 4) -> None:
        self.buf += bytes(-len(self.buf) % n)

    def table(self, nslots: int, fields: dict[int, bytes | None]) -> tuple[int, dict[int, int]]:
        """A table with ``fields`` (slot -> inline bytes, or :data:`REF`).

        Returns the table's position and the position of each field (to link the references).
        """
        layout: list[tuple[int, int]] = []  # (slot, offset in the table)
        size = 4  # the soffset to the vtable
        for slot, value in sorted(fields.items()):
            width = 4 if value is None else len(value)
            size += -size % min(width, 4)
            layout.append((slot, size))
            size += width
        size += -size % 4
        offsets = [0] * nslots
        for slot, off in layout:
            offsets[slot] = off
        vtable = struct.pack(f"<HH{nslots}H", 4 + 2 * nslots, size, *offsets)
        self._align()
        vt_pos = len(self.buf)
        self.buf += vtable
        self._align()
        t_pos = len(self.buf)
        body = bytearray(size)
        struct.pack_into("<i", body, 0, t_pos - vt_pos)
        positions = {}
        for slot, off in layout:
            value = fields[slot]
            if value is not None:
                body[off : off + len(value)] = value
            positions[slot] = t_pos + off
        self.buf += body
        return t_pos, positions

    def string(self, text: bytes) -> int:
        """A string (length, bytes, NUL); returns its position."""
        self._align()
        pos = len(self.buf)
        self.buf += struct.pack("<I", len(text)) + text + b"\0"
        return pos

    def ref_vector(self, count: int) -> int:
        """A vector of ``count`` uoffsets, filled later with :meth:`fill`; returns its position."""
        self._align()
        pos = len(self.buf)
        self.buf += struct.pack("<I", count) + bytes(4 * count)
        return pos

    def fill(self, vector: int, targets: list[int] | int) -> None:
        """Point the elements of ``vector`` at ``targets`` (one position: all share it)."""
        count = struct.unpack_from("<I", self.buf, vector)[0]
        first = vector + 4
        if isinstance(targets, int):
            values = array("I", range(targets - first, targets - first - 4 * count, -4))
        else:
            values = array("I", (t - (first + 4 * i) for i, t in enumerate(targets)))
        assert len(values) == count and (count == 0 or min(values) > 0)
        self.buf[first : first + 4 * count] = values.tobytes()

    def link(self, at: int, target: int) -> None:
        """Write at ``at`` the uoffset of ``target`` (which must come later)."""
        assert target > at
        struct.pack_into("<I", self.buf, at, target - at)

    def finish(self, root: int) -> bytes:
        """The buffer with its root set."""
        self.link(0, root)
        return bytes(self.buf)


def _ts() -> bytes:
    year, ordinal, seconds, nanos = _SYSTEM_TIME.to_parts()
    return struct.pack("<iHHII", year, ordinal, 0, seconds, nanos)


def _block(event_code: int) -> tuple[ForwardBuffer, int, int]:
    """A ``MetadataBlock`` table; returns the buffer, its root and the event value's field."""
    f = ForwardBuffer()
    root, at = f.table(5, {0: _ts(), 2: struct.pack("<Q", 0), 3: bytes([event_code]), 4: REF})
    return f, root, at[4]


def manifest(inner: bytes, version: int = 2) -> bytes:
    """Wrap an inner ``MetadataBlock`` buffer as a block manifest (kind, version, content)."""
    f = ForwardBuffer()
    root, at = f.table(
        3,
        {
            0: struct.pack("<q", int(Multicodec.ODF_METADATA_BLOCK)),
            1: struct.pack("<i", version),
            2: REF,
        },
    )
    f._align()
    content = len(f.buf)
    f.buf += struct.pack("<I", len(inner)) + inner
    f.link(at[2], content)
    return f.finish(root)


def flat_keywords_block(n: int, length: int) -> bytes:
    """``SetInfo.keywords``: ``n`` offsets to one string of ``length`` bytes."""
    f, root, event = _block(_SET_INFO)
    info, at = f.table(2, {1: REF})
    f.link(event, info)
    keywords = f.ref_vector(n)
    f.link(at[1], keywords)
    f.fill(keywords, f.string(b"k" * length))
    return manifest(f.finish(root))


def nested_temporal_tables_block(n: int, m: int, length: int = 1) -> bytes:
    """``temporal_tables``: ``n`` offsets to one table whose ``primary_key`` holds ``m`` offsets
    to one string of ``length`` bytes."""
    f, root, event = _block(_SET_TRANSFORM)
    transform, at = f.table(3, {0: REF, 1: bytes([_TRANSFORM_SQL]), 2: REF})
    f.link(event, transform)
    inputs = f.ref_vector(0)
    f.link(at[0], inputs)
    sql, sql_at = f.table(5, {0: REF, 4: REF})
    f.link(at[2], sql)
    f.link(sql_at[0], f.string(b"spark"))
    tables = f.ref_vector(n)
    f.link(sql_at[4], tables)
    table, t_at = f.table(2, {0: REF, 1: REF})
    f.fill(tables, table)
    f.link(t_at[0], f.string(b"t"))
    key = f.ref_vector(m)
    f.link(t_at[1], key)
    f.fill(key, f.string(b"c" * length))
    return manifest(f.finish(root))


def dense_keywords_block(n: int, length: int = 1) -> bytes:
    """``SetInfo.keywords``: ``n`` distinct strings of ``length`` bytes (no sharing: honest)."""
    f, root, event = _block(_SET_INFO)
    info, at = f.table(2, {1: REF})
    f.link(event, info)
    keywords = f.ref_vector(n)
    f.link(at[1], keywords)
    f.fill(keywords, [f.string(b"%0*d" % (length, i % 10**length)) for i in range(n)])
    return manifest(f.finish(root))


def _field(f: ForwardBuffer, type_code: int, name: bytes) -> tuple[int, dict[int, int]]:
    """An Arrow ``Field`` (name, type_type, type, children); links name and type table."""
    field, at = f.table(7, {0: REF, 2: bytes([type_code]), 3: REF, 5: REF})
    f.link(at[0], f.string(name))
    type_table, _ = f.table(0, {})
    f.link(at[3], type_table)
    return field, at


def flat_fields_schema(n: int, length: int) -> bytes:
    """``Schema.fields``: ``n`` offsets to one Utf8 ``Field`` named by ``length`` bytes."""
    f = ForwardBuffer()
    root, at = f.table(4, {1: REF})
    fields = f.ref_vector(n)
    f.link(at[1], fields)
    field, f_at = _field(f, _ARROW_UTF8, b"f" * length)
    f.fill(fields, field)
    f.link(f_at[5], f.ref_vector(0))
    return f.finish(root)


def nested_struct_schema(n: int, m: int) -> bytes:
    """One Struct field with ``n`` offsets to one Struct child, itself with ``m`` offsets to one
    Utf8 grandchild (``n * m`` fields)."""
    f = ForwardBuffer()
    root, at = f.table(4, {1: REF})
    fields = f.ref_vector(1)
    f.link(at[1], fields)
    top, top_at = _field(f, _ARROW_STRUCT, b"s")
    f.fill(fields, top)
    children = f.ref_vector(n)
    f.link(top_at[5], children)
    child, child_at = _field(f, _ARROW_STRUCT, b"c")
    f.fill(children, child)
    grandchildren = f.ref_vector(m)
    f.link(child_at[5], grandchildren)
    leaf, leaf_at = _field(f, _ARROW_UTF8, b"x")
    f.fill(grandchildren, leaf)
    f.link(leaf_at[5], f.ref_vector(0))
    return f.finish(root)


def dense_fields_schema(n: int) -> bytes:
    """``n`` distinct Utf8 fields with 2-byte names (no sharing: honest, ~64 bytes a field)."""
    f = ForwardBuffer()
    root, at = f.table(4, {1: REF})
    fields = f.ref_vector(n)
    f.link(at[1], fields)
    targets = []
    for i in range(n):
        field, f_at = _field(f, _ARROW_UTF8, b"%02d" % (i % 100))
        f.link(f_at[5], f.ref_vector(0))
        targets.append(field)
    f.fill(fields, targets)
    return f.finish(root)


def shared_paths_raw_query(n: int, length: int) -> bytes:
    """An engine ``RawQueryRequest`` whose ``input_data_paths`` holds ``n`` offsets to one path
    of ``length`` bytes."""
    f = ForwardBuffer()
    root, at = f.table(4, {0: REF, 1: bytes([_TRANSFORM_SQL]), 2: REF, 3: REF})
    paths = f.ref_vector(n)
    f.link(at[0], paths)
    sql, sql_at = f.table(5, {0: REF})
    f.link(at[2], sql)
    f.link(sql_at[0], f.string(b"spark"))
    f.link(at[3], f.string(b"/out.parquet"))
    f.fill(paths, f.string(b"/" + b"p" * (length - 1)))
    return f.finish(root)
