"""Size limits shared by the gossip wire format and the transports that carry it.

A module of its own, with no imports: the libp2p process (``p2p/libp2p_child.py``) enforces
the cap on every message without loading the wire codec and the ODF core behind it.
"""

from __future__ import annotations

from typing import Final

MAX_MESSAGE_SIZE: Final = 4096
"""Hard cap on any envelope, including an EquivocationProof."""
