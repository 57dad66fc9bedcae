"""The lifeline pipe between the node and its children (node/lifeline.py, engine/lifeline.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from engine import lifeline as child_side
from node import lifeline as parent_side


def test_both_sides_name_the_same_variable() -> None:
    # The node never imports the engine package (import contract), so the name is spelt twice.
    assert parent_side.LIFELINE_ENV == child_side.LIFELINE_ENV


def test_cutting_the_lifeline_ends_the_child_and_its_children() -> None:
    line = parent_side.Lifeline()
    code = (
        "import subprocess, sys, time\n"
        "from engine.lifeline import watch_lifeline\n"
        "assert watch_lifeline()\n"
        "kid = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print(kid.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    try:
        child = subprocess.Popen(  # type: ignore[call-overload]
            [sys.executable, "-c", code],
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
            **line.popen_kwargs(dict(os.environ)),
        )
    finally:
        line.spawned()
    grandchild = int(child.stdout.readline())
    assert child.poll() is None
    line.cut()
    assert child.wait(10) == -9  # SIGKILLed with its whole process group
    for _ in range(100):
        stat = Path(f"/proc/{grandchild}/stat")
        if not stat.exists() or " Z " in stat.read_text():
            break
        time.sleep(0.05)
    else:
        raise AssertionError("the child's own child survived")


def test_no_lifeline_means_no_watcher(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv(child_side.LIFELINE_ENV, raising=False)
    assert child_side.watch_lifeline() is False
