"""Optional compiled decoder of metadata blocks (``native/odf_chain.c``).

``make setup`` builds ``build/native/_odf_chain<suffix>.so``, a CPython extension module named
with the building interpreter's extension suffix (so another interpreter never loads it), when a
C compiler and the interpreter's headers are present. :mod:`coordinator.metadata.flatbuffers_serde`
configures it with tables generated from its own field specs and tries it first; it returns
``None`` for anything it does not decode itself (malformed input included), and the Python
decoder then decides, with its exact errors. When the module is absent (the image, a machine
without ``cc``) or ``ODF_NATIVE_CHAIN=0``, the Python decoder does everything and builds equal
objects (tests/unit/test_chain_native.py).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Final, Protocol, cast

from coordinator.metadata import model as m

_MODULE_NAME: Final = "_odf_chain"
_LIB_DIR: Final = Path(__file__).resolve().parents[2] / "build" / "native"
#: Environment switch: ``0`` forces the Python decoder.
ENV_SWITCH: Final = "ODF_NATIVE_CHAIN"


class NativeDecoder(Protocol):
    """The extension module's functions (see ``native/odf_chain.c``)."""

    def configure(
        self,
        tables: list[tuple[type, int, tuple[tuple[str, bool, int, object, object], ...]] | None],
        block_table: int,
        hash_type: tuple[type, object, object],
        sha3_code: object,
        arrow0_code: object,
        timestamp_type: tuple[type, object],
        did_type: tuple[type, object],
    ) -> None:
        """Install the decoding tables."""

    def decode_block(self, data: bytes) -> m.MetadataBlock | None:
        """The block of a manifest-wrapped buffer, or None (the Python decoder decides)."""

    def decode_content(self, inner: bytes) -> m.MetadataBlock | None:
        """The block of an inner ``MetadataBlock`` buffer, or None."""


def module_path() -> Path:
    """Where ``make setup`` puts the module for the running interpreter."""
    return _LIB_DIR / (_MODULE_NAME + importlib.machinery.EXTENSION_SUFFIXES[0])


def load(configure: Callable[[NativeDecoder], None]) -> NativeDecoder | None:
    """The extension module configured by ``configure``, or None when it is absent, disabled
    (``ODF_NATIVE_CHAIN=0``), stale or refuses the tables."""
    if os.environ.get(ENV_SWITCH, "1") == "0":
        return None
    path = module_path()
    if not path.is_file():
        return None
    try:
        spec = importlib.util.spec_from_file_location(_MODULE_NAME, path)
        if spec is None or spec.loader is None:
            return None
        module: ModuleType = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        decoder = cast(NativeDecoder, module)
        configure(decoder)
    except (ImportError, OSError, AttributeError, TypeError, ValueError, RuntimeError):
        # A stale or foreign build, or tables it does not accept: the Python decoder.
        return None
    return decoder
