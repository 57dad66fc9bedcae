"""Exceptions -> JSON-RPC error objects at the boundary."""

from __future__ import annotations

import logging

import pytest

from coordinator import errors as ce
from coordinator.transform.plan import TransformEngineError, TransformPlanError
from coordinator.transform.run import InvalidTransformQuery
from node.rpc import errors as re
from node.transfer import errors as te
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


def test_register_error_for_daemon_specific_types() -> None:
    class Busy(ce.OdfNodeError):
        pass

    class Foreign(Exception):
        pass

    assert re.code_for(Busy()) == re.NODE_ERROR
    re.register_error(Busy, re.UNAVAILABLE)
    re.register_error(Foreign, re.UNAVAILABLE)
    assert re.code_for(Busy("later")) == re.UNAVAILABLE
    assert re.error_object(Busy("later"))["message"] == "later"
    # Foreign exception text is never sent, whatever its code.
    assert re.error_object(Foreign("internal detail")) == {
        "code": re.UNAVAILABLE,
        "message": "Unavailable, retry later",
        "data": {"type": "Foreign"},
    }


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
