"""Package attributes imported on first use (PEP 562), so light submodules stay light.

A package whose submodules import heavy libraries (pyarrow, numpy) lists each public name with the
submodule that defines it; importing the package, or one of its light submodules, then imports
none of the heavy ones until a name is used (an idle daemon stays small).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_attributes(
    package: str, names: Mapping[str, str], namespace: dict[str, Any]
) -> Callable[[str], Any]:
    """A module ``__getattr__`` importing ``names[name]`` on first use and caching the value."""

    def getattr_(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return getattr_
