"""The in-house JSON-schema subset used for RPC params and results."""

from __future__ import annotations

from typing import Any

import pytest

from node.rpc.schema import SchemaError, ValidationError, check_schema, validate

OBJ: dict[str, Any] = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 5, "pattern": "^[a-z]+$"},
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 2},
        "limit": {"type": "integer", "minimum": 1, "maximum": 10},
        "ratio": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
        "mode": {"enum": ["a", "b"]},
        "flag": {"type": ["boolean", "null"]},
        "one": {"const": 1},
    },
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    "value",
    [
        {"name": "ab"},
        {"name": "ab", "tags": ["x"], "limit": 10, "ratio": 0.5, "mode": "b", "flag": None},
        {"name": "ab", "flag": True, "limit": 3.0, "one": 1},
    ],
)
def test_valid_values_pass(value: Any) -> None:
    check_schema(OBJ)
    validate(OBJ, value)


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ([], ""),
        ({}, "name"),
        ({"name": 5}, "name"),
        ({"name": ""}, "name"),
        ({"name": "abcdef"}, "name"),
        ({"name": "AB"}, "name"),
        ({"name": "a", "tags": []}, "tags"),
        ({"name": "a", "tags": ["x", "y", "z"]}, "tags"),
        ({"name": "a", "tags": ["x", 1]}, "tags[1]"),
        ({"name": "a", "limit": 0}, "limit"),
        ({"name": "a", "limit": 11}, "limit"),
        ({"name": "a", "limit": 1.5}, "limit"),
        ({"name": "a", "limit": True}, "limit"),
        ({"name": "a", "ratio": 0}, "ratio"),
        ({"name": "a", "ratio": 1}, "ratio"),
        ({"name": "a", "ratio": float("nan")}, "ratio"),
        ({"name": "a", "mode": "c"}, "mode"),
        ({"name": "a", "flag": 0}, "flag"),
        ({"name": "a", "one": True}, "one"),
        ({"name": "a", "extra": 1}, "extra"),
    ],
)
def test_invalid_values_name_their_path(value: Any, path: str) -> None:
    with pytest.raises(ValidationError) as ei:
        validate(OBJ, value)
    assert ei.value.path == path


def test_nested_paths_and_additional_property_schema() -> None:
    schema = {
        "type": "object",
        "properties": {"inner": {"type": "object", "required": ["x"]}},
        "additionalProperties": {"type": "integer"},
    }
    validate(schema, {"inner": {"x": 1}, "n": 3})
    with pytest.raises(ValidationError) as ei:
        validate(schema, {"inner": {}}, "params")
    assert ei.value.path == "params.inner.x"
    with pytest.raises(ValidationError) as ei:
        validate(schema, {"n": "3"})
    assert ei.value.path == "n"


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "strnig"},
        {"type": []},
        {"oneOf": []},
        {"minimum": "1"},
        {"minLength": -1},
        {"pattern": "("},
        {"enum": []},
        {"properties": {"a": {"typo": 1}}},
        {"items": {"maxItem": 1}},
        {"required": "a"},
        {"additionalProperties": {"type": 1}},
        [],
    ],
)
def test_unsupported_or_malformed_schemas_are_rejected(schema: Any) -> None:
    with pytest.raises(SchemaError):
        check_schema(schema)
