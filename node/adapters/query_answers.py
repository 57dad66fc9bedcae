"""What the query engine adapters share about their worker processes: reading a worker's
answer (an Arrow IPC file) and watching a worker's resident memory (its process tree's,
:func:`node.engine_client.process_tree_rss`).

Used by :mod:`node.adapters.query_engine` (DataFusion workers) and
:mod:`node.adapters.spark_query` (the Spark worker).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from node.engine_client import process_tree_rss

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["TableStream", "read_answer", "read_answer_part", "watch_memory"]


def read_answer(path: Path) -> pa.Table:
    """The Arrow IPC file at ``path`` as a table, without copying it.

    The table's buffers are views of a memory map of the file; the caller may remove the file
    (and its directory) at once: on Linux a mapping keeps the file's pages until it is unmapped,
    which happens when the last buffer is freed. The chunks are kept as the worker wrote them:
    concatenating them would copy the whole answer (1.3 s for a 10M-row, 589 MiB answer on the
    development machine, where reading it this way takes 4 ms).
    """
    import pyarrow as pa

    with pa.memory_map(str(path)) as source:
        return pa.ipc.open_file(source).read_all()


def read_answer_part(path: Path) -> pa.Table:
    """One part of a streamed answer (an Arrow IPC stream) at ``path``, without copying it (the
    file may be removed at once, as with :func:`read_answer`)."""
    import pyarrow as pa

    with pa.memory_map(str(path)) as source:
        return pa.ipc.open_stream(source).read_all()


async def watch_memory(
    pid: int,
    bound: int,
    poll_s: float,
    *,
    in_thread: bool = False,
    tree_rss: Callable[[int], int] = process_tree_rss,
) -> None:
    """Returns when the resident memory of ``pid`` and its descendants (``tree_rss``) passes
    ``bound`` (never otherwise), looking every ``poll_s`` seconds; ``in_thread``: read ``/proc``
    in a thread (a JVM's process tree is larger)."""
    while True:
        await asyncio.sleep(poll_s)
        rss = await asyncio.to_thread(tree_rss, pid) if in_thread else tree_rss(pid)
        if rss > bound:
            return


class TableStream:
    """A whole answer given on as a stream (the Spark dialect's, the in-memory twin's)."""

    def __init__(self, table: pa.Table) -> None:
        self._schema = table.schema
        self._batches = deque(table.to_batches())

    @property
    def schema(self) -> pa.Schema:
        """See :class:`~node.app.ports.AnswerStream`."""
        return self._schema

    async def next_batch(self) -> pa.RecordBatch | None:
        """See :class:`~node.app.ports.AnswerStream`."""
        return self._batches.popleft() if self._batches else None

    async def close(self) -> None:
        """See :class:`~node.app.ports.AnswerStream`."""
        self._batches.clear()
