"""The parent side of a lifeline: children that cannot outlive this process.

See :mod:`engine.lifeline` for the child side and why a pipe is used rather than
``PR_SET_PDEATHSIG``. The node creates one :class:`Lifeline` per child it starts, passes the read
end to it (``pass_fds`` + ``ODF_LIFELINE_FD``) and keeps the write end open for as long as the
child should live. Closing it (:meth:`Lifeline.cut`) ends the child as surely as the node's own
death does. Both ends are created close-on-exec, so no other child ever inherits the write end
(which would keep a dead node's children alive).
"""

from __future__ import annotations

import os

LIFELINE_ENV = "ODF_LIFELINE_FD"
"""The variable naming the inherited descriptor (``engine/lifeline.py`` reads the same name; the
node never imports the engine package, so a unit test pins that both spell it alike)."""

__all__ = ["LIFELINE_ENV", "Lifeline"]


class Lifeline:
    """One pipe: the child holds the read end, this process the write end."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()

    def popen_kwargs(self, env: dict[str, str]) -> dict[str, object]:
        """``subprocess.Popen`` arguments that hand the read end to the child."""
        return {"pass_fds": (self.read_fd,), "env": {**env, LIFELINE_ENV: str(self.read_fd)}}

    def spawned(self) -> None:
        """The child has its copy: close ours (only the write end keeps it alive)."""
        if self.read_fd >= 0:
            os.close(self.read_fd)
            self.read_fd = -1

    def cut(self) -> None:
        """End the child (idempotent)."""
        self.spawned()
        if self.write_fd >= 0:
            os.close(self.write_fd)
            self.write_fd = -1
