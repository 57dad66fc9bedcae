"""The one trust executor (p2p/trust_executor.py): every decision type of the trust policy
reaches exactly one effect, and both drivers (the daemon's TrustDriver and the simulator) carry
out the policy's decisions through it with the same per-dataset cap."""

from __future__ import annotations

import ast
import inspect
import typing
from pathlib import Path

from p2p import trust
from p2p.trust_executor import TrustEffects, dispatch

ROOT = Path(__file__).resolve().parents[2]


class _Recorder:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def replay(self, d: trust.Replay) -> str:
        self.calls.append("replay")
        return "r"

    def trusted(self, d: trust.Trusted) -> str:
        self.calls.append("trusted")
        return "t"

    def distrusted(self, d: trust.Distrusted) -> str:
        self.calls.append("distrusted")
        return "d"


def test_every_trust_decision_reaches_exactly_one_effect_and_returns_its_result() -> None:
    decision_types = typing.get_args(trust.TrustDecision)
    methods = {n for n, v in vars(TrustEffects).items() if callable(v) and not n.startswith("_")}
    assert len(methods) == len(decision_types) == 3
    reached: dict[type, str] = {}
    for cls in decision_types:
        rec = _Recorder()
        result = dispatch(cls.__new__(cls), rec)  # field values are irrelevant to the dispatch
        assert len(rec.calls) == 1, cls
        assert result == rec.calls[0][0]
        reached[cls] = rec.calls[0]
    assert set(reached.values()) == methods  # a distinct effect per decision type


def _matches_on_decisions(path: Path) -> list[str]:
    """Functions in ``path`` that match on a trust decision type themselves."""
    names = {c.__name__ for c in typing.get_args(trust.TrustDecision)}
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.match_case) and isinstance(node.pattern, ast.MatchClass):
            cls = node.pattern.cls
            name = cls.attr if isinstance(cls, ast.Attribute) else getattr(cls, "id", "")
            if name in names:
                found.append(name)
    return found


def test_both_drivers_carry_out_decisions_only_through_the_executor() -> None:
    for driver in ("node/app/trust.py", "sim/simulator.py"):
        assert _matches_on_decisions(ROOT / driver) == [], driver
        assert "dispatch(" in (ROOT / driver).read_text(), driver


def test_one_cap_for_both_drivers() -> None:
    from node.app import trust as daemon_trust
    from sim import simulator

    assert "dataset_policy" in inspect.getsource(daemon_trust.TrustDriver)
    assert "trust.dataset_policy(" in inspect.getsource(simulator)
    policy = trust.dataset_policy(trust.TrustConfig(), __import__("random").Random(1))
    assert policy.config.max_heads == trust.HEADS_PER_DATASET
