"""Exceptions -> JSON-RPC error objects at the boundary."""

from __future__ import annotations

import logging

import pytest

from coordinator import errors as ce
from coordinator.transform.plan import TransformEngineError, TransformPlanError
from coordinator.transform.run import InvalidTransformQuery
from node.app.errors import InvalidArgument, NotOwner, RetryLater
from node.app.fetch import PullDiverged, PullRejected
from node.config import ConfigError
from node.engine_client import EngineUnavailable
from node.home_lock import HomeLocked
from node.ipfs.client import IpfsError
from node.rpc import errors as re
from node.transfer import errors as te
from node.transfer.errors import TransientSourceError
from node.transfer.linked import LinkSummaryError
from p2p import errors as pe
from p2p.transport import TransportError


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (ce.DatasetNotFound("x"), re.NOT_FOUND),
        (ce.BlockNotFound("x"), re.NOT_FOUND),
        (ce.RefNotFound("x"), re.NOT_FOUND),
        (ce.PushSourceNotFound("x"), re.NOT_FOUND),
        (ce.InvalidDatasetId("x"), re.INVALID_INPUT),
        (ce.InvalidSnapshot("x"), re.INVALID_INPUT),
        (ce.BadInputData("x", row=2), re.INVALID_INPUT),
        (ce.UnreproducibleLogicalHash("x"), re.INVALID_INPUT),
        (TransformPlanError("x"), re.INVALID_INPUT),
        (InvalidTransformQuery("x"), re.INVALID_INPUT),
        (pe.WireDecodeError("truncated", "x"), re.INVALID_INPUT),
        (ce.DatasetAlreadyExists("x"), re.CONFLICT),
        (ce.ChainRuleViolation("sequence-number", "x"), re.CONFLICT),
        (ce.RefCASFailed("x"), re.CONFLICT),
        (ce.ConcurrentModification("x"), re.CONFLICT),
        (te.DivergedHeads("x"), re.CONFLICT),
        (te.SourceUnavailable("o", "x"), re.UNAVAILABLE),
        (TransportError("x"), re.UNAVAILABLE),
        (TransformEngineError("x"), re.UNAVAILABLE),
        (pe.NetworkNotIsolated("x"), re.UNAVAILABLE),
        (ce.SignatureError("x"), re.VERIFICATION_FAILED),
        (ce.HashMismatch("x"), re.VERIFICATION_FAILED),
        (te.ObjectHashMismatch("o", "x"), re.VERIFICATION_FAILED),
        (te.ObjectTooLarge("o", "x"), re.VERIFICATION_FAILED),
        (pe.InvalidEquivocationProof("x"), re.VERIFICATION_FAILED),
        (ce.KeyFileError("x"), re.NODE_ERROR),
        (IpfsError("x"), re.UNAVAILABLE),
        (EngineUnavailable("x"), re.UNAVAILABLE),
        (TransientSourceError("x"), re.UNAVAILABLE),
        (LinkSummaryError("x"), re.INVALID_INPUT),
        (InvalidArgument("x"), re.INVALID_INPUT),
        (NotOwner("x"), re.CONFLICT),
        (PullDiverged("x"), re.CONFLICT),
        (PullRejected("x"), re.VERIFICATION_FAILED),
        (RetryLater("x"), re.UNAVAILABLE),
        (HomeLocked("x"), re.CONFLICT),
        (ConfigError("x"), re.INVALID_INPUT),
        (ce.OdfNodeError("x"), re.NODE_ERROR),
        (re.RpcError(-32099, "x"), -32099),
        (ValueError("x"), re.INTERNAL_ERROR),
    ],
)
def test_codes(exc: BaseException, code: int) -> None:
    assert re.code_for(exc) == code
    assert re.error_object(exc)["code"] == code
    assert -32768 <= code <= -32000


def test_node_error_object_carries_type_and_attributes() -> None:
    obj = re.error_object(ce.ChainRuleViolation("sequence-number", "gap"))
    assert obj == {
        "code": re.CONFLICT,
        "message": "[sequence-number] gap",
        "data": {"type": "ChainRuleViolation", "rule": "sequence-number"},
    }
    obj = re.error_object(te.ObjectHashMismatch("blocks/abc", "bad"))
    assert obj["data"] == {"type": "ObjectHashMismatch", "object": "blocks/abc"}


def test_unexpected_exceptions_are_generic_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="node.rpc.errors"):
        obj = re.error_object(RuntimeError("password=hunter2"), method="m")
    assert obj == {"code": re.INTERNAL_ERROR, "message": "Internal error"}
    assert "hunter2" in caplog.text and "m" in caplog.text


def test_an_error_class_states_its_kind_and_subclasses_inherit_it() -> None:
    class Busy(ce.OdfNodeError):
        rpc_code = re.UNAVAILABLE

    class StillBusy(Busy):
        pass

    assert re.code_for(Busy("later")) == re.UNAVAILABLE
    assert re.code_for(StillBusy()) == re.UNAVAILABLE
    assert re.error_object(Busy("later"))["message"] == "later"


def test_register_error_is_for_foreign_types_only() -> None:
    class Foreign(Exception):
        pass

    with pytest.raises(TypeError):
        re.register_error(ce.DatasetNotFound, re.CONFLICT)
    re.register_error(Foreign, re.UNAVAILABLE)
    # Foreign exception text is never sent, whatever its code.
    assert re.error_object(Foreign("internal detail")) == {
        "code": re.UNAVAILABLE,
        "message": "Unavailable, retry later",
        "data": {"type": "Foreign"},
    }


def test_every_deliberate_error_in_the_project_has_a_known_code() -> None:
    """Every OdfNodeError subclass the node's modules define maps to a listed kind."""
    import importlib
    import pkgutil

    import coordinator
    import engine
    import node
    import p2p

    for pkg in (coordinator, p2p, node, engine):
        for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
            if info.name.endswith(("__main__", "worker", "engine.spark_engine", "engine.sandbox")):
                continue  # started as programs or need pyspark; checked by their own tests
            importlib.import_module(info.name)
    seen = 0
    stack: list[type[ce.OdfNodeError]] = [ce.OdfNodeError]
    while stack:
        cls = stack.pop()
        seen += 1
        assert cls.rpc_code in re.CODE_MESSAGES, cls
        stack.extend(cls.__subclasses__())
    assert seen > 40


def test_error_response_shape() -> None:
    assert re.error_response(re.PARSE_ERROR) == {
        "jsonrpc": "2.0",
        "error": {"code": -32700, "message": "Parse error"},
        "id": None,
    }
    assert re.error_response(re.BATCH_TOO_LARGE, "m", id=3, data={"n": 1})["error"] == {
        "code": -32013,
        "message": "m",
        "data": {"n": 1},
    }
