"""ed25519 key pairs, signatures and key files.

Key files hold the raw 32-byte private seed as multibase base16 text, written atomically with
mode 0600 and refused on read if group/other can access them. Keys never appear in ``repr`` or
logs.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from coordinator.errors import KeyFileError, SignatureError
from coordinator.identity.dataset_id import DatasetId

_KEY_FILE_HEADER = "odf-node-ed25519-private-key-v1"


class PrivateKey:
    """An ed25519 private key. Its ``repr`` never shows key material."""

    __slots__ = ("_key",)

    def __init__(self, key: Ed25519PrivateKey) -> None:
        self._key = key

    @classmethod
    def from_seed(cls, seed: bytes) -> PrivateKey:
        """Build from the 32-byte private seed (e.g. from an injected key source)."""
        if len(seed) != 32:
            raise KeyFileError("ed25519 private seed must be 32 bytes")
        return cls(Ed25519PrivateKey.from_private_bytes(seed))

    def seed(self) -> bytes:
        """The raw 32-byte private seed. Handle with care."""
        from cryptography.hazmat.primitives.serialization import NoEncryption, PrivateFormat

        return self._key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())

    def public_key_bytes(self) -> bytes:
        """The raw 32-byte ed25519 public key."""
        return self._key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)

    def dataset_id(self) -> DatasetId:
        """The ``did:odf`` identity of this key."""
        return DatasetId(self.public_key_bytes())

    def sign(self, message: bytes) -> bytes:
        """A 64-byte ed25519 signature over ``message``."""
        return self._key.sign(message)

    def __repr__(self) -> str:
        return f"PrivateKey(<redacted>, {self.dataset_id().as_did_str()})"


def generate_private_key(random_bytes: bytes | None = None) -> PrivateKey:
    """A new key pair. ``random_bytes`` (32 bytes) makes it deterministic for tests."""
    if random_bytes is not None:
        return PrivateKey.from_seed(random_bytes)
    return PrivateKey(Ed25519PrivateKey.generate())


def sign(key: PrivateKey, message: bytes) -> bytes:
    """Sign ``message`` with ``key``."""
    return key.sign(message)


def verify_signature(signer: DatasetId, message: bytes, signature: bytes) -> None:
    """Check an ed25519 signature by the key behind ``signer``.

    Raises:
        SignatureError: the signature is malformed or does not verify.
    """
    if len(signature) != 64:
        raise SignatureError(f"ed25519 signature must be 64 bytes, got {len(signature)}")
    try:
        Ed25519PublicKey.from_public_bytes(signer.public_key).verify(signature, message)
    except (InvalidSignature, ValueError) as e:
        raise SignatureError(f"signature does not verify for {signer.as_did_str()}") from e


def save_private_key(path: Path, key: PrivateKey) -> None:
    """Write ``key`` to ``path`` atomically with mode 0600 (never world/group readable)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(f"{_KEY_FILE_HEADER}\n{key.dataset_id().as_did_str()}\nf{key.seed().hex()}\n")
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def load_private_key(path: Path) -> PrivateKey:
    """Read a key written by :func:`save_private_key`.

    Raises:
        KeyFileError: missing, malformed, mismatching public key, or unsafe permissions.
    """
    try:
        st = path.stat()
    except FileNotFoundError as e:
        raise KeyFileError(f"key file not found: {path}") from e
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise KeyFileError(
            f"key file {path} is accessible by group/others (mode {stat.S_IMODE(st.st_mode):o}); "
            "run: chmod 600 " + str(path)
        )
    lines = path.read_text(encoding="ascii").split()
    if len(lines) != 3 or lines[0] != _KEY_FILE_HEADER or not lines[2].startswith("f"):
        raise KeyFileError(f"malformed key file: {path}")
    try:
        key = PrivateKey.from_seed(bytes.fromhex(lines[2][1:]))
    except ValueError as e:
        raise KeyFileError(f"malformed key file: {path}") from e
    if key.dataset_id().as_did_str() != lines[1]:
        raise KeyFileError(f"key file {path}: private key does not match the recorded DID")
    return key
