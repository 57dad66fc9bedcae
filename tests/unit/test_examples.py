"""The snapshots in ``examples/`` (the README's walkthrough) parse, and name their engines."""

from __future__ import annotations

from pathlib import Path

from coordinator.metadata import model as m
from coordinator.metadata.snapshot import snapshots_from_yaml

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _engines(path: Path) -> dict[str, str]:
    out = {}
    for snap in snapshots_from_yaml(path.read_bytes()):
        for event in snap.metadata:
            if isinstance(event, m.SetTransform):
                assert isinstance(event.transform, m.TransformSql)
                out[snap.name] = event.transform.engine
    return out


def test_every_example_snapshot_parses() -> None:
    files = sorted(EXAMPLES.glob("*.yaml"))
    assert files
    for f in files:
        assert snapshots_from_yaml(f.read_bytes()), f


def test_the_derivative_examples_cover_both_replay_engines() -> None:
    assert _engines(EXAMPLES / "cities.yaml") == {"big-cities": "spark"}
    assert _engines(EXAMPLES / "big-cities-datafusion.yaml") == {"big-cities-df": "datafusion"}
