"""Writing a downloaded object into its pending file, with direct I/O where the filesystem allows.

Why direct I/O: a pull's own CPU goes to three things, sha3-256 of every byte, receiving the
bytes, and writing them. On the project's reference machine (ext4 on a virtio disk, 2 cores)
writing 200 MB through the page cache costs ~0.45 s of kernel CPU (copying into the cache,
allocating and accounting its pages), about as much as hashing them; the same 200 MB written
with ``O_DIRECT`` from page-aligned buffers costs ~0.01 s of CPU and less wall time (the disk
takes the data by DMA). With two cores shared by the IPFS node and the pull, that CPU is what
kept a pull below the machine's bound (docs/transfer.md, "Pull against the machine's bound").

How: :class:`DirectObjectWriter` copies the received chunks into one page-aligned buffer
(an anonymous ``mmap``) and writes it whenever it fills; the last, partial block is written
padded to the alignment and the file is then cut to its real length with ``ftruncate``.
Durability is unchanged: ``O_DIRECT`` bypasses the page cache but not the disk's own cache,
so ``finish(durable=True)`` still fsyncs.

Where direct I/O is refused (tmpfs, some FUSE and network filesystems, a platform without
``O_DIRECT``, an alignment the device does not accept), the writer falls back to ordinary
buffered writes on its own: the bytes and the result are the same. ``[transfer] direct_io =
false`` turns it off (:class:`node.transfer.pull.PullOptions` ``direct_io``).
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import threading
from pathlib import Path
from typing import Protocol

ALIGN = 4096
"""Alignment of every direct write (offset, length and buffer address): 4 KiB covers the logical
block sizes of the disks in use (512 and 4,096 bytes) and is the page size on x86-64 and most
arm64 kernels."""

DIRECT_BUFFER = 1 << 20
"""Bytes per direct write; each writer holds one buffer of this size."""

DIRECT_MIN_SIZE = 1 << 20
"""Objects smaller than this are written buffered: the aligned buffer and the padded tail cost
more than they save."""

_O_DIRECT: int = getattr(os, "O_DIRECT", 0)


class ObjectWriter(Protocol):
    """A file being filled with one object's bytes, in order."""

    direct: bool
    """Whether the bytes go to the file with direct I/O (``False`` after a fallback)."""

    def write(self, chunk: bytes) -> None:
        """Append ``chunk``."""
        ...

    def finish(self, durable: bool) -> None:
        """Write what is buffered, fsync if ``durable``, close."""
        ...

    def close(self) -> None:
        """Close without finishing (idempotent; after an error)."""
        ...


class BufferedObjectWriter:
    """Ordinary writes through the page cache."""

    direct = False

    def __init__(self, path: Path) -> None:
        self._out = open(path, "wb")  # noqa: SIM115 - closed in finish() or close()

    def write(self, chunk: bytes) -> None:
        """Append ``chunk``."""
        self._out.write(chunk)

    def finish(self, durable: bool) -> None:
        """Flush, fsync if ``durable``, close."""
        self._out.flush()
        if durable:
            os.fsync(self._out.fileno())
        self._out.close()

    def close(self) -> None:
        """Close (idempotent)."""
        self._out.close()


class DirectObjectWriter:
    """Writes through ``O_DIRECT`` from a page-aligned buffer (module docstring)."""

    def __init__(self, fd: int, buffer_size: int = DIRECT_BUFFER) -> None:
        if buffer_size <= 0 or buffer_size % ALIGN:
            raise ValueError(f"buffer_size must be a positive multiple of {ALIGN}")
        self._fd = fd
        self._buf = mmap.mmap(-1, buffer_size)  # anonymous: page-aligned
        self._view = memoryview(self._buf)
        self._pos = 0
        self._length = 0  # bytes handed to write() so far
        self._closed = False
        # write() and finish() run in worker threads; a cancelled download closes the writer
        # from the event loop meanwhile. The lock makes close() wait for a write in progress
        # (as a buffered file's close does) instead of pulling the buffer from under it.
        self._lock = threading.Lock()
        self.direct = True

    def write(self, chunk: bytes) -> None:
        """Append ``chunk`` (copied into the aligned buffer; full buffers go to the file)."""
        with self._lock:
            self._check_open()
            self._append(chunk)

    def _append(self, chunk: bytes) -> None:
        size = len(self._buf)
        data = memoryview(chunk)
        self._length += len(data)
        while data:
            take = min(len(data), size - self._pos)
            self._view[self._pos : self._pos + take] = data[:take]
            self._pos += take
            data = data[take:]
            if self._pos == size:
                self._write_out(size)
                self._pos = 0

    def finish(self, durable: bool) -> None:
        """The last, partial block padded to the alignment, the file cut to its length, fsync
        if ``durable``, close."""
        with self._lock:
            self._check_open()
            if self._pos:
                padded = -(-self._pos // ALIGN) * ALIGN
                self._view[self._pos : padded] = bytes(padded - self._pos)
                self._write_out(padded)
                self._pos = 0
            os.ftruncate(self._fd, self._length)
            if durable:
                os.fsync(self._fd)
            self._close()

    def close(self) -> None:
        """Close the file and release the buffer (idempotent; waits for a write in progress)."""
        with self._lock:
            self._close()

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError("write to a closed object writer")

    def _close(self) -> None:
        if self._closed:
            return
        self._closed = True
        os.close(self._fd)
        self._view.release()
        self._buf.close()

    def _write_out(self, n: int) -> None:
        """Write the buffer's first ``n`` bytes at the file's position (n aligned, except after
        a fallback, where any length will do)."""
        done = 0
        while done < n:
            try:
                done += os.write(self._fd, self._view[done:n])
            except OSError as e:
                if e.errno != errno.EINVAL or not self.direct:
                    raise
                # The device or filesystem refuses this direct write (alignment, or direct
                # I/O not really supported): carry on buffered on the same descriptor. Nothing
                # of this call reached the file, so the position is unchanged.
                flags = fcntl.fcntl(self._fd, fcntl.F_GETFL)
                fcntl.fcntl(self._fd, fcntl.F_SETFL, flags & ~_O_DIRECT)
                self.direct = False


def open_object_writer(path: Path, expected_size: int | None, direct: bool) -> ObjectWriter:
    """A writer creating (or truncating) ``path``: direct I/O when ``direct`` is asked, the
    platform has ``O_DIRECT``, the object is expected to be at least :data:`DIRECT_MIN_SIZE`
    bytes and the filesystem accepts it; otherwise buffered."""
    if direct and _O_DIRECT and expected_size is not None and expected_size >= DIRECT_MIN_SIZE:
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | _O_DIRECT
        try:
            fd = os.open(path, flags, 0o666)
        except OSError as e:
            # EINVAL: the filesystem has no direct I/O (tmpfs, some FUSE); the file may
            # already exist (Linux checks after creating it): the buffered open truncates it.
            if e.errno != errno.EINVAL:
                raise
        else:
            return DirectObjectWriter(fd)
    return BufferedObjectWriter(path)
