"""The DHT's wire format (``p2p/dht/wire.py``): frozen vectors (literal bytes: a change of the
encoding fails here, and must come with a new version), round trips, strict decoding, caps, and
signed provider records that cannot be forged or re-signed by a relaying node."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.identity import PrivateKey
from p2p.dht.keys import DhtKey, dataset_key, peer_key
from p2p.dht.wire import (
    MAX_PEERS,
    PROTOCOL,
    DhtOp,
    DhtRequest,
    DhtResponse,
    PeerInfo,
    SignedProviderRecord,
    Status,
    decode_record,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from p2p.errors import WireDecodeError, WireEncodeError
from p2p.transport import peer_id_of_node

NODE_KEY = PrivateKey.from_seed(bytes(range(32)))
DID = PrivateKey.from_seed(bytes([7]) * 32).dataset_id()
GOSSIP = ("/ip4/127.0.0.1/tcp/4001/p2p/12D3KooWA",)
HTTP = "http://127.0.0.1:8080"

# ---- frozen vectors (ed25519 signatures are deterministic)

RECORD_HEX = (
    "4f44465201ed01ea4a6c63e29c520abef5507b132ec5f9954776aebebe7b92421eea691446d22ced0103a1"
    "07bff3ce10be1d70dd18e74bc09967e4d6309ba50d5f1ddc8664125531b80000018bcfe568000100252f69"
    "70342f3132372e302e302e312f7463702f343030312f7032702f313244334b6f6f5741000015687474703a"
    "2f2f3132372e302e302e313a3830383017980f336cc3a89a6e119c44021747292a5b296aec04482dae0f52"
    "3229101e3bb069491b779ee78b943162dfa50ded3462b3ef47242f5ad0d38fd77f74230b0c"
)
FIND_NODE_HEX = "4f44464b0101805cdd78aec3947c92dc42b01feb26e7786e7e7b964524dedf2c32caaa6cf5a900"
ADD_PROVIDER_HEX = (
    "4f44464b0103805cdd78aec3947c92dc42b01feb26e7786e7e7b964524dedf2c32caaa6cf5a90100172f69"
    "70342f3132372e302e302e312f7463702f3430303100d1" + RECORD_HEX
)
RESPONSE_HEX = (
    "4f44464b01800000000000010009313244334b6f6f57420100172f6970342f3132372e302e302e312f7463"
    "702f343030320100d1" + RECORD_HEX
)
RATE_LIMITED_HEX = "4f44464b018002000005dc0000"


def _record() -> SignedProviderRecord:
    return SignedProviderRecord.sign(NODE_KEY, DID, 1_700_000_000_000, gossip=GOSSIP, http=HTTP)


def test_protocol_id_is_private() -> None:
    assert PROTOCOL == "/odf/kad/1.0.0"


def test_frozen_vectors() -> None:
    rec = _record()
    assert rec.encoded.hex() == RECORD_HEX
    assert encode_request(DhtRequest(DhtOp.FIND_NODE, dataset_key(DID))).hex() == FIND_NODE_HEX
    add = DhtRequest(
        DhtOp.ADD_PROVIDER, dataset_key(DID), ("/ip4/127.0.0.1/tcp/4001",), rec.encoded
    )
    assert encode_request(add).hex() == ADD_PROVIDER_HEX
    resp = DhtResponse(
        Status.OK, 0, (PeerInfo("12D3KooWB", ("/ip4/127.0.0.1/tcp/4002",)),), (rec.encoded,)
    )
    assert encode_response(resp).hex() == RESPONSE_HEX
    assert encode_response(DhtResponse(Status.RATE_LIMITED, 1500)).hex() == RATE_LIMITED_HEX
    # ... and the frozen bytes decode to the same values.
    assert decode_request(bytes.fromhex(ADD_PROVIDER_HEX)) == add
    assert decode_response(bytes.fromhex(RESPONSE_HEX)) == resp
    assert decode_response(bytes.fromhex(RATE_LIMITED_HEX)).retry_after_ms == 1500
    got = decode_record(bytes.fromhex(RECORD_HEX))
    assert (got.did, got.node, got.issued_ms) == (DID, NODE_KEY.dataset_id(), 1_700_000_000_000)
    assert (got.gossip, got.ipfs, got.http) == (GOSSIP, (), HTTP)


def test_keys_of_dids_and_peers() -> None:
    assert dataset_key(DID) == DhtKey(
        int("805cdd78aec3947c92dc42b01feb26e7786e7e7b964524dedf2c32caaa6cf5a9", 16)
    )
    assert peer_key("12D3KooWA") != peer_key("12D3KooWB")


def test_a_record_names_its_signer_s_peer() -> None:
    rec = decode_record(_record().encoded)
    assert peer_id_of_node(rec.node) == peer_id_of_node(NODE_KEY.dataset_id())


@pytest.mark.parametrize("at", [6, 40, 80, 120, 208])
def test_a_changed_record_byte_fails_its_signature_or_its_format(at: int) -> None:
    data = bytearray(_record().encoded)
    data[at] ^= 1
    with pytest.raises(WireDecodeError):
        decode_record(bytes(data))


def test_a_relaying_node_cannot_sign_another_s_record() -> None:
    # A forger signs a record naming the owner's node key: the signature is checked against
    # the named node, so it fails.
    forger = PrivateKey.from_seed(bytes([9]) * 32)
    forged = bytearray(SignedProviderRecord.sign(forger, DID, 1).encoded)
    forged[39:73] = NODE_KEY.dataset_id().to_bytes()
    with pytest.raises(WireDecodeError) as e:
        decode_record(bytes(forged))
    assert e.value.reason == "bad-signature"


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (bytes.fromhex(FIND_NODE_HEX)[:-1], "truncated"),
        (bytes.fromhex(FIND_NODE_HEX) + b"\x00", "trailing-bytes"),
        (b"ODFX" + bytes.fromhex(FIND_NODE_HEX)[4:], "bad-magic"),
        (
            bytes.fromhex(FIND_NODE_HEX)[:4] + b"\x02" + bytes.fromhex(FIND_NODE_HEX)[5:],
            "bad-version",
        ),
        (bytes.fromhex(FIND_NODE_HEX)[:5] + b"\x09" + bytes.fromhex(FIND_NODE_HEX)[6:], "bad-op"),
        (bytes.fromhex(FIND_NODE_HEX)[:-1] + b"\x05", "too-many"),
        (b"\x00" * 70_000, "too-large"),
    ],
)
def test_requests_decode_strictly(data: bytes, reason: str) -> None:
    with pytest.raises(WireDecodeError) as e:
        decode_request(data)
    assert e.value.reason == reason


def test_responses_decode_strictly() -> None:
    good = bytes.fromhex(RATE_LIMITED_HEX)
    for bad, reason in [
        (good[:-1], "truncated"),
        (good + b"\x00", "trailing-bytes"),
        (good[:6] + b"\x07" + good[7:], "bad-status"),
        (good[:5] + b"\x01" + good[6:], "bad-op"),
        (good[:11] + bytes([MAX_PEERS + 1]) + good[12:], "too-many"),
    ]:
        with pytest.raises(WireDecodeError) as e:
            decode_response(bad)
        assert e.value.reason == reason, bad.hex()


def test_caps_are_enforced_when_encoding() -> None:
    with pytest.raises(WireEncodeError):
        encode_request(
            DhtRequest(DhtOp.FIND_NODE, dataset_key(DID), tuple(f"/a/{i}" for i in range(5)))
        )
    with pytest.raises(WireEncodeError):
        encode_request(DhtRequest(DhtOp.ADD_PROVIDER, dataset_key(DID)))
    with pytest.raises(WireEncodeError):
        encode_request(DhtRequest(DhtOp.GET_PROVIDERS, dataset_key(DID), (), b"x"))
    with pytest.raises(WireEncodeError):
        encode_response(DhtResponse(closer=tuple(PeerInfo(f"p{i}") for i in range(MAX_PEERS + 1))))
    with pytest.raises(WireEncodeError):
        SignedProviderRecord.sign(NODE_KEY, DID, 1, http="x" * 600)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([ADD_PROVIDER_HEX, RESPONSE_HEX, RECORD_HEX]), st.data())
def test_mangled_bytes_fail_only_as_decode_errors(vector: str, data: st.DataObject) -> None:
    raw = bytearray(bytes.fromhex(vector))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(raw)))
    for decode in (decode_request, decode_response, decode_record):
        for candidate in (bytes(raw), bytes(raw[:cut])):
            try:
                decode(candidate)
            except WireDecodeError:
                pass


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(list(DhtOp)),
    st.integers(0, (1 << 256) - 1),
    st.lists(st.text(min_size=1, max_size=40), max_size=4),
)
def test_requests_round_trip(op: DhtOp, key: int, addrs: list[str]) -> None:
    record = _record().encoded if op is DhtOp.ADD_PROVIDER else b""
    req = DhtRequest(op, DhtKey(key), tuple(addrs), record)
    assert decode_request(encode_request(req)) == req
