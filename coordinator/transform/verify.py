"""Replay verification of a derivative dataset (``kamu verify`` without ``--integrity``).

For every ``ExecuteTransform`` of the chain, oldest first, the request is rebuilt from the block
(:func:`~coordinator.transform.plan.plan_replay`), run on the engine, and the event the replay
would have committed is compared with the published one using kamu's rule: the replayed
event's physical hash, size and ``newCheckpoint`` are overwritten with the published values
(parquet bytes and checkpoints are not reproducible), then the whole events must be equal. In
effect ``queryInputs``, ``prevCheckpoint``, ``prevOffset``, the output offsets, the **logical
hash** and the watermark are compared. The replay stops at the first mismatch.

A mismatch of a query that cannot be replayed deterministically (aggregations, joins, windows,
random or time functions…) is reported as *not reproducible* rather than as a forgery.

**Engine versions.** An engine that runs several versions of one engine (``pinned_versions``,
e.g. the node's router with DataFusion 51 and 41) gets each block once per candidate version
(:func:`~coordinator.transform.engines.candidate_versions`: ``Transform.Sql.version``, else
the release kamu shipped at the block's system time, then the others), the request's
``Transform.Sql.version`` set to the candidate, until one reproduces the block; the report
records which engine and version reproduced each block. When none does, a query with a
version-sensitive construct (:func:`~coordinator.transform.engines.version_sensitivity`) is
*inconclusive* (engine version unknown), never a mismatch; a query without one is a mismatch.

The engine runs ahead: while block k's output is hashed and compared, the next requests (which
depend only on the chain) are already on the engine. A DataFusion replay sends its blocks in
batches of up to ``replay_plan.DATAFUSION_BATCH`` (one round trip each through
``execute_transform_batch`` when the engine has it; growing from 1, shrinking towards the end,
capped by :data:`BATCH_INPUT_BYTES`), two batches ahead; other engines one block at a time, one
block ahead. An engine with ``submit_transform_batch`` (the node's router) gets each batch from
the planning thread as soon as it is planned, so it can queue the next one while running the
current one. Speculative runs are discarded when the replay stops.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import tempfile
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import Any, Protocol

from coordinator.identity.dataset_id import DatasetId
from coordinator.metadata import model as m
from coordinator.multiformats import Multihash
from coordinator.storage.dataset import Dataset
from coordinator.transform.engines import (
    DATAFUSION,
    candidate_versions,
)
from coordinator.transform.model import (
    TransformInvalidQuery,
    TransformRequest,
    TransformResponse,
    TransformSuccess,
)
from coordinator.transform.output import remove_outputs
from coordinator.transform.plan import (
    ChainCache,
    OutputPaths,
    TransformError,
    TransformPlan,
    build_event,
    clear_outputs,
    hash_output,
    plan_replay,
)
from coordinator.transform.replay_plan import ReplayRunPlan, plan_replay_run
from coordinator.verify import IntegrityReport, verify_integrity


class TransformEngine(Protocol):
    """Anything that runs ODF transform requests (in-process Spark, the engine worker…)."""

    def execute_transform(self, request: TransformRequest) -> TransformResponse:
        """Run one request; failures are responses, not exceptions."""
        ...


BATCH_INPUT_BYTES = 16 << 20
"""A batch stops growing once its blocks' input files reach this size: for big slices the
call's cost is negligible, and batching them would only keep more outputs on disk at once."""

ReplayListener = Callable[[int, int, Multihash], None]
"""``listener(done, total, block_hash)`` — called after each replayed block."""


class ReplayVerdict(Enum):
    """Outcome of a replay."""

    OK = "ok"
    MISMATCH = "mismatch"
    """The published result is not what the query yields: evidence of a bad block."""
    NOT_REPRODUCIBLE = "not-reproducible"
    """A mismatch, but the query is not deterministic: no conclusion."""
    ERROR = "error"
    """The replay could not run (missing input, engine failure)."""
    INCONCLUSIVE = "inconclusive"
    """No pinned engine version reproduced a block of a version-sensitive query: the version
    that produced it is unknown, so the mismatch proves nothing (never a dispute)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BlockEngine:
    """Which engine and version reproduced one replayed block."""

    block_hash: Multihash
    sequence_number: int
    engine: str
    version: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplayMismatch:
    """The first published event the replay did not reproduce."""

    block_hash: Multihash
    sequence_number: int
    expected: m.ExecuteTransform
    actual: m.ExecuteTransform
    differences: tuple[str, ...]

    def describe(self) -> str:
        """kamu's message, with the differing fields."""
        return (
            f"At block {self.block_hash} (#{self.sequence_number}) expected event "
            f"{self.expected} but got non-equivalent event {self.actual}; differences: "
            + "; ".join(self.differences)
        )


@dataclass(slots=True)
class ReplayReport:
    """What the replay checked and its outcome."""

    head: Multihash | None = None
    blocks_total: int = 0
    blocks_replayed: int = 0
    verdict: ReplayVerdict = ReplayVerdict.OK
    mismatch: ReplayMismatch | None = None
    error: str | None = None
    error_block: Multihash | None = None
    nondeterministic_reasons: tuple[str, ...] = ()
    version_sensitive_reasons: tuple[str, ...] = ()
    block_engines: list[BlockEngine] = field(default_factory=list)
    """Per replayed block, the engine and version that reproduced it."""
    tried_versions: tuple[str, ...] = ()
    """The versions tried on the block that none reproduced (inconclusive or mismatch)."""

    @property
    def ok(self) -> bool:
        """True if every transform was reproduced."""
        return self.verdict is ReplayVerdict.OK

    def engines(self) -> dict[str, list[str]]:
        """Engine -> the versions that reproduced blocks (newest-first order of first use)."""
        out: dict[str, list[str]] = {}
        for b in self.block_engines:
            versions = out.setdefault(b.engine, [])
            if b.version not in versions:
                versions.append(b.version)
        return out

    def describe(self) -> str:
        """One line for the verification record (empty when OK)."""
        if self.verdict is ReplayVerdict.INCONCLUSIVE:
            block = f" at block {self.mismatch.block_hash}" if self.mismatch else ""
            return (
                f"inconclusive: engine version unknown{block} (tried "
                f"{', '.join(self.tried_versions)}; version-sensitive: "
                f"{', '.join(self.version_sensitive_reasons)})"
            )
        if self.mismatch is not None:
            return self.mismatch.describe()
        return self.error or ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        mm = self.mismatch
        return {
            "ok": self.ok,
            "verdict": self.verdict.value,
            "head": str(self.head) if self.head else None,
            "blocks_total": self.blocks_total,
            "blocks_replayed": self.blocks_replayed,
            "error": self.error,
            "error_block": str(self.error_block) if self.error_block else None,
            "nondeterministic_reasons": list(self.nondeterministic_reasons),
            "version_sensitive_reasons": list(self.version_sensitive_reasons),
            "tried_versions": list(self.tried_versions),
            "engines": [
                {
                    "block_hash": str(b.block_hash),
                    "sequence_number": b.sequence_number,
                    "engine": b.engine,
                    "version": b.version,
                }
                for b in self.block_engines
            ],
            "mismatch": None
            if mm is None
            else {
                "block_hash": str(mm.block_hash),
                "sequence_number": mm.sequence_number,
                "differences": list(mm.differences),
            },
        }


@dataclass(slots=True)
class VerificationReport:
    """Integrity then replay, as ``kamu verify`` runs them."""

    integrity: IntegrityReport
    replay: ReplayReport | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True if both phases passed."""
        return self.integrity.ok and (self.replay is None or self.replay.ok)


# -- determinism ---------------------------------------------------------------------------------

_NONDETERMINISTIC_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"\bjoin\b", "join: output order depends on the join strategy"),
    (r"\bgroup\s+by\b", "aggregation: output order depends on hash-aggregate internals"),
    (r"\bdistinct\b", "DISTINCT: output order depends on hash-aggregate internals"),
    (r"\b(?:sum|avg|count|min|max|collect_list|collect_set)\s*\(", "aggregate function"),
    (r"\bover\s*\(", "window function: may depend on the slice boundaries and order"),
    (r"\b(?:rand|randn|random|uuid|shuffle)\s*\(", "random function"),
    (
        r"\b(?:current_timestamp|current_date|now|localtimestamp|unix_timestamp\s*\(\s*\))",
        "current time function",
    ),
    (r"\b(?:union|intersect|except)\b", "set operation: order depends on the plan"),
)


_NONDETERMINISTIC = tuple((re.compile(p), why) for p, why in _NONDETERMINISTIC_PATTERNS)
# A quoted literal, ``\``-escapes inside. One that is never closed is matched to the end of the
# text and kept: the former ``'(?:[^'\\]|\\.)*'`` left it too, but only after failing there and
# retrying from each later quote, quadratic in a stranger's query of escaped quotes. Possessive
# quantifiers never backtrack.
_SQL_LITERAL = re.compile(r"'[^'\\]*+(?:\\.[^'\\]*+)*+(')?")


def _blank_literal(literal: re.Match[str]) -> str:
    return "''" if literal.group(1) else literal.group()


def nondeterminism_reasons(transform: m.TransformSql) -> tuple[str, ...]:
    """Why ``transform`` may not be replayable deterministically (empty: plain map/filter).

    A conservative textual screen used to *classify* mismatches (never to allow or refuse a
    query — that is the sandbox's job, on Spark's plans). An engine may offer a precise
    answer through a ``nondeterminism(request)`` method, which :func:`replay_transforms`
    prefers.
    """
    reasons: list[str] = []
    for step in transform.queries or ():
        text = _SQL_LITERAL.sub(_blank_literal, step.query.lower())
        for pattern, reason in _NONDETERMINISTIC:
            if pattern.search(text) and reason not in reasons:
                reasons.append(reason)
    return tuple(reasons)


# -- comparison ----------------------------------------------------------------------------------


def _differences(expected: m.ExecuteTransform, actual: m.ExecuteTransform) -> tuple[str, ...]:
    out: list[str] = []
    for name in ("query_inputs", "prev_checkpoint", "prev_offset", "new_watermark"):
        e, a = getattr(expected, name), getattr(actual, name)
        if e != a:
            out.append(f"{name}: expected {e}, actual {a}")
    ed, ad = expected.new_data, actual.new_data
    if (ed is None) != (ad is None):
        out.append(f"new_data: expected {ed}, actual {ad}")
    elif ed is not None and ad is not None:
        if ed.offset_interval != ad.offset_interval:
            out.append(
                f"new_data.offset_interval: expected [{ed.offset_interval.start}, "
                f"{ed.offset_interval.end}], actual [{ad.offset_interval.start}, "
                f"{ad.offset_interval.end}]"
            )
        if ed.logical_hash != ad.logical_hash:
            out.append(
                f"new_data.logical_hash: expected {ed.logical_hash}, actual {ad.logical_hash}"
            )
    if expected.new_checkpoint != actual.new_checkpoint:
        out.append("new_checkpoint differs")
    return tuple(out)


def normalize_replayed(
    published: m.ExecuteTransform, replayed: m.ExecuteTransform
) -> m.ExecuteTransform:
    """kamu's rule: take physical hash, size and ``newCheckpoint`` from the published event."""
    new_data = replayed.new_data
    if new_data is not None and published.new_data is not None:
        new_data = replace(
            new_data,
            physical_hash=published.new_data.physical_hash,
            size=published.new_data.size,
        )
    return replace(replayed, new_data=new_data, new_checkpoint=published.new_checkpoint)


# -- replay --------------------------------------------------------------------------------------


def replay_transforms(
    dataset: Dataset,
    inputs: Mapping[DatasetId, Dataset],
    engine: TransformEngine,
    *,
    work_dir: Path | None = None,
    listener: ReplayListener | None = None,
    ahead: bool = True,
    batch: int | None = None,
    batches_ahead: int = 2,
) -> ReplayReport:
    """Replay every ``ExecuteTransform`` of ``dataset``; see the module docstring.

    Args:
        dataset: a derivative dataset.
        inputs: its input datasets by DID (holding at least the blocks the chain consumed).
        engine: runs the requests.
        work_dir: scratch space for engine output (default: a temporary directory).
        listener: progress callback.
        ahead: run the next blocks' engine requests while judging the current one.
        batch: blocks per engine round trip (default: ``replay_plan.DATAFUSION_BATCH`` for
            DataFusion, else 1); only with ``ahead``.
        batches_ahead: batches in flight beyond the one being judged, for an engine with
            ``execute_transform_batch`` (others: one block ahead).
    """
    report = ReplayReport(head=dataset.head())
    cache = ChainCache()  # every block of every chain read once for the whole replay
    chain = list(cache.iter_blocks(dataset, report.head))
    chain.reverse()
    precise = getattr(engine, "nondeterminism", None)
    versions_of = getattr(engine, "pinned_versions", None)

    def reasons(transform: m.Transform) -> tuple[str, ...]:
        engine_reasons = tuple(precise(transform)) if callable(precise) else ()
        return engine_reasons or nondeterminism_reasons(transform)

    plan = plan_replay_run(
        chain,
        reasons=reasons,
        pinned_versions=versions_of if callable(versions_of) else None,
        can_batch=callable(getattr(engine, "execute_transform_batch", None)),
        ahead=ahead,
        batch=batch,
        batches_ahead=batches_ahead,
    )
    report.blocks_total = len(plan.todo)
    report.nondeterministic_reasons = plan.nondeterministic_reasons
    report.version_sensitive_reasons = plan.version_sensitive_reasons
    own_dir = work_dir is None
    scratch = Path(tempfile.mkdtemp(prefix="odf-replay-")) if work_dir is None else work_dir
    replayer = _Replayer(dataset, inputs, engine, plan, scratch, cache)
    try:
        replayer.replay(report, listener, ahead)
    finally:
        replayer.close(own_dir)
    return report


def _request_for(plan: TransformPlan, version: str | None) -> TransformRequest:
    """The plan's request, pinned to the engine ``version`` (None: as planned)."""
    if version is None:
        return plan.request
    transform = replace(plan.request.transform, version=version)
    return replace(plan.request, transform=transform)


def _fan_out(
    batch_future: Future[list[TransformResponse]], futures: list[Future[TransformResponse]]
) -> None:
    """Settle each block's future from the batch's (its responses, or its error)."""

    def done(f: Future[list[TransformResponse]]) -> None:
        error = f.exception()
        if error is not None:
            for one in futures:
                one.set_exception(error)
            return
        for one, r in zip(futures, f.result(), strict=True):
            one.set_result(r)

    batch_future.add_done_callback(done)


@dataclass(slots=True)
class _Judged:
    """The runs of one block: the version that reproduced it, else what went wrong."""

    reproduced: str | None = None
    first_error: str | None = None
    first_mismatch: m.ExecuteTransform | None = None
    tried: list[str] = field(default_factory=list)


class _Replayer:
    """Carries out a :class:`ReplayRunPlan`: engine requests in flight ahead of the block
    being judged (their requests depend only on the chain, never on a block's outcome), one
    thread calling the engine so calls stay in order; speculative runs are discarded if the
    replay stops.

    Interleaved A/B, 30 DataFusion blocks x 1,000 rows on the worker, 6 rounds at load ~12:
    median 24.7 ms/block one block ahead vs 32.3 serial (ahead faster in 5 of 6 rounds). A
    batching engine (the node's workers) gets batches, two ahead: the second is already
    planned and queued while the engine runs the first, so the engine does not wait for the
    parent's planning between batches.
    """

    def __init__(
        self,
        dataset: Dataset,
        inputs: Mapping[DatasetId, Dataset],
        engine: TransformEngine,
        plan: ReplayRunPlan,
        scratch: Path,
        cache: ChainCache,
    ) -> None:
        self.dataset, self.inputs, self.engine, self.plan = dataset, inputs, engine, plan
        self.scratch, self.cache = scratch, cache
        self.run_batch = getattr(engine, "execute_transform_batch", None)
        self.submit = getattr(engine, "submit_transform_batch", None)
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="odf-replay")
        self.in_flight: list[Future[list[TransformResponse]]] = []
        self.pending: deque[_Launched] = deque()
        self.launched = 0  # blocks planned so far
        self.batches = 0  # batches launched so far
        self.stopped = False  # a block could not be planned: launch nothing after it

    def _plan_one(self, k: int) -> _Launched:
        _h, block = self.plan.todo[k]
        paths = OutputPaths.under(self.scratch / f"slot{k % self.plan.slots}")
        clear_outputs(paths)
        current = self.plan.set_transform
        assert current is not None
        try:
            planned = plan_replay(
                self.dataset,
                self.inputs,
                block,
                paths=paths,
                set_transform=current,
                cache=self.cache,
            )
        except TransformError as e:
            return _Launched(paths=paths, error=str(e))
        candidates: tuple[str | None, ...] = (None,)
        if self.plan.engine_name == DATAFUSION and self.plan.available:
            candidates = candidate_versions(
                current.transform, block.system_time, self.plan.available
            )
        return _Launched(paths=paths, plan=planned, candidates=candidates)

    def _run(
        self, requests: list[TransformRequest], futures: list[Future[TransformResponse]]
    ) -> None:
        try:
            if callable(self.run_batch) and len(requests) > 1:
                for f, r in zip(futures, self.run_batch(requests), strict=True):
                    f.set_result(r)
            else:
                for f, req in zip(futures, requests, strict=True):
                    f.set_result(self.engine.execute_transform(req))
        except BaseException as e:
            for f in futures:
                if not f.done():
                    f.set_exception(e)

    def _launch(self, k0: int, n: int) -> list[_Launched]:
        """Plan blocks ``k0``… (``n``, up to a planning failure) and submit their runs."""
        out: list[_Launched] = []
        input_bytes = 0
        for k in range(k0, min(k0 + n, len(self.plan.todo))):
            out.append(self._plan_one(k))
            planned = out[-1].plan
            if planned is None:
                break  # nothing after a block that cannot be planned is needed
            input_bytes += sum(_size(f) for i in planned.request.query_inputs for f in i.data_paths)
            if input_bytes >= BATCH_INPUT_BYTES:
                break
        runnable = [x for x in out if x.plan is not None]
        if runnable:
            futures: list[Future[TransformResponse]] = [Future() for _ in runnable]
            requests = []
            for x, f in zip(runnable, futures, strict=True):
                assert x.plan is not None
                x.first = f
                requests.append(_request_for(x.plan, x.candidates[0]))
            if callable(self.submit) and self.plan.depth > 1:
                # A pipelining engine: the batch goes out now, behind the ones in flight.
                batch_future = self.submit(requests)
                self.in_flight.append(batch_future)
                _fan_out(batch_future, futures)
            else:
                self.pool.submit(self._run, requests, futures)
        return out

    def _launch_next(self) -> None:
        if self.stopped or self.launched >= len(self.plan.todo):
            return
        more = self._launch(self.launched, self.plan.next_batch(self.launched, self.batches))
        self.batches += 1
        self.launched += len(more)
        self.stopped = any(x.plan is None for x in more)
        self.pending.extend(more)

    def replay(self, report: ReplayReport, listener: ReplayListener | None, ahead: bool) -> None:
        """Judge the blocks in order, filling ``report``; stop at the first that fails."""
        plan = self.plan
        self._launch_next()
        for done, (h, block) in enumerate(plan.todo, start=1):
            if not self.pending:
                self._launch_next()
            cur = self.pending.popleft()
            published = block.event
            assert isinstance(published, m.ExecuteTransform)
            if cur.plan is None or cur.first is None:
                report.verdict, report.error, report.error_block = ReplayVerdict.ERROR, cur.error, h
                return
            response = cur.first.result()
            if ahead and len(self.pending) < plan.depth * plan.batch_size:
                self._launch_next()
            judged = self._judge(cur, response, published)
            _drop_outputs(cur.paths)
            if judged.reproduced is None:
                _report_failure(report, judged, h, block, published)
                return
            report.block_engines.append(
                BlockEngine(
                    block_hash=h,
                    sequence_number=block.sequence_number,
                    engine=plan.engine_name,
                    version=judged.reproduced,
                )
            )
            report.blocks_replayed = done
            if listener is not None:
                listener(done, len(plan.todo), h)

    def _judge(
        self, cur: _Launched, response: TransformResponse, published: m.ExecuteTransform
    ) -> _Judged:
        """Try the block's candidate versions until one reproduces ``published``."""
        assert cur.plan is not None
        plan, judged = cur.plan, _Judged()
        for attempt, version in enumerate(cur.candidates):
            if version is not None:
                judged.tried.append(version)
            if attempt > 0:
                clear_outputs(cur.paths)
                response = self.pool.submit(
                    self.engine.execute_transform, _request_for(plan, version)
                ).result()
            if not isinstance(response, TransformSuccess):
                if judged.first_error is None:
                    kind = (
                        "invalid query" if isinstance(response, TransformInvalidQuery) else "error"
                    )
                    at = f" (version {version})" if version else ""
                    judged.first_error = f"engine {kind}{at}: {response.message}"
                continue
            try:
                output = hash_output(plan, response, physical_from=published.new_data)
            except TransformError as e:
                judged.first_error = judged.first_error or str(e)
                continue
            replayed = normalize_replayed(published, build_event(plan, response, output))
            if replayed == published:
                available = self.plan.available
                judged.reproduced = version or (available[0] if available else "")
                break
            if judged.first_mismatch is None:
                judged.first_mismatch = replayed
        return judged

    def close(self, own_dir: bool) -> None:
        """Wait for a speculative run still going (an engine call cannot be interrupted),
        then remove the output directories."""
        self.pool.shutdown(wait=True, cancel_futures=True)
        for f in self.in_flight:
            with contextlib.suppress(Exception):
                f.result()
        if own_dir:
            shutil.rmtree(self.scratch, ignore_errors=True)
        else:
            for k in range(min(self.plan.slots, len(self.plan.todo))):
                shutil.rmtree(self.scratch / f"slot{k}", ignore_errors=True)


def _report_failure(
    report: ReplayReport,
    judged: _Judged,
    h: Multihash,
    block: m.MetadataBlock,
    published: m.ExecuteTransform,
) -> None:
    """Fill ``report`` for a block no candidate version reproduced."""
    report.tried_versions = tuple(judged.tried)
    mismatch = judged.first_mismatch
    if mismatch is None:
        report.verdict = ReplayVerdict.ERROR
        report.error = judged.first_error or "engine failed"
        report.error_block = h
        return
    report.mismatch = ReplayMismatch(
        block_hash=h,
        sequence_number=block.sequence_number,
        expected=published,
        actual=mismatch,
        differences=_differences(published, mismatch),
    )
    if report.version_sensitive_reasons:
        report.verdict = ReplayVerdict.INCONCLUSIVE
    elif report.nondeterministic_reasons:
        report.verdict = ReplayVerdict.NOT_REPRODUCIBLE
    else:
        report.verdict = ReplayVerdict.MISMATCH


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _drop_outputs(paths: OutputPaths) -> None:
    """Remove a judged block's output files (its directory is reused by a later block)."""
    remove_outputs(paths.new_data_path, paths.new_checkpoint_path)


@dataclass(slots=True, kw_only=True)
class _Launched:
    """A block whose first engine run was submitted (or whose planning failed)."""

    paths: OutputPaths
    plan: TransformPlan | None = None
    candidates: tuple[str | None, ...] = (None,)
    first: Future[TransformResponse] | None = None
    error: str = ""


def verify_dataset(
    dataset: Dataset,
    inputs: Mapping[DatasetId, Dataset],
    engine: TransformEngine | None,
    *,
    integrity_only: bool = False,
    work_dir: Path | None = None,
    listener: Callable[[str, int, int], None] | None = None,
) -> VerificationReport:
    """``kamu verify``: integrity, then (derivative datasets, unless ``integrity_only``) replay.

    ``listener(phase, done, total)`` receives ``metadata``/``data`` phases from the integrity
    check and ``replay`` for each replayed block.
    """
    integrity = verify_integrity(dataset, listener=listener)
    report = VerificationReport(integrity=integrity)
    if integrity_only or not integrity.ok:
        return report
    if dataset.state().dataset_kind != m.DatasetKind.DERIVATIVE:
        return report
    if engine is None:
        report.problems.append("no engine available to replay transforms")
        return report

    def on_block(done: int, total: int, _h: Multihash) -> None:
        if listener is not None:
            listener("replay", done, total)

    report.replay = replay_transforms(dataset, inputs, engine, work_dir=work_dir, listener=on_block)
    return report


__all__ = [
    "BlockEngine",
    "ReplayListener",
    "ReplayMismatch",
    "ReplayReport",
    "ReplayVerdict",
    "TransformEngine",
    "VerificationReport",
    "nondeterminism_reasons",
    "normalize_replayed",
    "replay_transforms",
    "verify_dataset",
]
