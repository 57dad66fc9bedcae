"""Fuzz: DatasetSnapshot YAML from users and from RPC callers.

``dataset create`` parses whatever text it is given, locally or as the ``dataset.create`` RPC of
any authenticated client. For every input the parser must return snapshots or raise an
:class:`~coordinator.errors.OdfNodeError` (never crash the process, never recurse past the stack,
never expand aliases without bound), quickly.

Generators: random text; documents built from nested flow and block collections (deep nesting,
the shape that once overflowed the C parser's stack); anchors and aliases (billion-laughs
expansion); valid snapshots with one field replaced; bytes that are not UTF-8.
"""

from __future__ import annotations

from fuzz_profile import fuzz
from hypothesis import example, given
from hypothesis import strategies as st
from strategies import dataset_snapshots

from coordinator.errors import OdfNodeError
from coordinator.metadata.snapshot import snapshot_to_yaml, snapshots_from_yaml


def parse(text: str | bytes) -> None:
    try:
        snapshots_from_yaml(text)
    except OdfNodeError:
        pass


@st.composite
def nested(draw: st.DrawFn) -> str:
    depth = draw(st.integers(1, 3000))
    opener, closer = draw(st.sampled_from([("[", "]"), ("{a: ", "}"), ("- ", "")]))
    if opener == "- ":
        return "\n".join("  " * i + "-" for i in range(min(depth, 400))) + " x\n"
    close = closer * depth if draw(st.booleans()) else ""
    return "content: " + opener * depth + "x" + close + "\n"


@st.composite
def laughs(draw: st.DrawFn) -> str:
    levels = draw(st.integers(1, 12))
    width = draw(st.integers(1, 10))
    lines = ['a0: &a0 "lol"']
    for i in range(1, levels + 1):
        refs = ", ".join(f"*a{i - 1}" for _ in range(width))
        lines.append(f"a{i}: &a{i} [{refs}]")
    lines.append(f"content: *a{levels}")
    return "\n".join(lines) + "\n"


@st.composite
def damaged_snapshot(draw: st.DrawFn) -> str:
    text = snapshot_to_yaml(draw(dataset_snapshots()))
    lines = text.splitlines()
    i = draw(st.integers(0, len(lines) - 1))
    lines[i] = draw(st.sampled_from(["", "  ? [", "!!python/object:os.system x", "&a *a", "\t- x"]))
    return "\n".join(lines)


@fuzz(300)
@given(st.text(max_size=2000))
def test_random_text_is_a_snapshot_or_a_typed_error(text: str) -> None:
    parse(text)


@fuzz(100)
@given(nested())
@example("[" * 30_000)  # exited with SIGSEGV (the C parser recursed past the stack)
@example("content: " + "{a: " * 30_000)
@example("\n".join("  " * i + "-" for i in range(5_000)))
def test_deep_nesting_is_refused_not_a_crash(text: str) -> None:
    parse(text)


@fuzz(50)
@given(laughs())
def test_alias_expansion_is_bounded(text: str) -> None:
    parse(text)


@fuzz(200)
@given(damaged_snapshot())
def test_a_damaged_snapshot_is_a_typed_error(text: str) -> None:
    parse(text)


@fuzz(200)
@given(st.binary(max_size=512))
def test_bytes_that_are_not_utf8_are_a_typed_error(data: bytes) -> None:
    parse(data)
