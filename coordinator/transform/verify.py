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
batches of up to :data:`DATAFUSION_BATCH` (one round trip each through
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
    normalize_engine,
    version_sensitivity,
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
from coordinator.verify import IntegrityReport, verify_integrity


class TransformEngine(Protocol):
    """Anything that runs ODF transform requests (in-process Spark, the engine worker…)."""

    def execute_transform(self, request: TransformRequest) -> TransformResponse:
        """Run one request; failures are responses, not exceptions."""
        ...


DATAFUSION_BATCH = 8
"""Blocks per engine round trip in a DataFusion replay. A DataFusion block of a few thousand
rows takes the engine a few ms, as much as one gRPC call from Python; 8 makes the call's share
small while a stop at a mismatch discards at most two batches of speculative work."""

BATCH_INPUT_BYTES = 16 << 20
"""A batch stops growing once its blocks' input files reach this size: for big slices the
call's cost is negligible, and batching them would only keep more outputs on disk at once."""

ReplayListener = Callable[[int, int, Multihash], None]
"""``listener(done, total, block_hash)`` — called after each replayed block."""


class Verdict(Enum):
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
    verdict: Verdict = Verdict.OK
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
        return self.verdict is Verdict.OK

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
        if self.verdict is Verdict.INCONCLUSIVE:
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
        batch: blocks per engine round trip (default: :data:`DATAFUSION_BATCH` for DataFusion,
            else 1); only with ``ahead``.
        batches_ahead: batches in flight beyond the one being judged, for an engine with
            ``execute_transform_batch`` (others: one block ahead).
    """
    report = ReplayReport(head=dataset.head())
    cache = ChainCache()  # every block of every chain read once for the whole replay
    chain = list(cache.iter_blocks(dataset, report.head))
    chain.reverse()
    set_transform: m.SetTransform | None = None
    todo: list[tuple[Multihash, m.MetadataBlock, m.SetTransform]] = []
    for h, b in chain:
        if isinstance(b.event, m.SetTransform):
            set_transform = b.event
        elif isinstance(b.event, m.ExecuteTransform) and set_transform is not None:
            todo.append((h, b, set_transform))
    # kamu replays with the *current* SetTransform (transform evolution is a TODO there too).
    current = set_transform
    report.blocks_total = len(todo)
    if current is not None:
        precise = getattr(engine, "nondeterminism", None)
        report.nondeterministic_reasons = (
            tuple(precise(current.transform)) if callable(precise) else ()
        ) or nondeterminism_reasons(current.transform)
    versions_of = getattr(engine, "pinned_versions", None)
    engine_name = normalize_engine(current.transform.engine) if current is not None else ""
    available: tuple[str, ...] = (
        tuple(versions_of(engine_name)) if callable(versions_of) and current is not None else ()
    )
    if current is not None and engine_name == DATAFUSION:
        report.version_sensitive_reasons = version_sensitivity(current.transform)
    own_dir = work_dir is None
    scratch = Path(tempfile.mkdtemp(prefix="odf-replay-")) if work_dir is None else work_dir
    # Engine requests in flight ahead of the block being judged: while the parent hashes and
    # compares block k, the engine already runs the next blocks (their requests depend only on
    # the chain, never on block k's outcome). Speculative runs are discarded if the replay stops.
    # Interleaved A/B, 30 DataFusion blocks x 1,000 rows on the worker, 6 rounds at load ~12:
    # median 24.7 ms/block one block ahead vs 32.3 serial (ahead faster in 5 of 6 rounds).
    # A batching engine (the node's workers) gets batches, two ahead: the second is already
    # planned and queued while the engine runs the first, so the engine does not wait for the
    # parent's planning between batches. One thread calls the engine: calls stay in order.
    size = max(
        1, batch if batch is not None else DATAFUSION_BATCH if engine_name == DATAFUSION else 1
    )
    run_batch = getattr(engine, "execute_transform_batch", None)
    if not ahead:
        size = 1
    depth = max(1, batches_ahead) if size > 1 and callable(run_batch) else 1
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="odf-replay")
    # Output directories are reused round-robin: at most depth + 1 batches are unconsumed.
    slots = (depth + 1) * size + 1

    def request_for(plan: TransformPlan, version: str | None) -> TransformRequest:
        if version is None:
            return plan.request
        transform = replace(plan.request.transform, version=version)
        return replace(plan.request, transform=transform)

    def plan_one(k: int) -> _Launched:
        _h, block, _ = todo[k]
        paths = OutputPaths.under(scratch / f"slot{k % slots}")
        clear_outputs(paths)
        assert current is not None
        try:
            plan = plan_replay(
                dataset, inputs, block, paths=paths, set_transform=current, cache=cache
            )
        except TransformError as e:
            return _Launched(paths=paths, error=str(e))
        candidates: tuple[str | None, ...] = (None,)
        if engine_name == DATAFUSION and available:
            candidates = candidate_versions(current.transform, block.system_time, available)
        return _Launched(paths=paths, plan=plan, candidates=candidates)

    submit = getattr(engine, "submit_transform_batch", None)
    in_flight: list[Future[list[TransformResponse]]] = []

    def fan_out(
        batch_future: Future[list[TransformResponse]], futures: list[Future[TransformResponse]]
    ) -> None:
        def done(f: Future[list[TransformResponse]]) -> None:
            error = f.exception()
            if error is not None:
                for one in futures:
                    one.set_exception(error)
                return
            for one, r in zip(futures, f.result(), strict=True):
                one.set_result(r)

        batch_future.add_done_callback(done)

    def run(requests: list[TransformRequest], futures: list[Future[TransformResponse]]) -> None:
        try:
            if callable(run_batch) and len(requests) > 1:
                for f, r in zip(futures, run_batch(requests), strict=True):
                    f.set_result(r)
            else:
                for f, req in zip(futures, requests, strict=True):
                    f.set_result(engine.execute_transform(req))
        except BaseException as e:
            for f in futures:
                if not f.done():
                    f.set_exception(e)

    def launch(k0: int, n: int) -> list[_Launched]:
        """Plan blocks ``k0``… (``n``, up to a planning failure) and submit their runs."""
        out: list[_Launched] = []
        input_bytes = 0
        for k in range(k0, min(k0 + n, len(todo))):
            out.append(plan_one(k))
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
                requests.append(request_for(x.plan, x.candidates[0]))
            if callable(submit) and depth > 1:
                # A pipelining engine: the batch goes out now, behind the ones in flight.
                batch_future = submit(requests)
                in_flight.append(batch_future)
                fan_out(batch_future, futures)
            else:
                pool.submit(run, requests, futures)
        return out

    pending: deque[_Launched] = deque()
    launched = 0  # blocks planned so far
    batches = 0  # batches launched so far
    stopped = False  # a block could not be planned: launch nothing after it

    def launch_next() -> None:
        nonlocal launched, batches, stopped
        if stopped or launched >= len(todo):
            return
        # Batches grow 1, 2, 4… up to ``size`` and shrink towards the end (at most half of
        # what is left), so the engine starts at once and the parent's hashing of the last
        # batch overlaps the engine's work on the ones after it.
        n = min(size, 1 << min(batches, 16), max(1, (len(todo) - launched) // 2))
        more = launch(launched, n)
        batches += 1
        launched += len(more)
        stopped = any(x.plan is None for x in more)
        pending.extend(more)

    try:
        launch_next()
        for done, (h, block, _) in enumerate(todo, start=1):
            if not pending:
                launch_next()
            cur = pending.popleft()
            published = block.event
            assert isinstance(published, m.ExecuteTransform)
            if cur.plan is None or cur.first is None:
                report.verdict, report.error, report.error_block = Verdict.ERROR, cur.error, h
                return report
            plan, paths = cur.plan, cur.paths
            response = cur.first.result()
            if ahead and len(pending) < depth * size:
                launch_next()
            first_error: str | None = None
            first_mismatch: m.ExecuteTransform | None = None
            reproduced: str | None = None
            tried: list[str] = []
            for attempt, version in enumerate(cur.candidates):
                if version is not None:
                    tried.append(version)
                if attempt > 0:
                    clear_outputs(paths)
                    response = pool.submit(
                        engine.execute_transform, request_for(plan, version)
                    ).result()
                if not isinstance(response, TransformSuccess):
                    if first_error is None:
                        kind = (
                            "invalid query"
                            if isinstance(response, TransformInvalidQuery)
                            else "error"
                        )
                        at = f" (version {version})" if version else ""
                        first_error = f"engine {kind}{at}: {response.message}"
                    continue
                try:
                    output = hash_output(plan, response, physical_from=published.new_data)
                except TransformError as e:
                    first_error = first_error or str(e)
                    continue
                replayed = normalize_replayed(published, build_event(plan, response, output))
                if replayed == published:
                    reproduced = version or (available[0] if available else "")
                    break
                if first_mismatch is None:
                    first_mismatch = replayed
            _drop_outputs(paths)
            if reproduced is None:
                report.tried_versions = tuple(tried)
                if first_mismatch is None:
                    report.verdict = Verdict.ERROR
                    report.error = first_error or "engine failed"
                    report.error_block = h
                    return report
                report.mismatch = ReplayMismatch(
                    block_hash=h,
                    sequence_number=block.sequence_number,
                    expected=published,
                    actual=first_mismatch,
                    differences=_differences(published, first_mismatch),
                )
                if report.version_sensitive_reasons:
                    report.verdict = Verdict.INCONCLUSIVE
                elif report.nondeterministic_reasons:
                    report.verdict = Verdict.NOT_REPRODUCIBLE
                else:
                    report.verdict = Verdict.MISMATCH
                return report
            report.block_engines.append(
                BlockEngine(
                    block_hash=h,
                    sequence_number=block.sequence_number,
                    engine=engine_name,
                    version=reproduced,
                )
            )
            report.blocks_replayed = done
            if listener is not None:
                listener(done, len(todo), h)
    finally:
        # A speculative run still going is waited for (an engine call cannot be interrupted)
        # before its output directory goes.
        pool.shutdown(wait=True, cancel_futures=True)
        for f in in_flight:
            with contextlib.suppress(Exception):
                f.result()
        if own_dir:
            shutil.rmtree(scratch, ignore_errors=True)
        else:
            for k in range(min(slots, len(todo))):
                shutil.rmtree(scratch / f"slot{k}", ignore_errors=True)
    return report


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
    "TransformEngine",
    "Verdict",
    "VerificationReport",
    "nondeterminism_reasons",
    "normalize_replayed",
    "replay_transforms",
    "verify_dataset",
]
