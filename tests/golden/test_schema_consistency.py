"""The encoder's field specs must describe exactly the tables of ``schemas/odf.fbs`` (v0.34.0).

Parses the committed schema and checks, for every table the encoder knows: field names, their
order (which fixes vtable slots), wire kinds, optional-scalar markers, and union membership in
type-code order. A mismatch here would silently change block bytes.
"""

from __future__ import annotations

import re
from pathlib import Path

from coordinator.metadata.flatbuffers_serde import _K, SPECS, UNIONS

FBS = Path(__file__).parents[2] / "schemas" / "odf.fbs"
ENUMS = {"DatasetKind", "SourceOrdering", "CompressionFormat"}
# Deliberate extensions beyond v0.34, as kamu's later schema appends them (absent = v0.34 bytes):
# AddData.extra (slot 6) and its table, used only for RFC-017 linked objects.
EXTENSION_TABLES = {"ExtraAttributes": [("entries", "string")]}
EXTENSION_FIELDS = {"AddData": [("extra", "ExtraAttributes")]}


def parse_fbs() -> tuple[dict[str, list[tuple[str, str]]], dict[str, list[str]]]:
    text = re.sub(r"//[^\n]*", "", FBS.read_text())
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
    tables.update(EXTENSION_TABLES)
    for name, extra in EXTENSION_FIELDS.items():
        tables[name] = tables[name] + extra
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
    assert len(SPECS) >= 45
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
