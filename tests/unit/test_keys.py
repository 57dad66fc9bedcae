"""Key generation, signatures and key files (mode 0600, refused when exposed, never in repr)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from coordinator.errors import KeyFileError, SignatureError
from coordinator.identity import (
    DatasetId,
    generate_private_key,
    load_private_key,
    save_private_key,
    sign,
    verify_signature,
)


def test_sign_verify_roundtrip() -> None:
    key = generate_private_key(bytes(range(32)))
    did = key.dataset_id()
    sig = sign(key, b"hello")
    verify_signature(did, b"hello", sig)
    with pytest.raises(SignatureError):
        verify_signature(did, b"hellO", sig)
    with pytest.raises(SignatureError):
        verify_signature(DatasetId.new_seeded_ed25519(b"other"), b"hello", sig)
    with pytest.raises(SignatureError):
        verify_signature(did, b"hello", sig[:63])


def test_deterministic_key_source() -> None:
    a = generate_private_key(b"\x01" * 32)
    b = generate_private_key(b"\x01" * 32)
    assert a.dataset_id() == b.dataset_id()
    assert generate_private_key().dataset_id() != generate_private_key().dataset_id()


def test_repr_never_shows_secret() -> None:
    key = generate_private_key(b"\x07" * 32)
    assert key.seed().hex() not in repr(key)
    assert "redacted" in repr(key)


def test_key_file_mode_and_roundtrip(tmp_path: Path) -> None:
    key = generate_private_key(b"\x02" * 32)
    path = tmp_path / "keys" / "k.key"
    save_private_key(path, key)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_private_key(path).dataset_id() == key.dataset_id()
    assert not [p for p in path.parent.iterdir() if p.name != "k.key"], "no temp files left"


def test_key_file_refused_when_readable_by_others(tmp_path: Path) -> None:
    path = tmp_path / "k.key"
    save_private_key(path, generate_private_key())
    os.chmod(path, 0o644)
    with pytest.raises(KeyFileError, match="chmod 600"):
        load_private_key(path)


def test_key_file_malformed_or_tampered(tmp_path: Path) -> None:
    path = tmp_path / "k.key"
    save_private_key(path, generate_private_key(b"\x03" * 32))
    lines = path.read_text().splitlines()
    lines[1] = DatasetId.new_seeded_ed25519(b"x").as_did_str()
    path.write_text("\n".join(lines))
    os.chmod(path, 0o600)
    with pytest.raises(KeyFileError, match="does not match"):
        load_private_key(path)
    path.write_text("garbage")
    with pytest.raises(KeyFileError):
        load_private_key(path)
    with pytest.raises(KeyFileError, match="not found"):
        load_private_key(tmp_path / "missing.key")
