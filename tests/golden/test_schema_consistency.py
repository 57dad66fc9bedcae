"""The encoder's field specs must describe exactly the tables of ``schemas/odf.fbs`` (v0.39.0).

Parses the committed schema and checks, for every table the encoder knows: field names, their
order (which fixes vtable slots), wire kinds, optional-scalar markers, and union membership in
type-code order. A mismatch here would silently change block bytes. Also checks that the
v0.34.0 schema (``schemas/odf-v0.34.fbs``) is slot-compatible with it: a v0.34 block decodes
and re-encodes with the same bytes.
"""

from __future__ import annotations

import re
from pathlib import Path

from coordinator.metadata.flatbuffers_serde import _K, SPECS, UNIONS

FBS = Path(__file__).parents[2] / "schemas" / "odf.fbs"
FBS_V034 = Path(__file__).parents[2] / "schemas" / "odf-v0.34.fbs"
ENUMS = {"DatasetKind", "SourceOrdering", "CompressionFormat", "MqttQos"}
ENUMS16 = {"TimeUnit"}


def parse_fbs(
    path: Path = FBS,
) -> tuple[dict[str, list[tuple[str, str]]], dict[str, list[str]]]:
    text = re.sub(r"//[^\n]*", "", path.read_text())
    text = re.sub(r"\(id:\s*\d+\)", "", text)  # explicit ids equal the declaration order
    tables: dict[str, list[tuple[str, str]]] = {}
    unions: dict[str, list[str]] = {}
    for kind, name, body in re.findall(
        r"\b(table|union|struct|enum)\s+(\w+)[^{]*\{([^}]*)\}", text
    ):
        if kind == "table":
            fields = re.findall(r"(\w+)\s*:\s*([^;]+);", body)
            tables[name] = [(f, t.strip()) for f, t in fields]
        elif kind == "union":
            unions[name] = [m.strip() for m in body.split(",") if m.strip()]
    return tables, unions


def expected_kind(
    fbs_type: str, unions: dict[str, list[str]], tables: dict[str, object]
) -> set[_K]:
    t = fbs_type.replace(" ", "")
    if t == "string":
        return {_K.STR}
    if t == "[ubyte]":
        return {_K.HASH, _K.DID, _K.BYTES}
    if t == "[string]":
        return {_K.STRS}
    if t == "uint64":
        return {_K.U64}
    if t == "uint32":
        return {_K.U32}
    if t == "int32":
        return {_K.I32}
    if t.removesuffix("=null") in ENUMS16:
        return {_K.ENUM16_OPT}
    if t == "uint64=null":
        return {_K.U64_OPT}
    if t == "bool=null":
        return {_K.BOOL_OPT}
    if t == "Timestamp":
        return {_K.TS}
    if t in ENUMS:
        return {_K.ENUM}
    if t.removesuffix("=null") in ENUMS:
        return {_K.ENUM_OPT}
    if t == "[PrepStepWrapper]":
        return {_K.PREP_VEC}
    if t in unions:
        return {_K.UNION}
    if t.startswith("[") and t[1:-1] in tables:
        return {_K.TABLES}
    if t in tables:
        return {_K.TABLE}
    raise AssertionError(f"unknown fbs type {fbs_type}")


def test_specs_match_fbs() -> None:
    tables, unions = parse_fbs()
    assert len(SPECS) >= 78
    for cls, spec in SPECS.items():
        name = cls.__name__
        assert name in tables, f"{name} is not a table of odf.fbs"
        fbs_fields = tables[name]
        assert [f.name for f in spec.fields] == [n for n, _ in fbs_fields], name
        for f, (_, fbs_type) in zip(spec.fields, fbs_fields, strict=True):
            assert f.kind in expected_kind(fbs_type, unions, tables), (name, f.name, fbs_type)
            if f.kind is _K.UNION:
                assert f.arg == fbs_type.strip(), (name, f.name)


def test_unions_match_fbs() -> None:
    _, unions = parse_fbs()
    for name, members in UNIONS.items():
        assert [c.__name__ for c in members] == unions[name], name


def test_every_metadata_table_is_covered() -> None:
    tables, _ = parse_fbs()
    engine_only = {
        n
        for n in tables
        if n.startswith(("RawQuery", "TransformRequest", "TransformResponse"))
        or n in {"Watermark", "DatasetVocabulary", "Manifest", "PrepStepWrapper"}
    }
    covered = {c.__name__ for c in SPECS}
    assert set(tables) - engine_only - covered == set()


def test_v034_schema_is_slot_compatible() -> None:
    """Every v0.34 field keeps its slot and wire type; later versions only append or rename."""
    old_tables, old_unions = parse_fbs(FBS_V034)
    tables, unions = parse_fbs()
    renamed = {("SetDataSchema", "schema"): "raw_arrow_schema"}
    renamed |= {(t, "schema"): "ddl_schema" for t in old_tables if t.startswith("ReadStep")}
    for name, fields in old_tables.items():
        new = tables[name]
        assert len(new) >= len(fields), name
        for (old_name, old_type), (new_name, new_type) in zip(fields, new, strict=False):
            assert renamed.get((name, old_name), old_name) == new_name, (name, old_name)
            assert old_type.replace(" ", "") == new_type.replace(" ", ""), (name, old_name)
    for name, members in old_unions.items():
        assert unions[name][: len(members)] == members, name
