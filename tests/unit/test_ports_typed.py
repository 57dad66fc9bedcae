"""No port says ``Any``: every parameter and return type of every port Protocol is spelled out.

A port is the contract between the use cases and their adapters (:mod:`node.app.ports`); an
``Any`` there lets an adapter return anything and the use case believe it.
"""

from __future__ import annotations

import inspect
import typing

import pyarrow

from node.app import jsontypes, ports


def _mentions_any(hint: object) -> bool:
    if hint is typing.Any:
        return True
    return any(_mentions_any(arg) for arg in typing.get_args(hint))


def _port_classes() -> list[type]:
    return [
        cls
        for name, cls in vars(ports).items()
        if inspect.isclass(cls) and getattr(cls, "_is_protocol", False) and name in ports.__all__
    ]


def test_every_port_signature_is_typed_without_any() -> None:
    classes = _port_classes()
    assert {c.__name__ for c in classes} >= {
        "EnginePort",
        "StatePort",
        "TransferPort",
        "IpfsPort",
        "QueryEnginePort",
        "AnswerStream",
    }
    offenders = []
    for cls in classes:
        for name, member in vars(cls).items():
            fn = member.fget if isinstance(member, property) else member
            if name.startswith("_") or not callable(fn):
                continue
            # Ports name Arrow types under TYPE_CHECKING (pyarrow is imported when data is read).
            hints = typing.get_type_hints(fn, {**vars(jsontypes), **vars(ports), "pa": pyarrow})
            offenders += [
                f"{cls.__name__}.{name}: {k}" for k, h in hints.items() if _mentions_any(h)
            ]
    assert offenders == []


def test_the_check_sees_an_any() -> None:
    assert _mentions_any(dict[str, typing.Any])
    assert _mentions_any(typing.Any | None)
    assert not _mentions_any(dict[str, int] | None)
