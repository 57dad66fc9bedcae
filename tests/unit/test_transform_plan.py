"""Transform planning, commit and the engine-protocol codec, without Spark.

The "engine" here is a fake that writes a parquet file the way the Spark engine would, so the
planner's intervals, the commit's event and its atomicity are checked without a JVM.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from coordinator.data import logical_hash
from coordinator.errors import ChainRuleViolation, ConcurrentModification
from coordinator.identity.dataset_id import DatasetId
from coordinator.ingest.vocab import Vocab
from coordinator.metadata import model as m
from coordinator.metadata.timestamp import Timestamp
from coordinator.storage.dataset import Dataset
from coordinator.transform import (
    OutputPaths,
    TransformInternalError,
    TransformInvalidQuery,
    TransformRequest,
    TransformSuccess,
    commit_transform,
    plan_replay,
    plan_transform,
)
from coordinator.transform.fbs import (
    decode_raw_query_request,
    decode_raw_query_response,
    decode_transform_request,
    decode_transform_response,
    encode_raw_query_request,
    encode_raw_query_response,
    encode_transform_request,
    encode_transform_response,
    unwrap_protobuf,
    unwrap_protobuf_many,
    wrap_protobuf,
    wrap_protobuf_many,
)
from coordinator.transform.model import RawQueryRequest, RawQuerySuccess
from coordinator.transform.output import arrow_output_path, write_arrow_output
from coordinator.transform.plan import (
    ChainCache,
    TransformEngineError,
    TransformPlanError,
    clear_outputs,
    dataset_vocab,
    hash_output,
)
from coordinator.transform.run import InvalidTransformQuery, run_transform
from coordinator.transform.testing import (
    StepClock,
    append_events,
    inputs_of,
    make_derivative,
    make_root,
    push_csv,
)
from coordinator.transform.verify import ReplayVerdict, nondeterminism_reasons, replay_transforms

CSV1 = "event_time,city,population\n2020-01-01T00:00:00Z,A,1\n2020-01-02T00:00:00Z,B,2\n"
CSV2 = "event_time,city,population\n2020-01-03T00:00:00Z,C,3\n"


class FakeEngine:
    """Copies the input rows in the offset interval (a SELECT * map), like Spark would."""

    def __init__(self, *, arrow: bool = False, forge: bool = False) -> None:
        """``arrow``: honour ``arrow_output`` as odf-node's DataFusion worker does;
        ``forge``: a different city in every row (a replay then mismatches)."""
        self.requests: list[TransformRequest] = []
        self.arrow = arrow
        self.forge = forge

    def execute_transform(self, req: TransformRequest) -> TransformSuccess:
        self.requests.append(req)
        rows = []
        for inp in req.query_inputs:
            for p in inp.data_paths:
                t = pq.read_table(p)
                for r in t.to_pylist():
                    iv = inp.offset_interval
                    if iv is not None and iv.start <= r["offset"] <= iv.end:
                        rows.append(r)
        wm = max(w.event_time for i in req.query_inputs for w in i.explicit_watermarks)
        req.new_checkpoint_path.write_bytes(f"cp {wm}".encode())
        if not rows:
            return TransformSuccess(new_watermark=wm)
        st = req.system_time.to_datetime()
        out = pa.table(
            {
                "offset": pa.array(range(req.next_offset, req.next_offset + len(rows)), pa.int64()),
                "op": pa.array([r["op"] for r in rows], pa.int32()),
                "system_time": pa.array([st] * len(rows), pa.timestamp("ms", tz="UTC")),
                "event_time": pa.array(
                    [r["event_time"] for r in rows], pa.timestamp("ms", tz="UTC")
                ),
                "city": [("forged-" if self.forge else "") + r["city"] for r in rows],
            }
        )
        arrow = self.arrow and req.arrow_output
        if arrow:
            write_arrow_output(out, arrow_output_path(req.new_data_path))
        else:
            pq.write_table(out, req.new_data_path)
        return TransformSuccess(
            new_offset_interval=m.OffsetInterval(
                start=req.next_offset, end=req.next_offset + len(rows) - 1
            ),
            new_watermark=wm,
            arrow_output=arrow,
        )


@pytest.fixture
def chain(tmp_path: Path):
    clock = StepClock()
    root = make_root(tmp_path, "root")
    push_csv(root, tmp_path / "in", CSV1, clock)
    der = make_derivative(
        tmp_path, "der", [(root, "cities")], [(None, "SELECT op, event_time, city FROM cities")]
    )
    return tmp_path, clock, root, der


def test_first_plan_takes_everything(chain) -> None:
    tmp, clock, root, der = chain
    plan = plan_transform(
        der, inputs_of(root), system_time=clock(), paths=OutputPaths.under(tmp / "w")
    )
    assert plan is not None
    req = plan.request
    assert req.next_offset == 0 and plan.prev_offset is None and plan.prev_checkpoint is None
    (q,) = plan.query_inputs
    assert q.prev_block_hash is None and q.new_block_hash == root.head()
    assert q.prev_offset is None and q.new_offset == 1
    (ri,) = req.query_inputs
    assert ri.query_alias == "cities"
    assert ri.offset_interval == m.OffsetInterval(start=0, end=1)
    assert len(ri.data_paths) == 1 and ri.data_paths[0].is_file()
    assert [str(w.event_time) for w in ri.explicit_watermarks] == ["2020-01-02T00:00:00Z"]
    assert req.transform.queries is not None


def test_incremental_plans_and_commits(chain) -> None:
    tmp, clock, root, der = chain
    eng = FakeEngine()
    r1 = run_transform(der, inputs_of(root), eng, clock=clock)
    assert r1 is not None and len(r1.new_blocks) == 2  # SetDataSchema + ExecuteTransform
    assert run_transform(der, inputs_of(root), eng, clock=clock) is None
    push_csv(root, tmp / "in", CSV2, clock)
    r2 = run_transform(der, inputs_of(root), eng, clock=clock)
    assert r2 is not None and len(r2.new_blocks) == 1
    e = r2.event
    assert e.prev_offset == 1
    assert e.new_data is not None and e.new_data.offset_interval == m.OffsetInterval(start=2, end=2)
    (q,) = e.query_inputs
    assert q.prev_offset == 1 and q.new_offset == 2
    assert e.prev_checkpoint == r1.event.new_checkpoint.physical_hash  # type: ignore[union-attr]
    req = eng.requests[-1]
    assert req.query_inputs[0].offset_interval == m.OffsetInterval(start=2, end=2)
    assert len(req.query_inputs[0].data_paths) == 1
    assert req.prev_checkpoint_path is not None and req.prev_checkpoint_path.is_file()
    assert der.state().next_offset == 3
    # Replay planning rebuilds exactly the same request for the published block.
    block = der.get_block(r2.new_head)  # type: ignore[arg-type]
    replay = plan_replay(der, inputs_of(root), block, paths=OutputPaths.under(tmp / "r"))
    assert replay.query_inputs == e.query_inputs
    assert replay.request.query_inputs == req.query_inputs
    assert replay.request.next_offset == req.next_offset
    assert replay.request.system_time == req.system_time
    assert replay.request.prev_checkpoint_path == req.prev_checkpoint_path


def test_replay_plans_through_a_chain_cache_are_identical(chain) -> None:
    """A shared ChainCache changes how often blocks are read, never the plan."""
    tmp, clock, root, der = chain
    eng = FakeEngine()
    run_transform(der, inputs_of(root), eng, clock=clock)
    for i in range(3):
        push_csv(root, tmp / "in", CSV2.replace("C,3", f"C{i},{i}"), clock)
        run_transform(der, inputs_of(root), eng, clock=clock)
    blocks = [b for _, b in der.iter_blocks() if isinstance(b.event, m.ExecuteTransform)]
    assert len(blocks) == 4
    cache = ChainCache()
    reads = 0
    real_get = Dataset.get_block

    def counting_get(self: Dataset, h, **kw):  # type: ignore[no-untyped-def]
        nonlocal reads
        reads += 1
        return real_get(self, h, **kw)

    for b in reversed(blocks):
        paths = OutputPaths.under(tmp / "r")
        plain = plan_replay(der, inputs_of(root), b, paths=paths)
        Dataset.get_block = counting_get  # type: ignore[method-assign]
        try:
            cached = plan_replay(der, inputs_of(root), b, paths=paths, cache=cache)
        finally:
            Dataset.get_block = real_get  # type: ignore[method-assign]
        assert cached == plain
    # Every block of both chains is read once, however many plans walk it.
    n_blocks = sum(1 for _ in der.iter_blocks()) + sum(1 for _ in root.iter_blocks())
    assert 0 < reads <= n_blocks


def test_watermark_only_block_is_planned(chain) -> None:
    tmp, clock, root, der = chain
    eng = FakeEngine()
    run_transform(der, inputs_of(root), eng, clock=clock)
    from coordinator.ingest.push import ingest

    empty = tmp / "empty.csv"
    empty.write_text("event_time,city,population\n")
    ingest(root, [empty], clock=clock, watermark=Timestamp.parse("2021-01-01T00:00:00Z"))
    plan = plan_transform(der, inputs_of(root), system_time=clock(), paths=OutputPaths.under(tmp))
    assert plan is not None
    (q,) = plan.query_inputs
    assert q.new_block_hash == root.head() and q.new_offset is None
    (ri,) = plan.request.query_inputs
    assert ri.offset_interval is None and ri.data_paths == ()
    assert ri.schema_file is not None  # lets the engine build an empty input with the schema
    assert [str(w.event_time) for w in ri.explicit_watermarks] == ["2021-01-01T00:00:00Z"]


def test_commit_refuses_moved_head(chain) -> None:
    tmp, clock, root, der = chain
    paths = OutputPaths.under(tmp / "w")
    plan = plan_transform(der, inputs_of(root), system_time=clock(), paths=paths)
    assert plan is not None
    clear_outputs(paths)
    resp = FakeEngine().execute_transform(plan.request)
    run_transform(der, inputs_of(root), FakeEngine(), clock=clock)  # someone else commits
    head = der.head()
    with pytest.raises(ConcurrentModification):
        commit_transform(der, plan, resp)
    assert der.head() == head


def test_engine_failures_commit_nothing(chain) -> None:
    _tmp, clock, root, der = chain
    head = der.head()

    class Refuses:
        def execute_transform(self, req: TransformRequest) -> TransformInvalidQuery:
            return TransformInvalidQuery(message="nope")

    class Fails:
        def execute_transform(self, req: TransformRequest) -> TransformInternalError:
            req.new_data_path.write_bytes(b"partial")
            return TransformInternalError(message="boom")

    with pytest.raises(InvalidTransformQuery, match="nope"):
        run_transform(der, inputs_of(root), Refuses(), clock=clock)
    with pytest.raises(Exception, match="boom"):
        run_transform(der, inputs_of(root), Fails(), clock=clock)
    assert der.head() == head
    assert not any(der.layout.data_dir.iterdir())


def test_plan_errors(chain, tmp_path: Path) -> None:
    tmp, clock, root, der = chain
    with pytest.raises(TransformPlanError, match="not available"):
        plan_transform(der, {}, system_time=clock(), paths=OutputPaths.under(tmp))
    with pytest.raises(TransformPlanError, match="derivative"):
        plan_transform(root, {}, system_time=clock(), paths=OutputPaths.under(tmp))


def test_bad_engine_interval_is_refused(chain) -> None:
    tmp, clock, root, der = chain
    paths = OutputPaths.under(tmp / "w")
    plan = plan_transform(der, inputs_of(root), system_time=clock(), paths=paths)
    assert plan is not None
    clear_outputs(paths)
    resp = FakeEngine().execute_transform(plan.request)
    bad = TransformSuccess(
        new_offset_interval=m.OffsetInterval(start=5, end=6), new_watermark=resp.new_watermark
    )
    with pytest.raises(Exception, match="interval"):
        commit_transform(der, plan, bad)


def test_request_codec_round_trip(chain) -> None:
    tmp, clock, root, der = chain
    eng = FakeEngine()
    run_transform(der, inputs_of(root), eng, clock=clock)
    push_csv(root, tmp / "in", CSV2, clock)
    run_transform(der, inputs_of(root), eng, clock=clock)
    for req in eng.requests:
        data = wrap_protobuf(encode_transform_request(req))
        assert decode_transform_request(unwrap_protobuf(data)) == req


def test_batch_envelope_round_trip(chain) -> None:
    tmp, clock, root, der = chain
    eng = FakeEngine()
    run_transform(der, inputs_of(root), eng, clock=clock)
    push_csv(root, tmp / "in", CSV2, clock)
    run_transform(der, inputs_of(root), eng, clock=clock)
    payloads = [encode_transform_request(r) for r in eng.requests]
    assert len(payloads) == 2
    data = wrap_protobuf_many(payloads)
    assert data == b"".join(wrap_protobuf(p) for p in payloads)
    back = unwrap_protobuf_many(data)
    assert [decode_transform_request(p) for p in back] == eng.requests
    # A one-field reader of a repeated field keeps the last occurrence (protobuf's rule).
    assert unwrap_protobuf(data) == payloads[-1]
    assert unwrap_protobuf_many(b"") == []
    with pytest.raises(ValueError):
        wrap_protobuf_many([payloads[0], b""])


@pytest.mark.parametrize(
    "resp",
    [
        None,
        TransformSuccess(),
        TransformSuccess(
            new_offset_interval=m.OffsetInterval(start=3, end=2**40),
            new_watermark=Timestamp.parse("2020-01-01T00:00:00.123456789Z"),
        ),
        TransformInvalidQuery(message="bad query ☃"),
        TransformInternalError(message="boom", backtrace="at x\nat y"),
        TransformInternalError(message="boom"),
    ],
)
def test_response_codec_round_trip(resp) -> None:
    data = wrap_protobuf(encode_transform_response(resp))
    assert decode_transform_response(unwrap_protobuf(data)) == resp


def test_nondeterminism_screen() -> None:
    def t(q: str) -> m.TransformSql:
        return m.TransformSql(engine="spark", queries=(m.SqlQueryStep(query=q),))

    assert nondeterminism_reasons(t("SELECT a, b FROM x WHERE c > 1")) == ()
    assert nondeterminism_reasons(t("SELECT 'group by' AS s FROM x")) == ()
    assert nondeterminism_reasons(t("SELECT a, count(*) FROM x GROUP BY a"))
    assert nondeterminism_reasons(t("SELECT * FROM x JOIN y ON x.a = y.a"))
    assert nondeterminism_reasons(t("SELECT rand() AS r FROM x"))
    assert nondeterminism_reasons(t("SELECT uuid() AS r FROM x"))
    assert nondeterminism_reasons(t("SELECT current_timestamp() AS r FROM x"))


def test_chain_rules_still_apply(chain) -> None:
    """A hand-made ExecuteTransform with a wrong prevOffset is refused by the chain."""
    _tmp, clock, root, der = chain
    run_transform(der, inputs_of(root), FakeEngine(), clock=clock)
    st = der.state()
    bad = st.last_data_event
    assert isinstance(bad, m.ExecuteTransform)
    with pytest.raises(ChainRuleViolation):
        der.append(
            m.MetadataBlock(
                system_time=clock(),
                prev_block_hash=st.head,
                sequence_number=st.sequence_number + 1,
                event=bad,
            )
        )


@pytest.mark.parametrize(
    "resp",
    [
        None,
        RawQuerySuccess(num_records=0),
        RawQuerySuccess(num_records=12345),
        TransformInvalidQuery(message="no"),
        TransformInternalError(message="boom", backtrace="bt"),
    ],
)
def test_raw_query_codec_round_trip(resp) -> None:
    data = wrap_protobuf(encode_raw_query_response(resp))
    assert decode_raw_query_response(unwrap_protobuf(data)) == resp
    req = RawQueryRequest(
        input_data_paths=(Path("/a/b.parquet"), Path("/c")),
        transform=m.TransformSql(
            engine="spark",
            queries=(m.SqlQueryStep(alias="x", query="SELECT 1"), m.SqlQueryStep(query="SELECT 2")),
        ),
        output_data_path=Path("/out/data"),
    )
    assert (
        decode_raw_query_request(unwrap_protobuf(wrap_protobuf(encode_raw_query_request(req))))
        == req
    )


def test_codec_rejects_garbage() -> None:
    from coordinator.errors import DecodeError

    for junk in (b"", b"\x00", b"\x04\x00\x00\x00garbage", bytes(range(64))):
        with pytest.raises(DecodeError):
            decode_transform_request(junk)
        with pytest.raises(DecodeError):
            decode_transform_response(junk)
    with pytest.raises(DecodeError):
        unwrap_protobuf(b"\x0a\x05ab")


class BatchingEngine(FakeEngine):
    """FakeEngine with ``execute_transform_batch``; optionally wrong at one ``next_offset``."""

    def __init__(self, lie_at: int | None = None) -> None:
        super().__init__()
        self.batches: list[int] = []
        self.lie_at = lie_at

    def execute_transform(self, req: TransformRequest) -> TransformSuccess:
        resp = super().execute_transform(req)
        if req.next_offset == self.lie_at:
            t = pq.read_table(req.new_data_path)
            pq.write_table(
                t.set_column(4, "city", pa.array(["lie"] * t.num_rows)), req.new_data_path
            )
        return resp

    def execute_transform_batch(self, reqs: list[TransformRequest]) -> list[TransformSuccess]:
        self.batches.append(len(reqs))
        return [self.execute_transform(r) for r in reqs]


def eleven_blocks(tmp: Path) -> tuple[Dataset, Dataset]:
    """A derivative of 11 ExecuteTransform blocks, block k holding the row at offset k."""
    clock = StepClock()
    root = make_root(tmp, "root")
    der = make_derivative(
        tmp, "der", [(root, "cities")], [(None, "SELECT op, event_time, city FROM cities")]
    )
    for k in range(11):
        push_csv(
            root,
            tmp / "in",
            f"event_time,city,population\n2020-01-{k + 1:02d}T00:00:00Z,c{k},{k}\n",
            clock,
        )
        assert run_transform(der, inputs_of(root), FakeEngine(), clock=clock) is not None
    return root, der


def test_replay_in_batches_checks_every_block_once(tmp_path: Path) -> None:
    root, der = eleven_blocks(tmp_path)
    eng = BatchingEngine()
    report = replay_transforms(der, inputs_of(root), eng, batch=4)
    assert report.ok and report.blocks_replayed == 11
    # Batches of 1, 2, 4, 2, 1, 1: growing up to 4, shrinking towards the end (a batch of one
    # goes as a single request); every block once, in order.
    assert eng.batches == [2, 4, 2]
    assert [r.next_offset for r in eng.requests] == list(range(11))
    # One block at a time gives the same report.
    serial = BatchingEngine()
    again = replay_transforms(der, inputs_of(root), serial, ahead=False)
    assert again.ok and again.blocks_replayed == 11 and serial.batches == []
    assert again.block_engines == report.block_engines


def test_replay_in_batches_stops_at_the_first_mismatch(tmp_path: Path) -> None:
    root, der = eleven_blocks(tmp_path)
    work = tmp_path / "scratch"
    work.mkdir()
    eng = BatchingEngine(lie_at=5)
    report = replay_transforms(der, inputs_of(root), eng, work_dir=work, batch=4)
    assert report.verdict is ReplayVerdict.MISMATCH and report.blocks_replayed == 5
    assert report.mismatch is not None and report.mismatch.sequence_number == (
        der.get_block(report.mismatch.block_hash).sequence_number
    )
    assert report.mismatch.actual.new_data is not None
    assert report.mismatch.actual.new_data.offset_interval.start == 5
    assert not any(work.iterdir())  # speculative outputs and slot directories removed
    serial = replay_transforms(der, inputs_of(root), BatchingEngine(lie_at=5), ahead=False)
    assert serial.verdict is ReplayVerdict.MISMATCH and serial.mismatch is not None
    assert serial.mismatch.block_hash == report.mismatch.block_hash


def test_replay_batches_stop_growing_at_the_input_size_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from coordinator.transform import verify

    root, der = eleven_blocks(tmp_path)
    monkeypatch.setattr(verify, "BATCH_INPUT_BYTES", 1)  # every block's input is bigger
    eng = BatchingEngine()
    report = replay_transforms(der, inputs_of(root), eng, batch=4)
    assert report.ok and report.blocks_replayed == 11
    assert eng.batches == [] and len(eng.requests) == 11  # one block per call


def _replayed(chain, engine: FakeEngine):
    """The first ExecuteTransform of the chain replayed on ``engine``: plan, published
    event, response."""
    tmp, clock, root, der = chain
    run_transform(der, inputs_of(root), FakeEngine(), clock=clock)
    (block,) = [b for _, b in der.iter_blocks() if isinstance(b.event, m.ExecuteTransform)]
    paths = OutputPaths.under(tmp / "replay")
    clear_outputs(paths)
    plan = plan_replay(der, inputs_of(root), block, paths=paths)
    assert plan.request.arrow_output  # a replay asks for Arrow output
    resp = engine.execute_transform(plan.request)
    assert isinstance(resp, TransformSuccess) and resp.arrow_output
    assert isinstance(block.event, m.ExecuteTransform) and block.event.new_data is not None
    return plan, block.event.new_data, resp


def test_an_arrow_output_with_the_published_hash_needs_no_parquet_file(chain) -> None:
    plan, published, resp = _replayed(chain, FakeEngine(arrow=True))
    out = hash_output(plan, resp, physical_from=published)
    assert out.new_data is not None and out.new_data.logical_hash == published.logical_hash
    assert not plan.request.new_data_path.exists()


def test_an_arrow_output_that_differs_is_judged_by_the_parquet_file_written_from_it(
    chain,
) -> None:
    plan, published, resp = _replayed(chain, FakeEngine(arrow=True, forge=True))
    out = hash_output(plan, resp, physical_from=published)
    assert out.new_data is not None and out.new_data.logical_hash != published.logical_hash
    written = plan.request.new_data_path
    assert out.new_data.logical_hash.to_multibase() == logical_hash(written)
    assert pq.read_table(written).column("city").to_pylist()[0].startswith("forged-")


def test_an_arrow_output_that_lies_about_its_rows_or_is_not_arrow_is_an_engine_error(
    chain,
) -> None:
    plan, published, resp = _replayed(chain, FakeEngine(arrow=True))
    assert resp.new_offset_interval is not None
    more = replace(
        resp,
        new_offset_interval=replace(resp.new_offset_interval, end=resp.new_offset_interval.end + 1),
    )
    with pytest.raises(TransformEngineError, match="reported 3 records and wrote 2"):
        hash_output(plan, more, physical_from=published)
    arrow_output_path(plan.request.new_data_path).write_bytes(b"not an arrow file")
    with pytest.raises(TransformEngineError, match="unreadable Arrow file"):
        hash_output(plan, resp, physical_from=published)
    arrow_output_path(plan.request.new_data_path).unlink()
    with pytest.raises(TransformEngineError, match="wrote no data file"):
        hash_output(plan, resp, physical_from=published)


def test_a_replay_on_an_arrow_engine_verifies_and_disputes(chain) -> None:
    tmp, clock, root, der = chain
    run_transform(der, inputs_of(root), FakeEngine(), clock=clock)
    push_csv(root, tmp / "in", CSV2, clock)
    run_transform(der, inputs_of(root), FakeEngine(), clock=clock)
    honest = FakeEngine(arrow=True)
    report = replay_transforms(der, inputs_of(root), honest, work_dir=tmp / "r1")
    assert report.verdict is ReplayVerdict.OK and report.blocks_replayed == 2
    assert all(r.arrow_output for r in honest.requests)
    assert not any((tmp / "r1").rglob("*"))  # nothing left behind
    report = replay_transforms(
        der, inputs_of(root), FakeEngine(arrow=True, forge=True), work_dir=tmp / "r2"
    )
    assert report.verdict is ReplayVerdict.MISMATCH and report.mismatch is not None
    assert any(d.startswith("new_data.logical_hash") for d in report.mismatch.differences)


def test_the_chain_cache_vocabulary_is_the_newest_set_vocab_at_each_head(tmp_path: Path) -> None:
    ds = Dataset.create(tmp_path / "v")
    t = Timestamp.parse("2024-01-01T00:00:00Z")
    seed = m.Seed(dataset_id=DatasetId.new_seeded_ed25519(b"v"), dataset_kind=m.DatasetKind.ROOT)
    heads = [append_events(ds, [seed], t)]
    heads.append(append_events(ds, [m.SetInfo(description="no vocabulary change")], t))
    heads.append(append_events(ds, [m.SetVocab(offset_column="o")], t))
    heads.append(append_events(ds, [m.SetInfo(description="still o")], t))
    heads.append(append_events(ds, [m.SetVocab(event_time_column="when")], t))
    heads.append(append_events(ds, [m.SetInfo(description="still when")], t))
    expected = [dataset_vocab(ds, h) for h in heads]
    assert expected[0] == expected[1] == Vocab()
    assert expected[2] == expected[3] == Vocab(offset_column="o")
    assert expected[4] == expected[5] == Vocab(event_time_column="when")
    # Any order of questions: the memo filled by one walk answers the others alike.
    for order in (range(6), reversed(range(6)), [3, 0, 5, 1, 4, 2]):
        cache = ChainCache()
        for k in order:
            assert cache.vocab(ds, heads[k]) == expected[k]
    assert ChainCache().vocab(ds) == expected[5]  # no head: the dataset's head
