"""DID, did:key and multihash strings exactly as kamu prints them.

See docs/odf-wire-format.md, "Hashes and identifiers" and "Golden vectors".

Sources: kamu-cli v0.153.0 ``test_dataset_id.rs``, ``test_multihash.rs``, ``test_did_key.rs``.
"""

from __future__ import annotations

import pytest

from coordinator.errors import InvalidDatasetId, InvalidMultihash
from coordinator.identity import DatasetId
from coordinator.multiformats import Multicodec, Multihash

SEEDED = {
    b"multihash": "did:odf:fed012126262ba49e1ba8392c26f7a39e1ba8d756c7469786d3365200c68402ff65dc",
    b"input1": "did:odf:fed01816ef0a9abe93aba816ef0a9abe93aba90e6065747170300c0d3d30c2cd8d7a4",
    b"input2": "did:odf:fed01826ef0a9abea3a3a826ef0a9abea3a3a90e6065747270300c1d3b30a2cd9d724",
}


@pytest.mark.parametrize(("seed", "did"), SEEDED.items())
def test_seeded_ids(seed: bytes, did: str) -> None:
    d = DatasetId.new_seeded_ed25519(seed)
    assert d.as_did_str() == did
    assert d.as_multibase() == did.removeprefix("did:odf:")
    assert DatasetId.from_did_str(did) == d
    assert len(d.to_bytes()) == 34
    assert d.to_bytes()[:2] == b"\xed\x01"


def test_seeded_did_key() -> None:
    d = DatasetId.new_seeded_ed25519(b"multihash")
    assert d.as_did_key() == "did:key:z6MkggfEoTnRceFGdwjUtm1JaWeHQVKUpttKZUY6KAMaWvqq"
    assert DatasetId.from_did_key(d.as_did_key()) == d


def test_did_odf_to_did_key_and_base58_did() -> None:
    text = "did:odf:fed012e6fcce36701dc791488e0d0b1745cc1e33a4c1c9fcc41c63bd343dbbe0970e6"
    d = DatasetId.from_did_str(text)
    assert d.as_did_str() == text
    assert d.as_did_key() == "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK"
    z = DatasetId.from_did_str("did:odf:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK")
    assert z == d
    assert DatasetId.from_did_str("did:odf:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doL") != z


def test_spec_example_did() -> None:
    text = "did:odf:fed012126262ba49e1ba8392c26f7a39e1ba8d756c7469786d3365200c68402ff65dc"
    assert str(DatasetId.parse(text)) == text


@pytest.mark.parametrize(
    "bad",
    [
        "did:odf:",
        "did:odf:fed01",
        "did:odf:f1220" + "00" * 32,  # not an ed25519 key
        "did:odf:xyz",
        "did:web:example.com",
        "did:odf:Fed012126262BA49",  # mixed case
        "did:odf:zzzzzzzzz0OIl",  # invalid base58 characters
    ],
)
def test_bad_dids(bad: str) -> None:
    with pytest.raises(InvalidDatasetId):
        DatasetId.parse(bad)


def test_multihash_strings() -> None:
    h = Multihash.sha3_256(b"multihash")
    assert str(h) == "f162008c3792b2a4deed1bd7ea2328fb5de5531eccf0fbfa04a7d800cdc267137c635"
    assert h.to_multibase_base58() == "zW1a3CNT52HXiJNniLkWMeev3CPRy9QiNRMWGyTrVNg4hY8"
    assert Multihash.from_multibase("zW1a3CNT52HXiJNniLkWMeev3CPRy9QiNRMWGyTrVNg4hY8") == h
    assert h.short() == "7137c635"
    assert Multihash.from_multibase(str(h).upper().replace("F", "F", 1)) == h


def test_sha2_multihash_base58() -> None:
    h = Multihash.from_multibase("zQmYtUc4iTCbbfVSDNKvtQqrfyezPPnFvE33wFmutw9PBBk")
    assert h.code == Multicodec.SHA2_256
    assert str(h) == "f12209cbc07c3f991725836a3aa2a581ca2029198aa420b9d99bc0e131d9f3e2cbe47"


def test_arrow_logical_hash_prefix() -> None:
    h = Multihash(Multicodec.ARROW0_SHA3_256, bytes(32))
    assert str(h).startswith("f9680c00120")
    assert Multihash.from_multibase(str(h)) == h


@pytest.mark.parametrize("bad", ["", "f", "f1620", "f16", "f1620zz", "q1620", "f0120" + "00" * 32])
def test_bad_multihashes(bad: str) -> None:
    with pytest.raises(InvalidMultihash):
        Multihash.from_multibase(bad)
