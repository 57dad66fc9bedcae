"""The data plane: logical and physical hashes of ODF data slices.

This package is the public face of :mod:`coordinator.data.hashing`: its names are the ones that
module declares in its ``__all__``, the one list of them.
"""

from coordinator.data.hashing import *  # noqa: F403 - hashing's __all__ is the package's API
from coordinator.data.hashing import __all__ as __all__
