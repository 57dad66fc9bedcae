"""The prepare steps of a polling source (``SetPollingSource.prepare``), bounded.

* ``Decompress`` ``gzip``: the gzip stream (all members) of the fetched file; ``zip``: the
  archive member named ``subPath``, else the first entry (kamu-cli,
  ``src/infra/core/src/services/ingest/prep_service.rs``). The output is written in 1 MiB
  pieces and counted as it is produced: more than ``max_bytes`` (the node's
  ``ingest.max_decompressed_bytes``) stops the step with :class:`DecompressBudgetExceeded`,
  so a zip bomb costs at most that much disk and no more memory than one piece. The sizes an
  archive declares are not trusted.
* ``Pipe``: the fetched bytes on the command's standard input, its standard output is the
  prepared file (no shell; an empty environment but ``PATH``; a temporary working directory;
  the same byte budget; a time limit). It runs with the node's own rights, so it is refused
  unless the owner turns ``ingest.allow_pipe`` on.

Steps apply in order, each to the previous step's output. This module does not import pyarrow.
"""

from __future__ import annotations

import gzip
import os
import subprocess
import tempfile
import zipfile
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Final

from coordinator.errors import DecompressBudgetExceeded, PrepareError
from coordinator.metadata import model as m

__all__ = [
    "DEFAULT_MAX_DECOMPRESSED_BYTES",
    "PIPE_SWITCH",
    "PIPE_TIMEOUT_S",
    "prepare",
]

#: Default of ``ingest.max_decompressed_bytes``: the most bytes one prepare step may produce.
DEFAULT_MAX_DECOMPRESSED_BYTES: Final = 1 << 30
#: The setting that allows ``Pipe`` prepare steps.
PIPE_SWITCH: Final = "ingest.allow_pipe"
#: Wall-clock limit of one ``Pipe`` command.
PIPE_TIMEOUT_S: Final = 600.0
_PIECE: Final = 1 << 20


def _copy_bounded(src: IO[bytes] | gzip.GzipFile, dst: IO[bytes], max_bytes: int, what: str) -> int:
    total = 0
    while True:
        # Read at most one byte past the budget in total: a bomb is stopped right there.
        piece = src.read(min(_PIECE, max_bytes - total + 1))
        if not piece:
            return total
        total += len(piece)
        if total > max_bytes:
            raise DecompressBudgetExceeded(
                f"{what} decompresses to more than {max_bytes:,} bytes (ingest."
                "max_decompressed_bytes); refused as a possible zip bomb, nothing was committed"
            )
        dst.write(piece)


def _gunzip(src: Path, dst: Path, max_bytes: int) -> None:
    try:
        with gzip.open(src, "rb") as fin, open(dst, "wb") as fout:
            _copy_bounded(fin, fout, max_bytes, "the gzip input")
    except (OSError, EOFError, zlib.error) as e:
        raise PrepareError(f"Decompress gzip: not a valid gzip stream: {e}") from None


def _unzip(src: Path, dst: Path, sub_path: str | None, max_bytes: int) -> None:
    try:
        with zipfile.ZipFile(src) as archive:
            names = archive.namelist()
            if sub_path is not None:
                if sub_path not in names:
                    raise PrepareError(
                        f"Decompress zip: no member {sub_path[:200]!r} in the archive"
                    )
                name = sub_path
            else:
                if not names:
                    raise PrepareError("Decompress zip: the archive is empty")
                name = names[0]
            with archive.open(name) as fin, open(dst, "wb") as fout:
                _copy_bounded(fin, fout, max_bytes, f"zip member {name[:200]!r}")
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError) as e:
        raise PrepareError(f"Decompress zip: not a readable zip archive: {e}") from None
    except RuntimeError as e:  # an encrypted member
        raise PrepareError(f"Decompress zip: {e}") from None


def _pipe(command: Sequence[str], src: Path, dst: Path, workdir: Path, max_bytes: int) -> None:
    if not command:
        raise PrepareError("Pipe: the command is empty")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C.UTF-8"}
    with (
        open(src, "rb") as fin,
        tempfile.TemporaryDirectory(prefix="pipe-", dir=workdir) as cwd,
        tempfile.TemporaryFile(dir=workdir) as err,
    ):
        try:
            proc = subprocess.Popen(
                list(command),
                stdin=fin,
                stdout=subprocess.PIPE,
                stderr=err,
                cwd=cwd,
                env=env,
                start_new_session=True,
            )
        except OSError as e:
            raise PrepareError(f"Pipe: cannot run {command[0][:200]!r}: {e.strerror}") from None
        assert proc.stdout is not None
        try:
            with open(dst, "wb") as fout:
                _copy_bounded(proc.stdout, fout, max_bytes, "the Pipe command's output")
            code = proc.wait(timeout=PIPE_TIMEOUT_S)
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        finally:
            proc.stdout.close()
        if code != 0:
            err.seek(0)
            tail = err.read(2000).decode("utf-8", "replace").strip()
            raise PrepareError(
                f"Pipe: {command[0][:200]!r} exited with code {code}"
                + (f": {tail}" if tail else "")
            )


def prepare(
    steps: Sequence[m.PrepStep] | None,
    src: Path,
    workdir: Path,
    *,
    max_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
    allow_pipe: bool = False,
) -> Path:
    """Apply ``steps`` to the fetched file ``src``; the prepared file (``src`` if none).

    Outputs are written in ``workdir`` (the caller removes it).

    Raises:
        DecompressBudgetExceeded: a step produced more than ``max_bytes``.
        PrepareError: an invalid archive, a missing member, a ``Pipe`` that is not allowed
            (naming :data:`PIPE_SWITCH`) or that failed.
    """
    current = src
    for i, step in enumerate(steps or ()):
        out = workdir / f"prepared-{i}"
        if isinstance(step, m.PrepStepDecompress):
            if step.format == m.CompressionFormat.GZIP:
                _gunzip(current, out, max_bytes)
            elif step.format == m.CompressionFormat.ZIP:
                _unzip(current, out, step.sub_path, max_bytes)
            else:  # pragma: no cover - the codec decodes only these two
                raise PrepareError(f"Decompress: unsupported format {step.format!r}")
        elif isinstance(step, m.PrepStepPipe):
            if not allow_pipe:
                raise PrepareError(
                    f"a Pipe prepare step runs a command with the node's rights; it is refused "
                    f"unless {PIPE_SWITCH} = true in the node's configuration"
                )
            _pipe(step.command, current, out, workdir, max_bytes)
        else:  # pragma: no cover - PrepStep has two members
            raise PrepareError(f"unsupported prepare step {type(step).__name__}")
        if current != src:
            current.unlink(missing_ok=True)
        current = out
    return current
