"""Load the ``flatbuffers`` runtime without numpy.

The runtime's numpy support is optional by its own design (``flatbuffers.compat.import_numpy``
returns ``None`` when numpy is absent) and serves only the ``*AsNumpy`` / ``CreateNumpyVector``
helpers, which odf-node never calls. But when numpy is merely *installed* (it is: pyarrow needs
it) the runtime imports it at module level, which costs an idle daemon about 15 MB of RSS
(issue 15: idle RSS within 150 MB). Loading the package here, with that one hook answering
"no numpy", keeps the bytes the runtime writes and reads identical (numpy never touches them)
and makes those helpers raise the runtime's own ``NumpyRequiredForThisFeature``.

``coordinator/__init__.py`` calls :func:`load` so that it runs before any module of the core
imports ``flatbuffers``. If something imported ``flatbuffers`` earlier, that copy is kept.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from types import ModuleType


def _no_numpy() -> None:
    """Stands in for ``flatbuffers.compat.import_numpy``: the numpy helpers stay unavailable."""
    return None


def load() -> ModuleType:
    """Import ``flatbuffers`` (once) with its numpy hook answering "not available"."""
    loaded = sys.modules.get("flatbuffers")
    if loaded is not None:
        return loaded
    spec = importlib.util.find_spec("flatbuffers")
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError("No module named 'flatbuffers'", name="flatbuffers")
    package = importlib.util.module_from_spec(spec)
    # Registered before its body runs (as the import system does), so that importing
    # ``flatbuffers.compat`` below runs only that submodule, not the package's __init__.
    sys.modules["flatbuffers"] = package
    try:
        compat = importlib.import_module("flatbuffers.compat")
        setattr(compat, "import_numpy", _no_numpy)  # noqa: B010 (untyped module)
        spec.loader.exec_module(package)
    except BaseException:
        for name in [m for m in sys.modules if m == "flatbuffers" or m.startswith("flatbuffers.")]:
            del sys.modules[name]
        raise
    return package
