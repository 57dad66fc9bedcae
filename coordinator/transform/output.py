"""The files an engine leaves for one transform step, and how odf-node's own engines hand a
replay its output.

kamu's engines write the step's data as one Parquet file at ``new_data_path``. A replay only
compares the output's logical hash with the published one, so the Parquet file it would write
is thrown away unread in the common case, and the worker (the replay's bottleneck) would also
spend the time to hash it. odf-node's own DataFusion workers are therefore asked
(``TransformRequest.arrow_output``) to leave the output as an **Arrow IPC file** at
:func:`arrow_output_path` instead: writing it costs the worker a memory copy (0.02 ms for a
1,000-row block against ~0.5 ms for the Parquet file and ~0.45 ms for the hash, measured on
the development machine), and the node, which waits for the worker most of the time, maps it
and hashes it (:func:`hash_arrow_output`) as the Parquet file would hash. When that hash differs
from the published one, the node writes the Parquet file from the same data
(:func:`write_parquet_output`, the worker's writer options) and judges by that file's own hash,
so a mismatch, and the evidence a dispute carries, rests on a file as kamu would read it.
"""

from __future__ import annotations

import functools
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

    from coordinator.multiformats import Multihash

ARROW_SUFFIX = ".arrow"
ARROW_OUTPUT_MAX_BYTES = 64 << 20
"""Outputs larger than this (Arrow's in-memory size) are written as Parquet even when a replay
asks for Arrow: an IPC file is uncompressed, so it would take several times the scratch space
of the Parquet file, and the node hashes a Parquet file batch by batch in bounded memory rather
than as one table."""


def arrow_output_path(new_data_path: Path) -> Path:
    """Where an engine asked for ``arrow_output`` leaves the step's data."""
    return new_data_path.with_name(new_data_path.name + ARROW_SUFFIX)


def write_parquet_output(table: pa.Table, sink: Any) -> None:
    """A transform's Parquet output as odf-node's engines write it: snappy, data pages v1,
    dictionary encoding, no embedded Arrow schema (``sink``: a path or an Arrow stream)."""
    import pyarrow.parquet as pq

    pq.write_table(
        table,
        sink,
        compression="snappy",
        data_page_version="1.0",
        use_dictionary=True,
        store_schema=False,
    )


def write_arrow_output(table: pa.Table, path: Path) -> None:
    """The step's data as an Arrow IPC file (the engine's side of ``arrow_output``)."""
    import pyarrow as pa

    path.parent.mkdir(parents=True, exist_ok=True)
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)


def read_arrow_output(path: Path) -> pa.Table:
    """The Arrow IPC file an engine left at ``path``, memory-mapped and fully validated (it
    comes from the process that runs a stranger's SQL).

    Raises:
        pyarrow.ArrowInvalid: not a well-formed IPC file.
    """
    import pyarrow as pa

    with pa.memory_map(str(path)) as source:
        table = pa.ipc.open_file(source).read_all()
    table.validate(full=True)
    return table


@functools.cache
def _output_hasher() -> Any:
    # One per process: it remembers the footer schema of each table schema it has seen.
    from coordinator.data import WrittenFileHasher

    return WrittenFileHasher(write=write_parquet_output)


def hash_arrow_output(table: pa.Table) -> Multihash | None:
    """The logical hash of the Parquet file :func:`write_parquet_output` would make of
    ``table``, computed without writing it (``None``: only the file can tell, e.g. struct
    columns; see ``coordinator.data.WrittenFileHasher``)."""
    result: Multihash | None = _output_hasher().hash(table)
    return result


def remove_outputs(new_data_path: Path, new_checkpoint_path: Path) -> None:
    """Remove what an engine may have left for one step (files or directories): the data, the
    Arrow IPC file next to it, the checkpoint."""
    for q in (new_data_path, arrow_output_path(new_data_path), new_checkpoint_path):
        # Unlink first: one system call for the usual case (a file, or nothing).
        try:
            q.unlink()
        except FileNotFoundError:
            pass
        except (IsADirectoryError, PermissionError):  # PermissionError: BSD's EPERM
            if not q.is_dir():
                raise
            shutil.rmtree(q, ignore_errors=True)


__all__ = [
    "ARROW_OUTPUT_MAX_BYTES",
    "ARROW_SUFFIX",
    "arrow_output_path",
    "hash_arrow_output",
    "read_arrow_output",
    "remove_outputs",
    "write_arrow_output",
    "write_parquet_output",
]
