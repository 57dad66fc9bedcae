"""Method registration, parameter binding and the generated OpenRPC document."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from node.rpc.errors import INVALID_PARAMS, NOT_FOUND, RpcError
from node.rpc.registry import Param, RpcRegistry, openrpc_document, validate_openrpc


def _registry() -> RpcRegistry:
    reg = RpcRegistry()

    @reg.method(
        "dataset.list",
        params=[
            Param("prefix", {"type": "string"}, description="alias prefix"),
            Param("limit", {"type": "integer", "minimum": 1}, required=False),
        ],
        result={"type": "array", "items": {"type": "string"}},
        summary="List datasets",
        description="Aliases starting with prefix.",
        errors=[NOT_FOUND],
    )
    async def dataset_list(prefix: str, limit: int = 10) -> list[str]:
        return [f"{prefix}{i}" for i in range(limit)]

    async def status() -> dict[str, Any]:
        return {}

    reg.add("node.status", status, result={"type": "object"})
    return reg


def test_bind_by_name_and_by_position() -> None:
    spec = _registry().get("dataset.list")
    assert spec is not None
    assert spec.bind({"prefix": "a"}) == {"prefix": "a"}
    assert spec.bind(["a", 2]) == {"prefix": "a", "limit": 2}
    assert spec.bind(["a"]) == {"prefix": "a"}

    async def call() -> Any:
        return await spec.handler(**spec.bind(["p", 2]))

    assert asyncio.run(call()) == ["p0", "p1"]


@pytest.mark.parametrize(
    ("params", "param"),
    [
        (None, "prefix"),
        ({}, "prefix"),
        ([], "prefix"),
        ({"prefix": 1}, "prefix"),
        ({"prefix": "a", "limit": 0}, "limit"),
        ({"prefix": "a", "other": 0}, "other"),
        (["a", 1, 2], None),
        ("a", None),
    ],
)
def test_bad_params_are_invalid_params_naming_the_param(params: Any, param: str | None) -> None:
    spec = _registry().get("dataset.list")
    assert spec is not None
    with pytest.raises(RpcError) as ei:
        spec.bind(params)
    assert ei.value.code == INVALID_PARAMS
    if param is not None:
        assert repr(param) in ei.value.message
        assert ei.value.data == {"param": param}


def test_registration_rejects_bad_specs() -> None:
    reg = _registry()

    async def h(x: int = 0) -> None:
        return None

    def sync(x: int = 0) -> None:
        return None

    async def needs_y(x: int, y: int) -> None:
        return None

    async def no_default(x: int) -> None:
        return None

    async def kwargs(**kw: Any) -> None:
        return None

    bad: list[tuple[str, Any, list[Param]]] = [
        ("dataset.list", h, []),  # duplicate
        ("rpc.mine", h, []),  # reserved prefix
        ("bad name", h, []),
        ("m1", sync, []),  # not async
        ("m2", h, [Param("x", {"type": "nope"})]),
        ("m3", h, [Param("z")]),  # handler lacks z
        ("m4", needs_y, [Param("x")]),  # handler needs an undeclared y
        ("m5", no_default, [Param("x", required=False)]),
        ("m6", kwargs, [Param("a", required=False), Param("b")]),  # required after optional
        ("m7", h, [Param("x"), Param("x")]),
    ]
    for name, handler, params in bad:
        with pytest.raises(ValueError):
            reg.add(name, handler, params=params)
    reg.add("m8", kwargs, params=[Param("anything")])
    assert "m8" in reg and "m1" not in reg and len(reg) == 3


def test_openrpc_document() -> None:
    doc = openrpc_document(_registry(), title="t", version="9.9.9", description="d")
    validate_openrpc(doc)
    assert doc["openrpc"] == "1.2.6"
    assert doc["info"] == {"title": "t", "version": "9.9.9", "description": "d"}
    methods = {m["name"]: m for m in doc["methods"]}
    assert list(methods) == ["dataset.list", "node.status"]
    m = methods["dataset.list"]
    assert m["summary"] == "List datasets" and m["description"] == "Aliases starting with prefix."
    assert m["paramStructure"] == "either"
    assert m["params"] == [
        {
            "name": "prefix",
            "required": True,
            "schema": {"type": "string"},
            "description": "alias prefix",
        },
        {"name": "limit", "required": False, "schema": {"type": "integer", "minimum": 1}},
    ]
    assert m["result"]["schema"] == {"type": "array", "items": {"type": "string"}}
    assert [e["code"] for e in m["errors"]] == [INVALID_PARAMS, NOT_FOUND]
    assert "errors" not in methods["node.status"]


@pytest.mark.parametrize(
    "breakage",
    [
        lambda d: d.update(openrpc="1.0"),
        lambda d: d["info"].pop("version"),
        lambda d: d["methods"].append(dict(d["methods"][0])),
        lambda d: d["methods"][0].update(paramStructure="by-magic"),
        lambda d: d["methods"][0]["params"].append({"name": "prefix"}),
        lambda d: d["methods"][0].pop("result"),
        lambda d: d["methods"][0]["errors"].append({"code": "x", "message": "m"}),
    ],
)
def test_validate_openrpc_catches_breakage(breakage: Any) -> None:
    doc = openrpc_document(_registry())
    breakage(doc)
    with pytest.raises(ValueError):
        validate_openrpc(doc)
