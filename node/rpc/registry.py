"""The method registry: handlers, their parameter specs, validation and the OpenRPC document.

The daemon registers each RPC method once, with a spec that is both enforced (params are
validated before the handler runs; a mismatch is -32602 naming the parameter) and published
(``rpc.discover`` returns an OpenRPC 1.2.6 document generated from the same specs)::

    registry = RpcRegistry()

    @registry.method(
        "dataset.get",
        params=[Param("ref", {"type": "string", "minLength": 1})],
        result={"type": "object"},
        summary="One dataset's summary",
        errors=[NOT_FOUND],
    )
    async def dataset_get(ref: str) -> dict[str, Any]: ...

Handlers receive the validated params as keyword arguments; optional params the caller did not
send are not passed, so the handler's own defaults apply.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from node.rpc.errors import CODE_MESSAGES, INVALID_PARAMS, RpcError
from node.rpc.schema import Param, Schema, ValidationError, check_schema, validate

MethodHandler = Callable[..., Awaitable[Any]]
"""An async RPC handler; called with the validated params as keyword arguments."""

OPENRPC_VERSION: Final = "1.2.6"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_PARAM_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
RESERVED_PREFIX: Final = "rpc."
"""Method names under ``rpc.`` are reserved by JSON-RPC 2.0 for the server's own methods."""


@dataclass(frozen=True, slots=True)
class MethodSpec:
    """A registered method: handler plus everything ``rpc.discover`` publishes about it."""

    name: str
    handler: MethodHandler
    params: tuple[Param, ...] = ()
    result: Schema | None = None
    summary: str = ""
    description: str = ""
    errors: tuple[int, ...] = ()

    def bind(self, params: Any) -> dict[str, Any]:
        """Validate JSON-RPC ``params`` (absent, by position or by name) into handler kwargs.

        Raises :class:`RpcError` -32602 whose message names the offending parameter.
        """
        if params is None:
            given: dict[str, Any] = {}
        elif isinstance(params, list):
            if len(params) > len(self.params):
                raise _bad(f"too many positional params: {len(params)} > {len(self.params)}")
            given = {p.name: v for p, v in zip(self.params, params, strict=False)}
        elif isinstance(params, dict):
            known = {p.name for p in self.params}
            unknown = sorted(str(k) for k in params if k not in known)
            if unknown:
                raise _bad(f"unknown param {unknown[0]!r}", param=unknown[0])
            given = dict(params)
        else:
            raise _bad("params must be an array or an object")
        for p in self.params:
            if p.name not in given:
                if p.required:
                    raise _bad(f"missing required param {p.name!r}", param=p.name)
                continue
            try:
                validate(p.schema, given[p.name], p.name)
            except ValidationError as exc:
                raise _bad(f"invalid param {exc.path!r}: {exc.detail}", param=p.name) from None
        return given


def _bad(message: str, *, param: str | None = None) -> RpcError:
    return RpcError(INVALID_PARAMS, message, {"param": param} if param is not None else None)


class RpcRegistry:
    """Method name -> :class:`MethodSpec`. Not thread-safe: register before serving."""

    def __init__(self) -> None:
        self._methods: dict[str, MethodSpec] = {}

    def add(
        self,
        name: str,
        handler: MethodHandler,
        *,
        params: Sequence[Param] = (),
        result: Schema | None = None,
        summary: str = "",
        description: str = "",
        errors: Sequence[int] = (),
        _builtin: bool = False,
    ) -> MethodSpec:
        """Register ``handler`` under ``name``; raises ``ValueError`` on a bad spec.

        Checks at registration what would otherwise fail per call: the name's shape and
        uniqueness, that every schema uses only the supported subset, that required params do
        not follow optional ones positionally, that the handler is async and accepts every
        declared param as a keyword.
        """
        if not _NAME.match(name):
            raise ValueError(f"bad method name {name!r}")
        if name.startswith(RESERVED_PREFIX) and not _builtin:
            raise ValueError(f"method names starting with {RESERVED_PREFIX!r} are reserved")
        if name in self._methods:
            raise ValueError(f"method {name!r} is already registered")
        if not inspect.iscoroutinefunction(handler):
            raise ValueError(f"handler for {name!r} must be an async function")
        seen: set[str] = set()
        optional_seen = False
        for p in params:
            if not _PARAM_NAME.match(p.name) or p.name in seen:
                raise ValueError(f"{name}: bad or duplicate param name {p.name!r}")
            seen.add(p.name)
            if p.required and optional_seen:
                raise ValueError(f"{name}: required param {p.name!r} follows an optional one")
            optional_seen = optional_seen or not p.required
            check_schema(p.schema, f"{name}/{p.name}")
        if result is not None:
            check_schema(result, f"{name}/result")
        for code in errors:
            if not isinstance(code, int) or isinstance(code, bool):
                raise ValueError(f"{name}: error codes must be integers")
        _check_signature(name, handler, params)
        spec = MethodSpec(
            name,
            handler,
            tuple(params),
            result,
            summary,
            description,
            tuple(errors),
        )
        self._methods[name] = spec
        return spec

    def method(
        self,
        name: str,
        *,
        params: Sequence[Param] = (),
        result: Schema | None = None,
        summary: str = "",
        description: str = "",
        errors: Sequence[int] = (),
    ) -> Callable[[MethodHandler], MethodHandler]:
        """Decorator form of :meth:`add`; returns the handler unchanged."""

        def register(handler: MethodHandler) -> MethodHandler:
            self.add(
                name,
                handler,
                params=params,
                result=result,
                summary=summary,
                description=description,
                errors=errors,
            )
            return handler

        return register

    def get(self, name: str) -> MethodSpec | None:
        """The spec registered under ``name``, if any."""
        return self._methods.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._methods

    def __iter__(self) -> Iterator[MethodSpec]:
        return iter(sorted(self._methods.values(), key=lambda s: s.name))

    def __len__(self) -> int:
        return len(self._methods)


def _check_signature(name: str, handler: MethodHandler, params: Sequence[Param]) -> None:
    sig = inspect.signature(handler)
    kinds = {p.name: p.kind for p in sig.parameters.values()}
    var_kw = inspect.Parameter.VAR_KEYWORD in kinds.values()
    keywordable = {inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY}
    for p in params:
        if kinds.get(p.name) not in keywordable and not var_kw:
            raise ValueError(f"{name}: handler does not accept param {p.name!r} as a keyword")
    declared = {p.name for p in params}
    for pname, param in sig.parameters.items():
        required = param.default is inspect.Parameter.empty and param.kind in keywordable
        if required and pname not in declared:
            raise ValueError(f"{name}: handler requires {pname!r}, which is not a declared param")
        spec = next((p for p in params if p.name == pname), None)
        if spec is not None and not spec.required and param.default is inspect.Parameter.empty:
            raise ValueError(f"{name}: optional param {pname!r} needs a default in the handler")


def openrpc_document(
    registry: Iterable[MethodSpec],
    *,
    title: str = "odf-node",
    version: str = "0.1.0",
    description: str = "",
) -> dict[str, Any]:
    """An OpenRPC 1.2.6 document describing every method in ``registry`` (an
    :class:`RpcRegistry`, or the specs of several), in name order."""
    methods: list[dict[str, Any]] = []
    for spec in sorted(registry, key=lambda s: s.name):
        m: dict[str, Any] = {
            "name": spec.name,
            "paramStructure": "either",
            "params": [
                {
                    "name": p.name,
                    "required": p.required,
                    "schema": dict(p.schema),
                    **({"description": p.description} if p.description else {}),
                }
                for p in spec.params
            ],
            "result": {
                "name": f"{spec.name}.result",
                "schema": dict(spec.result) if spec.result is not None else {},
            },
        }
        if spec.summary:
            m["summary"] = spec.summary
        if spec.description:
            m["description"] = spec.description
        codes = sorted(set(spec.errors) | {INVALID_PARAMS} if spec.params else set(spec.errors))
        if codes:
            m["errors"] = [{"code": c, "message": CODE_MESSAGES.get(c, "Error")} for c in codes]
        methods.append(m)
    info: dict[str, Any] = {"title": title, "version": version}
    if description:
        info["description"] = description
    return {"openrpc": OPENRPC_VERSION, "info": info, "methods": methods}


def validate_openrpc(doc: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` if ``doc`` lacks what OpenRPC 1.2.6 requires (structural check)."""
    if doc.get("openrpc") != OPENRPC_VERSION:
        raise ValueError("openrpc version missing or wrong")
    info = doc.get("info")
    if not isinstance(info, Mapping) or not isinstance(info.get("title"), str):
        raise ValueError("info.title missing")
    if not isinstance(info.get("version"), str):
        raise ValueError("info.version missing")
    methods = doc.get("methods")
    if not isinstance(methods, list):
        raise ValueError("methods must be a list")
    names: set[str] = set()
    for m in methods:
        name = m.get("name")
        if not isinstance(name, str) or name in names:
            raise ValueError(f"method name missing or duplicated: {name!r}")
        names.add(name)
        if m.get("paramStructure", "either") not in {"by-name", "by-position", "either"}:
            raise ValueError(f"{name}: bad paramStructure")
        params = m.get("params")
        if not isinstance(params, list):
            raise ValueError(f"{name}: params must be a list")
        pnames = [p.get("name") for p in params]
        if len(set(pnames)) != len(pnames) or not all(isinstance(n, str) for n in pnames):
            raise ValueError(f"{name}: param names missing or duplicated")
        for p in params:
            check_schema(p.get("schema", {}), f"{name}/{p['name']}")
        result = m.get("result")
        if not isinstance(result, Mapping) or not isinstance(result.get("name"), str):
            raise ValueError(f"{name}: result must be a content descriptor with a name")
        check_schema(result.get("schema", {}), f"{name}/result")
        for err in m.get("errors", []):
            if not isinstance(err.get("code"), int) or not isinstance(err.get("message"), str):
                raise ValueError(f"{name}: error objects need an integer code and a message")


__all__ = [
    "OPENRPC_VERSION",
    "RESERVED_PREFIX",
    "MethodHandler",
    "MethodSpec",
    "Param",
    "RpcRegistry",
    "openrpc_document",
    "validate_openrpc",
]
