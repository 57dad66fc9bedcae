"""Every metadata-chain rule, with a hand-made violating block; the store stays unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest
from factories import T0, ChainBuilder, data_slice, mh

from coordinator.chain.validation import RULES, ChainState, validate_append
from coordinator.errors import ChainRuleViolation, HashMismatch, InvalidBlock
from coordinator.identity import DatasetId
from coordinator.metadata import block_hash, encode_block
from coordinator.metadata import model as m
from coordinator.metadata.timestamp import Timestamp
from coordinator.storage import Dataset


def snapshot_dir(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


@pytest.fixture
def root_chain(tmp_path: Path) -> tuple[Dataset, ChainBuilder]:
    cb = ChainBuilder().root_with_data(2)
    ds = Dataset.create(tmp_path / "ds", durable=False)
    ds.append_many_bytes(cb.blocks)
    return ds, cb


def derivative_chain(tmp_path: Path) -> tuple[Dataset, ChainBuilder, DatasetId]:
    cb = ChainBuilder(kind=m.DatasetKind.DERIVATIVE, seed=b"deriv")
    inp = DatasetId.new_seeded_ed25519(b"input1")
    cb.add(
        m.SetTransform(
            inputs=(m.TransformInput(dataset_ref=inp.as_did_str(), alias="in"),),
            transform=m.TransformSql(
                engine="spark", queries=(m.SqlQueryStep(query="SELECT * FROM in"),)
            ),
        )
    )
    cb.add(m.SetDataSchema(raw_arrow_schema=b"schema"))
    cb.add(
        m.ExecuteTransform(
            query_inputs=(
                m.ExecuteTransformInput(dataset_id=inp, new_block_hash=mh("b1"), new_offset=9),
            ),
            new_data=data_slice(0, 9),
            new_watermark=T0,
        )
    )
    ds = Dataset.create(tmp_path / "deriv", durable=False)
    ds.append_many_bytes(cb.blocks)
    return ds, cb, inp


def assert_rejected(ds: Dataset, block: m.MetadataBlock, rule: str) -> None:
    before = snapshot_dir(ds.layout.root)
    with pytest.raises(ChainRuleViolation) as ei:
        ds.append(block)
    assert ei.value.rule == rule, str(ei.value)
    assert rule in RULES
    ds.cleanup()
    after = snapshot_dir(ds.layout.root)
    after.pop("info/write.lock", None)
    before.pop("info/write.lock", None)
    assert after == before, "a rejected append must not change the store"


def test_valid_chain_state(root_chain: tuple[Dataset, ChainBuilder]) -> None:
    ds, cb = root_chain
    st = ds.state()
    assert st.head == cb.head
    assert st.sequence_number == 3
    assert st.last_offset == 19
    assert st.next_offset == 20
    assert st.dataset_kind == m.DatasetKind.ROOT
    assert (ds.layout.refs_dir / "head").read_bytes() == cb.head.to_multibase().encode()  # type: ignore[union-attr]


def test_first_block_must_be_seed(tmp_path: Path) -> None:
    ds = Dataset.create(tmp_path / "d", durable=False)
    b = m.MetadataBlock(system_time=T0, sequence_number=0, event=m.SetInfo(description="x"))
    assert_rejected(ds, b, "seed-first")


def test_seed_only_first(root_chain: tuple[Dataset, ChainBuilder]) -> None:
    ds, cb = root_chain
    ev = m.Seed(dataset_id=DatasetId.new_seeded_ed25519(b"z"), dataset_kind=m.DatasetKind.ROOT)
    assert_rejected(ds, cb.block(ev), "seed-unique")


def test_sequence_number(root_chain: tuple[Dataset, ChainBuilder]) -> None:
    ds, cb = root_chain
    assert_rejected(ds, cb.block(m.SetInfo(), sequence_number=cb.seq + 2), "sequence-number")
    assert_rejected(ds, cb.block(m.SetInfo(), sequence_number=cb.seq), "sequence-number")


def test_first_block_sequence_zero(tmp_path: Path) -> None:
    ds = Dataset.create(tmp_path / "d", durable=False)
    ev = m.Seed(dataset_id=DatasetId.new_seeded_ed25519(b"z"), dataset_kind=m.DatasetKind.ROOT)
    b = m.MetadataBlock(system_time=T0, sequence_number=1, event=ev)
    assert_rejected(ds, b, "sequence-number")


def test_prev_block_hash(root_chain: tuple[Dataset, ChainBuilder]) -> None:
    ds, cb = root_chain
    assert_rejected(ds, cb.block(m.SetInfo(), prev_block_hash=mh("nope")), "prev-block-hash")
    assert_rejected(ds, cb.block(m.SetInfo(), prev_block_hash=None), "prev-block-hash")


def test_system_time_monotonic(root_chain: tuple[Dataset, ChainBuilder]) -> None:
    ds, cb = root_chain
    earlier = Timestamp(T0.epoch_ns - 1)
    assert_rejected(ds, cb.block(m.SetInfo(), system_time=earlier), "system-time-monotonic")


def test_empty_add_data(root_chain: tuple[Dataset, ChainBuilder]) -> None:
    ds, cb = root_chain
    assert_rejected(ds, cb.block(m.AddData(prev_offset=19)), "empty-event")


def test_no_op_add_data(root_chain: tuple[Dataset, ChainBuilder]) -> None:
    ds, cb = root_chain
    same_wm = Timestamp(T0.epoch_ns + 1_000_000_000)
    assert_rejected(ds, cb.block(m.AddData(prev_offset=19, new_watermark=same_wm)), "no-op-event")


def test_schema_before_data(tmp_path: Path) -> None:
    cb = ChainBuilder()
    ds = Dataset.create(tmp_path / "d", durable=False)
    ds.append_many_bytes(cb.blocks)
    assert_rejected(ds, cb.block(m.AddData(new_data=data_slice(0, 9))), "schema-before-data")


def test_prev_offset(root_chain: tuple[Dataset, ChainBuilder]) -> None:
    ds, cb = root_chain
    ev = m.AddData(
        prev_offset=18,
        new_data=data_slice(19, 25),
        new_watermark=T0.__class__(T0.epoch_ns + 10**10),
    )
    assert_rejected(ds, cb.block(ev), "prev-offset")


def test_offsets_sequential(root_chain: tuple[Dataset, ChainBuilder]) -> None:
    ds, cb = root_chain
    wm = Timestamp(T0.epoch_ns + 10**10)
    ev = m.AddData(prev_offset=19, new_data=data_slice(21, 25), new_watermark=wm)
    assert_rejected(ds, cb.block(ev), "offsets-sequential")


def test_offset_interval(root_chain: tuple[Dataset, ChainBuilder]) -> None:
    ds, cb = root_chain
    wm = Timestamp(T0.epoch_ns + 10**10)
    bad = m.DataSlice(
        logical_hash=mh("l"),
        physical_hash=mh("p"),
        offset_interval=m.OffsetInterval(start=20, end=19),
        size=1,
    )
    assert_rejected(
        ds, cb.block(m.AddData(prev_offset=19, new_data=bad, new_watermark=wm)), "offset-interval"
    )


def test_watermark_monotonic(root_chain: tuple[Dataset, ChainBuilder]) -> None:
    ds, cb = root_chain
    ev = m.AddData(prev_offset=19, new_data=data_slice(20, 29), new_watermark=T0)
    assert_rejected(ds, cb.block(ev), "watermark-monotonic")
    ev = m.AddData(prev_offset=19, new_data=data_slice(20, 29))
    assert_rejected(ds, cb.block(ev), "watermark-monotonic")


def test_prev_checkpoint(root_chain: tuple[Dataset, ChainBuilder]) -> None:
    ds, cb = root_chain
    wm = Timestamp(T0.epoch_ns + 10**10)
    ev = m.AddData(prev_checkpoint=mh("cp"), prev_offset=19, new_watermark=wm)
    assert_rejected(ds, cb.block(ev), "prev-checkpoint")


def test_checkpoint_chain_ok(root_chain: tuple[Dataset, ChainBuilder]) -> None:
    ds, cb = root_chain
    wm = Timestamp(T0.epoch_ns + 10**10)
    cp = m.Checkpoint(physical_hash=mh("cp1"), size=5)
    h = ds.append(cb.block(m.AddData(prev_offset=19, new_checkpoint=cp, new_watermark=wm)))
    nxt = m.MetadataBlock(
        system_time=T0,
        prev_block_hash=h,
        sequence_number=cb.seq + 2,
        event=m.AddData(
            prev_checkpoint=mh("cp1"), prev_offset=19, new_data=data_slice(20, 20), new_watermark=wm
        ),
    )
    ds.append(nxt)
    assert ds.state().last_offset == 20


def test_event_kind(root_chain: tuple[Dataset, ChainBuilder], tmp_path: Path) -> None:
    ds, cb = root_chain
    ev = m.SetTransform(
        inputs=(
            m.TransformInput(
                dataset_ref=DatasetId.new_seeded_ed25519(b"i").as_did_str(), alias="i"
            ),
        ),
        transform=m.TransformSql(engine="spark", queries=(m.SqlQueryStep(query="q"),)),
    )
    assert_rejected(ds, cb.block(ev), "event-kind")
    dds, dcb, _ = derivative_chain(tmp_path)
    wm = Timestamp(T0.epoch_ns + 10**10)
    assert_rejected(dds, dcb.block(m.AddData(prev_offset=9, new_watermark=wm)), "event-kind")


def test_source_conflict_and_push_schema(root_chain: tuple[Dataset, ChainBuilder]) -> None:
    ds, cb = root_chain
    assert_rejected(
        ds,
        cb.block(
            m.AddPushSource(source_name="s", read=m.ReadStepCsv(), merge=m.MergeStrategyAppend())
        ),
        "push-source-schema",
    )
    ds.append(
        cb.block(
            m.AddPushSource(
                source_name="s",
                read=m.ReadStepCsv(ddl_schema=("a INT",)),
                merge=m.MergeStrategyAppend(),
            )
        )
    )
    polling = m.SetPollingSource(
        fetch=m.FetchStepUrl(url="http://x"), read=m.ReadStepCsv(), merge=m.MergeStrategyAppend()
    )
    nxt = m.MetadataBlock(
        system_time=T0, prev_block_hash=ds.head(), sequence_number=cb.seq + 2, event=polling
    )
    assert_rejected(ds, nxt, "source-conflict")
    assert_rejected(
        ds,
        m.MetadataBlock(
            system_time=T0,
            prev_block_hash=ds.head(),
            sequence_number=cb.seq + 2,
            event=m.DisablePushSource(source_name="other"),
        ),
        "disable-source",
    )


def test_transform_normalized_and_inputs(tmp_path: Path) -> None:
    cb = ChainBuilder(kind=m.DatasetKind.DERIVATIVE)
    ds = Dataset.create(tmp_path / "d", durable=False)
    ds.append_many_bytes(cb.blocks)
    did = DatasetId.new_seeded_ed25519(b"i").as_did_str()
    unnormalized = m.SetTransform(
        inputs=(m.TransformInput(dataset_ref=did, alias="i"),),
        transform=m.TransformSql(engine="spark", query="SELECT 1"),
    )
    assert_rejected(ds, cb.block(unnormalized), "transform-normalized")
    unresolved = m.SetTransform(
        inputs=(m.TransformInput(dataset_ref="some-name", alias="i"),),
        transform=m.TransformSql(engine="spark", queries=(m.SqlQueryStep(query="q"),)),
    )
    assert_rejected(ds, cb.block(unresolved), "set-transform-inputs")
    aliased_last = m.SetTransform(
        inputs=(m.TransformInput(dataset_ref=did, alias="i"),),
        transform=m.TransformSql(engine="spark", queries=(m.SqlQueryStep(alias="x", query="q"),)),
    )
    assert_rejected(ds, cb.block(aliased_last), "transform-normalized")


def test_execute_transform_rules(tmp_path: Path) -> None:
    ds, cb, inp = derivative_chain(tmp_path)
    wm = Timestamp(T0.epoch_ns + 10**10)
    other = DatasetId.new_seeded_ed25519(b"other")
    wrong_input = m.ExecuteTransform(
        query_inputs=(m.ExecuteTransformInput(dataset_id=other, new_block_hash=mh("b2")),),
        prev_offset=9,
        new_watermark=wm,
    )
    assert_rejected(ds, cb.block(wrong_input), "transform-inputs")
    wrong_prev_block = m.ExecuteTransform(
        query_inputs=(
            m.ExecuteTransformInput(
                dataset_id=inp,
                prev_block_hash=mh("zz"),
                new_block_hash=mh("b2"),
                prev_offset=9,
                new_offset=12,
            ),
        ),
        prev_offset=9,
        new_data=data_slice(10, 12),
        new_watermark=wm,
    )
    assert_rejected(ds, cb.block(wrong_prev_block), "input-interval")
    empty_interval = m.ExecuteTransform(
        query_inputs=(
            m.ExecuteTransformInput(
                dataset_id=inp, prev_block_hash=mh("b1"), new_block_hash=mh("b1"), prev_offset=9
            ),
        ),
        prev_offset=9,
        new_watermark=wm,
    )
    assert_rejected(ds, cb.block(empty_interval), "input-interval")
    offsets_without_block = m.ExecuteTransform(
        query_inputs=(
            m.ExecuteTransformInput(
                dataset_id=inp, prev_block_hash=mh("b1"), prev_offset=9, new_offset=11
            ),
        ),
        prev_offset=9,
        new_watermark=wm,
    )
    assert_rejected(ds, cb.block(offsets_without_block), "input-interval")
    ok = m.ExecuteTransform(
        query_inputs=(
            m.ExecuteTransformInput(
                dataset_id=inp,
                prev_block_hash=mh("b1"),
                new_block_hash=mh("b2"),
                prev_offset=9,
                new_offset=12,
            ),
        ),
        prev_offset=9,
        new_data=data_slice(10, 12),
        new_watermark=wm,
    )
    ds.append(cb.block(ok))
    assert ds.state().last_offset == 12


def test_execute_transform_needs_set_transform() -> None:
    cb = ChainBuilder(kind=m.DatasetKind.DERIVATIVE)
    st = ChainState()
    for data in cb.blocks:
        from coordinator.metadata import decode_block

        st = validate_append(st, decode_block(data), block_hash(data))
    ev = m.ExecuteTransform(
        query_inputs=(m.ExecuteTransformInput(dataset_id=DatasetId.new_seeded_ed25519(b"i")),),
        new_watermark=T0,
    )
    with pytest.raises(ChainRuleViolation) as ei:
        validate_append(st, cb.block(ev), mh("x"))
    assert ei.value.rule == "transform-inputs"


def test_bad_bytes_never_write(root_chain: tuple[Dataset, ChainBuilder]) -> None:
    ds, cb = root_chain
    before = snapshot_dir(ds.layout.root)
    good = encode_block(cb.block(m.SetInfo(description="ok")))
    for bad in [b"", b"garbage", good[:-7], good[:20], b"\xff" * 200]:
        with pytest.raises(InvalidBlock):
            ds.append_bytes(bad)
    with pytest.raises(HashMismatch):
        ds.append_bytes(good, expected=mh("something else"))
    after = snapshot_dir(ds.layout.root)
    after.pop("info/write.lock", None)
    before.pop("info/write.lock", None)
    assert after == before
    ds.append_bytes(good, expected=block_hash(good))
    assert ds.get_block_bytes(block_hash(good)) == good


def test_multi_block_append_is_all_or_nothing(root_chain: tuple[Dataset, ChainBuilder]) -> None:
    ds, cb = root_chain
    head = ds.head()
    b1 = encode_block(cb.block(m.SetInfo(description="1")))
    b2 = encode_block(
        m.MetadataBlock(
            system_time=T0,
            prev_block_hash=block_hash(b1),
            sequence_number=cb.seq + 5,
            event=m.SetInfo(),
        )
    )
    with pytest.raises(ChainRuleViolation):
        ds.append_many_bytes([b1, b2])
    assert ds.head() == head
    assert not ds.blocks.contains(block_hash(b1))


def test_blocks_stored_as_received_v3(tmp_path: Path) -> None:
    """A v3 block (as newer kamu writes) is stored byte-for-byte, never re-encoded to v2."""
    cb = ChainBuilder(version=3).root_with_data(1)
    ds = Dataset.create(tmp_path / "d", durable=False)
    ds.append_many_bytes(cb.blocks)
    for data in cb.blocks:
        assert ds.get_block_bytes(block_hash(data)) == data
    assert ds.state().head == cb.head


def test_tampered_stored_block_detected(root_chain: tuple[Dataset, ChainBuilder]) -> None:
    ds, cb = root_chain
    assert cb.head is not None
    p = ds.blocks.path_of(cb.head)
    data = bytearray(p.read_bytes())
    data[-1] ^= 1
    p.write_bytes(bytes(data))
    with pytest.raises(HashMismatch):
        ds.get_block(cb.head)
