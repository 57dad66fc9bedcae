"""The interface every pull source implements (:class:`Source`), and the defaults of a source
that reads one object at a time (:class:`SingleObjectSource`).

Its own module so that the sources (HTTP, IPFS and directories in
:mod:`node.transfer.sources`, libp2p streams in :mod:`node.transfer.streams`) import it
without importing each other.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Protocol

__all__ = ["SingleObjectSource", "Source"]


class Source(Protocol):
    """Read access to one dataset directory in kamu's layout."""

    description: str

    def open(self, rel: str) -> AbstractAsyncContextManager[AsyncIterator[bytes]]:
        """Stream the object at ``rel``; raises
        :class:`~node.transfer.errors.TransientSourceError`."""
        ...

    async def list_names(self, rel_dir: str) -> list[str] | None:
        """Entry names of a directory if the source can list them (``None``: it cannot)."""
        ...

    async def export_blocks(
        self, max_bytes: int, on_block: Callable[[bytes], None] | None = None
    ) -> list[bytes] | None:
        """Candidate contents of every ``blocks/`` file in one transfer, unverified (``None``:
        the source cannot do that cheaply; the pull then fetches blocks one by one).

        ``on_block`` is called with each candidate as soon as it arrives, so the caller can
        act on early blocks while the rest still stream.
        """
        ...

    async def close(self) -> None:
        """Release connections."""
        ...


class SingleObjectSource:
    """The part of a :class:`Source` that reads objects one at a time: it cannot list a
    directory nor export the blocks in bulk (both answer ``None``; the pull then fetches
    blocks one by one)."""

    async def list_names(self, rel_dir: str) -> list[str] | None:
        """No listing: ``None``."""
        return None

    async def export_blocks(
        self, max_bytes: int, on_block: Callable[[bytes], None] | None = None
    ) -> list[bytes] | None:
        """No bulk transfer: ``None``."""
        return None
