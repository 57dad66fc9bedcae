"""A tiny in-house JSON-schema validator for RPC params and results.

Supports exactly the subset the RPC layer documents: ``type`` (one or a list), ``enum``,
``const``, ``minimum`` / ``maximum`` / ``exclusiveMinimum`` / ``exclusiveMaximum``,
``minLength`` / ``maxLength`` / ``pattern``, ``items`` / ``minItems`` / ``maxItems``,
``properties`` / ``required`` / ``additionalProperties`` (``false`` or a schema), plus the
annotation keywords ``description``, ``title``, ``default``, ``examples`` and ``format``
(not checked). :func:`check_schema` rejects any other keyword at registration time, so a typo
in a method's spec fails loudly instead of silently validating nothing.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from coordinator.errors import OdfNodeError

Schema = Mapping[str, Any]
"""A JSON schema (the supported subset), as a plain mapping."""


@dataclass(frozen=True, slots=True)
class Param:
    """One named parameter of an RPC method: its JSON schema, whether it is required, and a
    description (what ``rpc.discover`` publishes; the registry validates calls against it)."""

    name: str
    schema: Schema = field(default_factory=dict)
    required: bool = True
    description: str = ""


_TYPES = frozenset({"null", "boolean", "integer", "number", "string", "array", "object"})
_CHECKED = frozenset(
    {
        "type",
        "enum",
        "const",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "minLength",
        "maxLength",
        "pattern",
        "items",
        "minItems",
        "maxItems",
        "properties",
        "required",
        "additionalProperties",
    }
)
_ANNOTATIONS = frozenset({"description", "title", "default", "examples", "format"})


class SchemaError(OdfNodeError, ValueError):
    """A schema itself is malformed or uses an unsupported keyword (a programming error)."""


class ValidationError(OdfNodeError):
    """A value does not match a schema; ``path`` locates it (e.g. ``"limit"``, ``"tags[2]"``)."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path
        self.detail = message


def check_schema(schema: Schema, path: str = "#") -> None:
    """Raise :class:`SchemaError` if ``schema`` uses keywords or values outside the subset."""
    if not isinstance(schema, Mapping):
        raise SchemaError(f"{path}: a schema must be an object")
    for key, value in schema.items():
        if key in _ANNOTATIONS:
            continue
        if key not in _CHECKED:
            raise SchemaError(f"{path}: unsupported schema keyword {key!r}")
        if key == "type":
            names = value if isinstance(value, list) else [value]
            if not names or any(n not in _TYPES for n in names):
                raise SchemaError(f"{path}: bad type {value!r}")
        elif key == "enum":
            if not isinstance(value, list) or not value:
                raise SchemaError(f"{path}: enum must be a non-empty list")
        elif key in {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}:
            if not _is_number(value):
                raise SchemaError(f"{path}: {key} must be a number")
        elif key in {"minLength", "maxLength", "minItems", "maxItems"}:
            if not _is_integer(value) or value < 0:
                raise SchemaError(f"{path}: {key} must be a non-negative integer")
        elif key == "pattern":
            try:
                re.compile(value)
            except (re.error, TypeError) as exc:
                raise SchemaError(f"{path}: bad pattern {value!r}: {exc}") from exc
        elif key == "items":
            check_schema(value, f"{path}/items")
        elif key == "properties":
            if not isinstance(value, Mapping):
                raise SchemaError(f"{path}: properties must be an object")
            for name, sub in value.items():
                check_schema(sub, f"{path}/properties/{name}")
        elif key == "required":
            if not isinstance(value, list) or not all(isinstance(n, str) for n in value):
                raise SchemaError(f"{path}: required must be a list of names")
        elif key == "additionalProperties" and value is not True and value is not False:
            check_schema(value, f"{path}/additionalProperties")


_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1


def _is_integer(v: Any) -> bool:
    # bool is an int subclass in Python but not an integer in JSON.
    return (isinstance(v, int) and not isinstance(v, bool)) or (
        isinstance(v, float) and math.isfinite(v) and v.is_integer()
    )


def _is_number(v: Any) -> bool:
    return (isinstance(v, int) and not isinstance(v, bool)) or (
        isinstance(v, float) and math.isfinite(v)
    )


def _type_matches(name: str, v: Any) -> bool:
    if name == "null":
        return v is None
    if name == "boolean":
        return isinstance(v, bool)
    if name == "integer":
        return _is_integer(v)
    if name == "number":
        return _is_number(v)
    if name == "string":
        return isinstance(v, str)
    if name == "array":
        return isinstance(v, list)
    return isinstance(v, dict)  # "object"


def _json_type(v: Any) -> str:
    for name in ("null", "boolean", "integer", "number", "string", "array", "object"):
        if _type_matches(name, v):
            return name
    return type(v).__name__


def _equal(a: Any, b: Any) -> bool:
    # JSON equality: True != 1 although Python says otherwise.
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return bool(a == b)


def validate(schema: Schema, value: Any, path: str = "") -> None:
    """Raise :class:`ValidationError` (naming the offending location) if ``value`` fails."""
    typ = schema.get("type")
    if typ is not None:
        names = typ if isinstance(typ, list) else [typ]
        if not any(_type_matches(n, value) for n in names):
            raise ValidationError(path, f"expected {' or '.join(names)}, got {_json_type(value)}")
    if "const" in schema and not _equal(schema["const"], value):
        raise ValidationError(path, f"must be {schema['const']!r}")
    if "enum" in schema and not any(_equal(e, value) for e in schema["enum"]):
        raise ValidationError(path, f"must be one of {schema['enum']!r}")
    if _is_number(value):
        if _is_integer(value) and not _INT64_MIN <= value <= _INT64_MAX:
            # Every integer the node stores or compares is a signed 64-bit one (SQLite, Arrow).
            raise ValidationError(path, "integer out of the signed 64-bit range")
        _check_bounds(schema, value, path)
    elif isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            raise ValidationError(path, f"shorter than {schema['minLength']} characters")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            raise ValidationError(path, f"longer than {schema['maxLength']} characters")
        if "pattern" in schema and re.search(schema["pattern"], value) is None:
            raise ValidationError(path, f"does not match pattern {schema['pattern']!r}")
    elif isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            raise ValidationError(path, f"fewer than {schema['minItems']} items")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            raise ValidationError(path, f"more than {schema['maxItems']} items")
        items = schema.get("items")
        if items is not None:
            for i, item in enumerate(value):
                validate(items, item, f"{path}[{i}]")
    elif isinstance(value, dict):
        _check_object(schema, value, path)


def _check_bounds(schema: Schema, value: float, path: str) -> None:
    if "minimum" in schema and value < schema["minimum"]:
        raise ValidationError(path, f"less than minimum {schema['minimum']}")
    if "maximum" in schema and value > schema["maximum"]:
        raise ValidationError(path, f"greater than maximum {schema['maximum']}")
    if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
        raise ValidationError(path, f"not greater than {schema['exclusiveMinimum']}")
    if "exclusiveMaximum" in schema and value >= schema["exclusiveMaximum"]:
        raise ValidationError(path, f"not less than {schema['exclusiveMaximum']}")


def _check_object(schema: Schema, value: dict[Any, Any], path: str) -> None:
    def sub(name: str) -> str:
        return f"{path}.{name}" if path else name

    for name in schema.get("required", ()):
        if name not in value:
            raise ValidationError(sub(name), "required property is missing")
    props: Mapping[str, Any] = schema.get("properties", {})
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        if name in props:
            validate(props[name], item, sub(str(name)))
        elif extra is False:
            raise ValidationError(sub(str(name)), "unexpected property")
        elif extra is not True:
            validate(extra, item, sub(str(name)))
