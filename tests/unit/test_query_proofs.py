"""kamu's verifiable-query commitments reproduced byte for byte (``node/app/query_proofs.py``).

Frozen vectors:

* kamu-data/kamu-cli ``src/adapter/http/tests/tests/test_data_query.rs``
  (``test_data_verify_handler``, ``test_data_query_handler_success``): a response made by a
  kamu node whose key is the ed25519 seed ``[123; 32]``, its commitment and proof, and the
  tampered requests kamu's ``/verify`` answers with each error kind;
* mozilla-services/canonicaljson-rs ``src/ser.rs`` (``test_to_string``): the canonical JSON
  crate kamu hashes with (numbers and string escapes).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from coordinator.identity import DatasetId
from coordinator.identity.keys import PrivateKey
from coordinator.multiformats import Multihash
from node.app.query_proofs import (
    CommitmentError,
    CommitmentSigner,
    canonical_json,
    check_commitment,
    check_signature,
    dataset_block_not_found_error,
    dataset_not_found_error,
    decode_signature,
    encode_signature,
    hash_of,
    make_commitment,
    output_mismatch_error,
    verify_response,
)

KAMU_KEY = PrivateKey.from_seed(bytes([123] * 32))
KAMU_DID_KEY = "did:key:z6Mko2nqhQ9wYSTS5Giab2j1aHzGnxHimqwmFeEVY8aNsVnN"
QUERY = 'select offset, city, population from "kamu-server/population" order by offset desc'
BLOCK = "f1620efdd11877825ad5f30fce4fb64a130e3d6273ea8fc81d72507c59081cc1d430e"
DATASET = "did:odf:fed01df230b49615d175307d580c33d6fda61fc7b9aec91df0f5c1a5ebe3b8cbfee02"

# test_data_verify_handler: the response kamu's /query gave with include: ["proof"].
KAMU_RESPONSE: dict[str, Any] = {
    "input": {
        "include": ["Input", "Proof"],
        "query": QUERY,
        "queryDialect": "SqlDataFusion",
        "dataFormat": "JsonAoS",
        "skip": 0,
        "limit": 100,
        "datasets": [{"alias": "kamu-server/population", "blockHash": BLOCK, "id": DATASET}],
    },
    "output": {
        "data": [
            {"city": "B", "offset": 1, "population": 200},
            {"city": "A", "offset": 0, "population": 100},
        ],
        "dataFormat": "JsonAoS",
    },
    "subQueries": [],
    "commitment": {
        "inputHash": "f1620ef74430b1ad8916e80c148f7a9e8815ca702610a2655971b2f9852f00d5caa31",
        "outputHash": "f1620ff7f5beaf16900218a3ac4aae82cdccf764816986c7c739c716cf7dc03112a2c",
        "subQueriesHash": "f1620ca4510738395af1429224dd785675309c344b2b549632e20275c69b15ed1d210",
    },
    "proof": {
        "type": "Ed25519Signature2020",
        "verificationMethod": KAMU_DID_KEY,
        "proofValue": "u43jJXaMAJCmMzZ0SL2HBQloggw5PQzOnG7gCPTZAoJKCtAx-mrhSmqtWna676x3gm09_b0V7"
        "_Qb8zcca8nuABg",
    },
}


def _request() -> dict[str, Any]:
    """The verify request kamu's test builds: the response without its output."""
    r = copy.deepcopy(KAMU_RESPONSE)
    del r["output"]
    return r


def _resign(request: dict[str, Any]) -> None:
    request["proof"] = CommitmentSigner(KAMU_DID_KEY, KAMU_KEY.sign).proof(request["commitment"])


def test_the_kamu_node_key_is_its_did_key() -> None:
    assert KAMU_KEY.dataset_id().as_did_key() == KAMU_DID_KEY


def test_a_kamu_made_commitment_is_rebuilt_byte_for_byte() -> None:
    r = KAMU_RESPONSE
    assert make_commitment(r["input"], r["output"], r["subQueries"]) == r["commitment"]
    # ed25519 signatures are deterministic: signing the same commitment gives kamu's proof.
    assert CommitmentSigner(KAMU_DID_KEY, KAMU_KEY.sign).proof(r["commitment"]) == r["proof"]


def test_a_kamu_made_commitment_verifies() -> None:
    assert check_commitment(_request()) is None


def test_kamus_proof_of_a_response_with_a_schema_verifies() -> None:
    # test_data_query_handler_success, "3: Full with proof": the signature over the commitment.
    commitment = {
        "inputHash": "f16207ec84999fec29898a304aab4c4990bff33e455a409c0c2958894ecb87717dc6a",
        "outputHash": "f16208d66e08ce876ba35ce00ea56f02faf83dbc086f877c443e3d493427ccad133f1",
        "subQueriesHash": "f1620ca4510738395af1429224dd785675309c344b2b549632e20275c69b15ed1d210",
    }
    proof = {
        "type": "Ed25519Signature2020",
        "verificationMethod": KAMU_DID_KEY,
        "proofValue": "uu5cFSKBj004FnB-e4dRajWz5q6loJDMMH-2_WwilhJarqBnwm0urFzZKVTk5OYzUMz75sukM"
        "jb5u8A--aR5tDg",
    }
    assert check_signature(commitment, proof) is None


def test_a_changed_input_hash_is_invalid_request_input_hash() -> None:
    r = _request()
    r["commitment"]["inputHash"] = (
        "f1620c3e929e13d3f0f55ce24e7579919e01b356e79b4212a622b4fc2e7b0acb10d0e"
    )
    assert check_commitment(r) == {
        "kind": "InvalidRequest::InputHash",
        "message": "The commitment is invalid and cannot be disputed: commitment.inputHash "
        "doesn't match the hash of input object",
    }


def test_a_changed_sub_queries_hash_is_invalid_request_sub_queries_hash() -> None:
    r = _request()
    r["commitment"]["subQueriesHash"] = (
        "f1620ca4510738395af1429224dd785675309c344b2b549632e20275c69b15ed1d211"
    )
    assert check_commitment(r) == {
        "kind": "InvalidRequest::SubQueriesHash",
        "message": "The commitment is invalid and cannot be disputed: commitment.subQueriesHash "
        "doesn't match the hash of subQueries object",
    }


def test_another_signature_is_invalid_request_bad_signature() -> None:
    r = _request()
    r["proof"]["proofValue"] = (
        "uZbm7fFcWc4l6iyvaKe_txdKntL3h3kvsGHOaKIbPV6c42PH1VnSmpYHMopv4TU68syzgoEdcS26AvpkSQb9dBQ"
    )
    assert check_commitment(r) == {
        "kind": "InvalidRequest::BadSignature",
        "message": "The commitment is invalid and cannot be disputed: "
        "Verification equation was not satisfied",
    }


def test_a_changed_input_without_a_new_hash_is_invalid_request_input_hash() -> None:
    r = _request()
    r["input"]["limit"] = 101
    assert check_commitment(r)["kind"] == "InvalidRequest::InputHash"  # type: ignore[index]


def test_a_forged_output_hash_resigned_passes_the_offline_check() -> None:
    # kamu's "Output mismatch" case: only reproducing the query can catch it (/verify step 2).
    r = _request()
    r["commitment"]["outputHash"] = (
        "f1620ff7f5beaf16900218a3ac4aae82cdccf764816986c7c739c716cf7dc03112a2d"
    )
    _resign(r)
    assert check_commitment(r) is None


def test_a_forged_input_rehashed_and_resigned_passes_the_offline_check() -> None:
    # kamu's "Dataset is missing" case: an unknown dataset id with matching hashes.
    r = _request()
    foo = DatasetId.new_seeded_ed25519(b"foo").as_did_str()
    assert foo == ("did:odf:fed01666f6fb3b7370000666f6fb3b737000060f6f60600000000895cddbcb7f7b8cc")
    r["input"]["datasets"][0]["id"] = foo
    r["commitment"]["inputHash"] = hash_of(r["input"])
    _resign(r)
    assert check_commitment(r) is None


def test_the_error_shapes_are_kamus() -> None:
    foo = DatasetId.new_seeded_ed25519(b"foo").as_did_str()
    block = Multihash.sha3_256(b"foo").to_multibase()
    assert block == "f162076d3bc41c9f588f7fcd0d5bf4718f8f84b1c41b20882703100b9eb9413807c01"
    assert verify_response(dataset_not_found_error(foo)) == {
        "ok": False,
        "error": {
            "kind": "VerificationFailed::DatasetNotFound",
            "dataset_id": foo,
            "message": "Unable to reproduce the query as one of the input datasets cannot be "
            "found. The owner of dataset either deleted it or made private or this node requires "
            "additional configuration in order to locate it.",
        },
    }
    assert dataset_block_not_found_error(DATASET, block) == {
        "kind": "VerificationFailed::DatasetBlockNotFound",
        "block_hash": block,
        "dataset_id": DATASET,
        "message": "Unable to reproduce the query as one of the input datasets does not contain "
        "a block with specified hash. Under normal circumstances a block can disappear only "
        "when the owner of dataset performs history-altering operation such as reset or hard "
        "compaction. There is also a probability that block hash was spoofed in the original "
        "request to falsify the results.",
    }
    assert output_mismatch_error("f1620a", "f1620b") == {
        "kind": "VerificationFailed::OutputMismatch",
        "actual_hash": "f1620b",
        "expected_hash": "f1620a",
        "message": "Query was reproduced but resulted in output hash different from expected. "
        "This means that the output was either falsified, or the query reproducibility was not "
        "guaranteed by the system.",
    }
    assert verify_response(None) == {"ok": True}


def test_a_request_missing_a_part_is_refused() -> None:
    r = _request()
    del r["subQueries"]
    with pytest.raises(CommitmentError, match="subQueries"):
        check_commitment(r)
    r = _request()
    r["proof"]["type"] = "EcdsaSecp256k1Signature2019"
    with pytest.raises(CommitmentError, match="proof type"):
        check_commitment(r)


def test_a_malformed_verification_method_or_signature_is_a_bad_signature() -> None:
    r = _request()
    r["proof"]["verificationMethod"] = "did:key:nonsense"
    assert check_commitment(r)["kind"] == "InvalidRequest::BadSignature"  # type: ignore[index]
    r = _request()
    r["proof"]["proofValue"] = "u" + "A" * 10
    assert check_commitment(r)["kind"] == "InvalidRequest::BadSignature"  # type: ignore[index]


def test_signature_multibase_round_trip() -> None:
    sig = KAMU_KEY.sign(b"x")
    text = encode_signature(sig)
    assert text.startswith("u") and "=" not in text
    assert decode_signature(text) == sig
    assert decode_signature("f" + sig.hex()) == sig


# ---- canonicaljson-rs src/ser.rs test_to_string


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, "null"),
        (float("nan"), "null"),
        (float("inf"), "null"),
        (float("-inf"), "null"),
        (True, "true"),
        (False, "false"),
        (0, "0"),
        (123, "123"),
        (-123, "-123"),
        (23.1, "2.31E1"),
        (23, "23"),
        (1.0, "1E0"),
        (0.0, "0E0"),
        (23.0, "2.3E1"),
        (-23.0, "-2.3E1"),
        (2300, "2300"),
        (0.00099, "9.9E-4"),
        (0.000011, "1.1E-5"),
        (0.0000011, "1.1E-6"),
        (0.000001, "1E-6"),
        (5.6, "5.6E0"),
        (0.00000099, "9.9E-7"),
        (0.0000001, "1E-7"),
        (0.000000930258908, "9.30258908E-7"),
        (0.00000000000068272, "6.8272E-13"),
        (10.0**21, "1E21"),
        (10.0**20, "1E20"),
        (10.0**15 + 0.1, "1.0000000000000001E15"),
        (10.0**16 * 1.1, "1.1E16"),
        ("", '""'),
        (" Preserve single quotes'in string", '" Preserve single quotes\'in string"'),
        (' Escapes quotes " ', r'" Escapes quotes \" "'),
        ("This\\and this", r'"This\\and this"'),
        ("I ❤ testing", r'"I \u2764 testing"'),
        ("This is a sentence.\n", r'"This is a sentence.\n"'),
        ("This is a \t tab.", r'"This is a \t tab."'),
        ("This is a \r carriage return char.", r'"This is a \r carriage return char."'),
        ("image//jpeg", '"image//jpeg"'),
        ("frequency at 10.0e+04", '"frequency at 10.0e+04"'),
        ("I \\u{} testing", r'"I \\u{} testing"'),
        ("I \\u{1234 testing", r'"I \\u{1234 testing"'),
        ("𝄞", r'"\ud834\udd1e"'),
        ("𝗠𝗼𝘇", r'"\ud835\udde0\ud835\uddfc\ud835\ude07"'),
        ("\U00010000 \U0010ffff", r'"\ud800\udc00 \udbff\udfff"'),
        ({"a": "a", "id": "1", "b": "b"}, '{"a":"a","b":"b","id":"1"}'),
        ({"é": "check"}, r'{"\u00e9":"check"}'),
        (
            {
                "def": "bar",
                "abc": 0.000000930258908,
                "ghi": 1000000000000000000000.0,
                "rust": "❤",
                "zoo": ["zorilla", "anteater"],
            },
            r'{"abc":9.30258908E-7,"def":"bar","ghi":1E21,"rust":"\u2764",'
            r'"zoo":["zorilla","anteater"]}',
        ),
        ([], "[]"),
        ([{"key": "✓"}], r'[{"key":"\u2713"}]'),
    ],
)
def test_canonical_json_matches_the_crate(value: Any, expected: str) -> None:
    assert canonical_json(value) == expected.encode()


def test_control_characters_and_del_are_escaped() -> None:
    # serde_json's escapes for controls; Rust's escape_default for DEL (0x7f).
    assert canonical_json("\x00\x01\x1f\x7f\b\f") == rb'"\u0000\u0001\u001f\u007f\b\f"'


def test_integers_past_u64_are_floats_as_in_serde_json() -> None:
    assert canonical_json(2**64) == b"1.8446744073709552E19"
    assert canonical_json(2**64 - 1) == b"18446744073709551615"
    assert canonical_json(-(2**63)) == b"-9223372036854775808"


def test_non_json_values_are_refused() -> None:
    with pytest.raises(CommitmentError):
        canonical_json(b"bytes")
    with pytest.raises(CommitmentError):
        canonical_json({1: "x"})


def test_the_golden_file_is_kamus_response() -> None:
    # tests/golden/data/kamu_query_commitment.json: KAMU_RESPONSE as a file (the CLI's input).
    import json
    from pathlib import Path

    path = Path(__file__).parents[1] / "golden" / "data" / "kamu_query_commitment.json"
    saved = json.loads(path.read_text())
    assert saved == KAMU_RESPONSE
    assert check_commitment({k: v for k, v in saved.items() if k != "output"}) is None


def test_the_fast_string_escapes_are_the_reference_ones() -> None:
    import random

    from node.app.query_proofs import _string_text_reference, string_text

    rng = random.Random(40)
    samples = ["", "plain", "\x00\x1f\x7f\x80\xff", "\ud7ff\ue000\uffff", "𝄞\U0010ffff"]
    for _ in range(2000):
        samples.append(
            "".join(
                chr(
                    rng.choice(
                        (
                            rng.randrange(0, 0x80),
                            rng.randrange(0, 0xD800),
                            rng.randrange(0xE000, 0x110000),
                        )
                    )
                )
                for _ in range(rng.randrange(0, 12))
            )
        )
    for s in samples:
        assert string_text(s) == _string_text_reference(s), repr(s)
    printable = "".join(chr(c) for c in range(0x20, 0x7F) if chr(c) not in '"\\')
    assert string_text(printable) == f'"{printable}"'  # no escape, not even of "/"


def test_the_float_free_path_writes_the_same_bytes() -> None:
    from node.app.query_proofs import canonical_json_without_floats

    value = {
        "data": [{"city": "Zürich ❤", "offset": 1, "big": 2**64 - 1, "neg": -(2**63)}] * 3,
        "dataFormat": "JsonAoS",
        "nested": {"b": [True, False, None, []], "a": {}},
        "é": '\x00\n\t"\\/𝄞',
    }
    assert canonical_json_without_floats(value) == canonical_json(value)
    assert hash_of(value, floats=False) == hash_of(value)
    with pytest.raises(CommitmentError):
        canonical_json_without_floats({"x": b"bytes"})
