"""Limits on YAML from strangers: nesting depth, size, alias expansion, encoding.

Snapshot YAML arrives from any RPC client and manifests from peers. Each of these inputs once
crashed the process (SIGSEGV: PyYAML's C composer recursed past the stack) or escaped as an
untyped error; each must now be a :class:`~coordinator.errors.DecodeError`, checked before any
node is composed.
"""

from __future__ import annotations

import pytest

from coordinator.errors import DecodeError
from coordinator.metadata import yaml_serde as ys
from coordinator.metadata.snapshot import snapshot_to_yaml, snapshots_from_yaml

SNAPSHOT = """\
kind: DatasetSnapshot
version: 1
content:
  name: cities
  kind: Root
  metadata:
  - kind: SetInfo
    description: d
"""


def test_deep_flow_nesting_is_a_decode_error_not_a_crash() -> None:
    with pytest.raises(DecodeError, match="nested deeper than 128"):
        snapshots_from_yaml("[" * 30_000)
    with pytest.raises(DecodeError, match="nested deeper than 128"):
        snapshots_from_yaml("content: " + "{a: " * 30_000)


def test_deep_block_nesting_is_a_decode_error() -> None:
    text = "\n".join("  " * i + "-" for i in range(400)) + " x\n"
    with pytest.raises(DecodeError, match="nested deeper than 128"):
        ys.load_yaml_all(text)


def test_nesting_up_to_the_limit_is_accepted() -> None:
    depth = ys.MAX_YAML_DEPTH
    value = ys.load_yaml("[" * depth + "1" + "]" * depth)
    for _ in range(depth):
        assert isinstance(value, list)
        value = value[0]
    assert value == 1
    with pytest.raises(DecodeError, match="nested deeper"):
        ys.load_yaml("[" * (depth + 1) + "1" + "]" * (depth + 1))


def test_depth_counts_through_aliases() -> None:
    # 100 levels under an anchor, referenced 50 levels down: 150 once expanded.
    text = "a: &a " + "[" * 100 + "]" * 100 + "\nb: " + "[" * 50 + "*a" + "]" * 50 + "\n"
    with pytest.raises(DecodeError, match="through alias"):
        ys.load_yaml(text)


def test_billion_laughs_is_refused_quickly() -> None:
    lines = ['a0: &a0 "lol"']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 13)]
    with pytest.raises(DecodeError, match="more than 1000000 nodes"):
        ys.load_yaml("\n".join([*lines, "content: *a12"]))


def test_modest_alias_use_is_accepted() -> None:
    assert ys.load_yaml("a: &x [1, 2]\nb: *x\n") == {"a": [1, 2], "b": [1, 2]}


def test_recursive_alias_is_refused() -> None:
    # PyYAML would build a list containing itself, which any later walk recurses into forever.
    with pytest.raises(DecodeError, match="recursive YAML alias"):
        ys.load_yaml("a: &a [1, *a]\n")


def test_size_limit() -> None:
    big = "# " + "x" * ys.MAX_YAML_SIZE + "\n"
    with pytest.raises(DecodeError, match="too large"):
        snapshots_from_yaml(big)
    with pytest.raises(DecodeError, match="too large"):
        snapshots_from_yaml(big.encode())


def test_bytes_that_are_not_utf8_are_a_decode_error() -> None:
    with pytest.raises(DecodeError, match=r"not UTF-8: invalid byte 0xff at offset 14"):
        snapshots_from_yaml(SNAPSHOT.encode()[:14] + b"\xff" + SNAPSHOT.encode()[14:])
    with pytest.raises(DecodeError, match="not UTF-8"):
        snapshots_from_yaml(SNAPSHOT.encode() + b"\xc3")  # truncated sequence at the end
    # UTF-16 (libyaml would detect it from the BOM) is not what kamu reads either.
    with pytest.raises(DecodeError, match="not UTF-8"):
        snapshots_from_yaml(SNAPSHOT.encode("utf-16"))


def test_text_with_surrogates_is_a_decode_error() -> None:
    with pytest.raises(DecodeError):
        snapshots_from_yaml(SNAPSHOT.replace("d\n", "\udc80\n"))


def test_empty_or_comment_only_text_is_an_error() -> None:
    for text in ("", "# just a comment\n", "\n\n", b""):
        with pytest.raises(DecodeError, match="no DatasetSnapshot"):
            snapshots_from_yaml(text)


def test_an_invalid_document_is_named_by_number() -> None:
    bad = SNAPSHOT.replace("kind: Root", "kind: Nope")
    with pytest.raises(DecodeError, match=r"document 2 of 2: content\.kind"):
        snapshots_from_yaml(SNAPSHOT + "---\n" + bad)


def test_valid_snapshots_still_round_trip() -> None:
    (snapshot,) = snapshots_from_yaml(SNAPSHOT)
    assert snapshot_to_yaml(snapshot) == SNAPSHOT
    assert snapshots_from_yaml(SNAPSHOT.encode("utf-8")) == [snapshot]
    assert snapshots_from_yaml("\ufeff" + SNAPSHOT) == [snapshot]  # a UTF-8 BOM is fine
