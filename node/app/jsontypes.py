"""JSON values as the ports carry them: what an event, a status or a pull summary may hold.

A port never says ``Any``: what crosses it is either a typed row or result, or one of these.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeAlias

JsonValue: TypeAlias = "bool | int | float | str | list[JsonValue] | dict[str, JsonValue] | None"
"""A value that encodes as JSON (``json.dumps`` without a ``default``)."""

JsonObject: TypeAlias = dict[str, JsonValue]
"""A JSON object, as a port returns it."""

JsonFields: TypeAlias = Mapping[str, object]
"""A JSON object as a port accepts it: any mapping of names to JSON-encodable values.

``object`` and not :data:`JsonValue` for the values, so that typed dicts and results'
``to_json()`` dicts pass without casts; the adapters encode them with ``json.dumps``.
"""

__all__ = ["JsonFields", "JsonObject", "JsonValue"]
