"""Properties of the RPC body scanner (``node.rpc.server.nested_too_deep``, issue 26).

The scanner replaced a quadratic one; the former implementation is kept here as the reference
(on small inputs it is fast enough). For every valid JSON text, however deep and whatever its
strings hold (quotes, backslashes, brackets), the new scanner gives the reference's verdict and
the true depth of the decoded value. For any text at all, :func:`parse_json_body` accepts
exactly what it accepted before, with the same payload (for invalid JSON only the error message
may differ: the decoder or the scanner may be the one to refuse it).
"""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

from fuzz_profile import fuzz
from hostile_bodies import adversarial_bodies
from hypothesis import example, given
from hypothesis import strategies as st

from node.rpc.server import MAX_JSON_DEPTH, nested_too_deep, parse_json_body

# -- the former scanner, the reference ------------------------------------------------------------

_OLD_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_OLD_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def reference_depth(text: str) -> int:
    """The former ``_nesting_depth``: strings removed, the running bracket depth's maximum."""
    brackets = _OLD_NOT_BRACKET.sub("", _OLD_STRING.sub("", text))
    return max(itertools.accumulate(map(_STEP.__getitem__, brackets)), default=0)


def reference_parse(body: bytes) -> tuple[Any, str | None]:
    """The former ``parse_json_body``."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return None, "the body is not UTF-8"
    opened = text.count("[") + text.count("{")
    if opened > MAX_JSON_DEPTH and reference_depth(text) > MAX_JSON_DEPTH:
        return None, "too deep"

    def refuse(name: str) -> Any:
        raise ValueError(name)

    try:
        return json.loads(text, parse_constant=refuse), None
    except (ValueError, RecursionError) as exc:
        return None, type(exc).__name__


def structural_depth(value: Any) -> int:
    """Arrays/objects nested in a decoded value (a scalar: 0, ``[]``: 1), without recursion."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        v, d = stack.pop()
        children = v if isinstance(v, list) else v.values() if isinstance(v, dict) else None
        if children is None:
            continue
        deepest = max(deepest, d)
        stack.extend((c, d + 1) for c in children)
    return deepest


# -- generators ------------------------------------------------------------------------------------

# Strings full of what a scanner could mistake for structure.
_TRICKY = st.text(
    st.sampled_from([*'[]{}"\\/,: \n\t', "a", "é", "\u2028", "\x00", "\ud7ff"]),
    max_size=12,
)
_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    _TRICKY,
    st.text(max_size=8),
)
_VALUES = st.recursive(
    _LEAVES,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TRICKY, inner, max_size=4),
    max_leaves=16,
)


@st.composite
def deep_values(draw: st.DrawFn) -> Any:
    """A value wrapped in 0..70 arrays/objects (with siblings): depths on both sides of 64."""
    value = draw(_VALUES)
    for _ in range(draw(st.integers(min_value=0, max_value=MAX_JSON_DEPTH + 6))):
        sibling = draw(_LEAVES)
        if draw(st.booleans()):
            value = [sibling, value] if draw(st.booleans()) else [value]
        else:
            value = {draw(_TRICKY): value, "s": sibling}
    return value


@st.composite
def json_texts(draw: st.DrawFn) -> tuple[Any, str]:
    """A value and one of its JSON spellings (ASCII-escaped or not, compact or indented)."""
    value = draw(deep_values())
    text = json.dumps(
        value,
        ensure_ascii=draw(st.booleans()),
        indent=draw(st.sampled_from([None, 0, 2])),
        separators=draw(st.sampled_from([None, (",", ":")])),
    )
    return value, text


# Fragments of (mostly invalid) JSON: quotes, escapes and brackets in every order.
_FRAGMENTS = st.sampled_from(
    ["[", "]", "{", "}", '"', '\\"', "\\", "\\\\", '"a"', "1", ",", ":", " ", '"[', ']"', "[" * 65]
)


# -- properties ------------------------------------------------------------------------------------


@fuzz(300)
@given(json_texts())
@example(([], "[" * 64 + "]" * 64))
@example(([], "[" * 65 + "]" * 65))
@example(([], '["' + '\\"' * 50 + '"' + ", []" * 70 + "]"))
def test_valid_json_gets_the_verdict_of_the_reference_and_of_its_true_depth(
    case: tuple[Any, str],
) -> None:
    _, text = case
    depth = structural_depth(json.loads(text))
    assert reference_depth(text) == depth
    assert nested_too_deep(text) == (depth > MAX_JSON_DEPTH)
    body = text.encode("utf-8", "surrogatepass")
    new, new_problem = parse_json_body(body)
    old, old_problem = reference_parse(body)
    assert (new_problem is None) == (old_problem is None) == (depth <= MAX_JSON_DEPTH)
    assert json.dumps(new) == json.dumps(old)


@fuzz(600)
@given(st.lists(_FRAGMENTS, max_size=120).map("".join))
@example("]" + "[" * 70)
@example("[" * 70)
@example("[" * 65 + '"' + '\\"' * 20)
@example("[" * 64 + '"]' + "]" * 64)
def test_any_text_is_accepted_exactly_as_before(text: str) -> None:
    new, new_problem = parse_json_body(text.encode())
    old, old_problem = reference_parse(text.encode())
    assert (new_problem is None) == (old_problem is None), (new_problem, old_problem)
    assert new == old
    if new_problem is None:
        assert structural_depth(new) <= MAX_JSON_DEPTH


@fuzz(100)
@given(adversarial_bodies(max_size=4_096))
def test_adversarial_bodies_are_answered_as_before(body: bytes) -> None:
    new, new_problem = parse_json_body(body)
    old, old_problem = reference_parse(body)
    assert (new_problem is None) == (old_problem is None)
    assert new == old
