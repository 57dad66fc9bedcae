"""The pull's object writer: direct I/O from an aligned buffer gives the same file, byte for byte,
as a buffered write, for every length around the alignment and the buffer size; it falls back to
buffered writes where direct I/O is refused."""

from __future__ import annotations

import errno
import fcntl
import os
import random
from pathlib import Path

import pytest

from node.transfer.object_writer import (
    ALIGN,
    DIRECT_MIN_SIZE,
    BufferedObjectWriter,
    DirectObjectWriter,
    open_object_writer,
)


def _direct_supported(d: Path) -> bool:
    if not hasattr(os, "O_DIRECT"):
        return False
    try:
        fd = os.open(d / "probe", os.O_WRONLY | os.O_CREAT | os.O_DIRECT)
    except OSError as e:
        assert e.errno == errno.EINVAL
        return False
    os.close(fd)
    return True


def _chunks(data: bytes, rng: random.Random) -> list[bytes]:
    out, i = [], 0
    while i < len(data):
        n = rng.choice([1, 7, ALIGN - 1, ALIGN, ALIGN + 1, 65_536, 300_001])
        out.append(data[i : i + n])
        i += n
    return out


@pytest.mark.parametrize(
    "length",
    [0, 1, ALIGN - 1, ALIGN, ALIGN + 1, 3 * ALIGN, 1 << 14, (1 << 14) + 5, 5 * (1 << 14) + 333],
)
def test_direct_writer_matches_the_bytes_written(tmp_path: Path, length: int) -> None:
    rng = random.Random(length)
    data = rng.randbytes(length)
    if not _direct_supported(tmp_path):
        pytest.fail(f"{tmp_path}: the test's filesystem has no O_DIRECT; run it on a disk")
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT)
    # A small buffer (4 pages) so that lengths cross many buffer boundaries.
    w = DirectObjectWriter(fd, buffer_size=4 * ALIGN)
    for c in _chunks(data, rng):
        w.write(c)
    w.finish(durable=True)
    assert w.direct
    assert (tmp_path / "f").read_bytes() == data
    w.close()  # idempotent after finish


def test_a_large_object_is_written_directly_where_the_filesystem_allows(tmp_path: Path) -> None:
    data = random.Random(1).randbytes(DIRECT_MIN_SIZE * 2 + 12_345)
    w = open_object_writer(tmp_path / "obj", len(data), direct=True)
    assert w.direct == _direct_supported(tmp_path)
    for c in _chunks(data, random.Random(2)):
        w.write(c)
    w.finish(durable=False)
    assert (tmp_path / "obj").read_bytes() == data


def test_small_objects_unknown_sizes_and_direct_io_off_are_buffered(tmp_path: Path) -> None:
    assert isinstance(
        open_object_writer(tmp_path / "a", DIRECT_MIN_SIZE - 1, True), BufferedObjectWriter
    )
    assert isinstance(open_object_writer(tmp_path / "b", None, True), BufferedObjectWriter)
    w = open_object_writer(tmp_path / "c", DIRECT_MIN_SIZE * 4, direct=False)
    assert isinstance(w, BufferedObjectWriter)
    w.write(b"abc")
    w.finish(durable=True)
    assert (tmp_path / "c").read_bytes() == b"abc"
    for name in "ab":
        (tmp_path / name).unlink()


def test_a_filesystem_without_direct_io_falls_back_to_buffered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Linux refuses ``open(O_DIRECT)`` with EINVAL on a filesystem without direct I/O (some
    FUSE and network filesystems; tmpfs before Linux 6.6), possibly after creating the file:
    the writer then opens it buffered, truncating whatever the refused open left."""
    real_open = os.open

    def refusing_open(path: object, flags: int, mode: int = 0o777) -> int:
        if flags & os.O_DIRECT:
            real_open(path, os.O_WRONLY | os.O_CREAT, mode)  # type: ignore[arg-type]
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_open(path, flags, mode)  # type: ignore[arg-type]

    (tmp_path / "obj").write_bytes(b"left over from an earlier attempt" * 100_000)
    monkeypatch.setattr(os, "open", refusing_open)
    data = random.Random(3).randbytes(DIRECT_MIN_SIZE + 77)
    w = open_object_writer(tmp_path / "obj", len(data), direct=True)
    monkeypatch.undo()
    assert isinstance(w, BufferedObjectWriter)
    w.write(data)
    w.finish(durable=True)
    assert (tmp_path / "obj").read_bytes() == data


def test_a_refused_direct_write_carries_on_buffered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A device that refuses a direct write (EINVAL: an alignment it does not accept) makes the
    writer clear O_DIRECT on the same descriptor and write buffered; nothing is lost."""
    if not _direct_supported(tmp_path):
        pytest.fail(f"{tmp_path}: the test's filesystem has no O_DIRECT; run it on a disk")
    real_write = os.write
    refused: list[int] = []

    def refusing_write(fd: int, data: bytes | memoryview) -> int:
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT:
            refused.append(len(data))
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_write(fd, data)

    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT)
    w = DirectObjectWriter(fd, buffer_size=ALIGN)
    monkeypatch.setattr(os, "write", refusing_write)
    data = random.Random(4).randbytes(3 * ALIGN + 10)
    w.write(data)
    w.finish(durable=True)
    monkeypatch.undo()
    assert refused == [ALIGN]
    assert not w.direct
    assert (tmp_path / "f").read_bytes() == data


def test_closing_while_a_worker_writes_waits_for_the_write(tmp_path: Path) -> None:
    """A cancelled download closes its writer from the event loop while a worker thread may be
    inside ``write``: close waits for that write (no BufferError from releasing the aligned
    buffer under it), and a later write is refused."""
    import threading

    if not _direct_supported(tmp_path):
        pytest.fail(f"{tmp_path}: the test's filesystem has no O_DIRECT; run it on a disk")
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT)
    w = DirectObjectWriter(fd, buffer_size=16 * ALIGN)
    errors: list[BaseException] = []
    started = threading.Event()

    def worker() -> None:
        try:
            started.set()
            w.write(bytes(32 << 20))  # ~512 direct writes: long enough to be inside it
        except ValueError:
            pass  # close won the lock first: refused, not corrupted
        except BaseException as e:  # anything else is the defect
            errors.append(e)

    t = threading.Thread(target=worker)
    t.start()
    started.wait()
    w.close()
    t.join(30)
    assert not t.is_alive() and errors == []
    with pytest.raises(ValueError, match="closed"):
        w.write(b"x")
