"""The readable-head rule of :class:`node.app.data.VerifiedData` (``docs/query.md``).

A dataset made in one home is copied into another (stored, not owned); the second home's state
(in memory) says in turn nothing, a trusted head, and a verified replay. Queries go to the
in-memory query engine twin.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import cast

import pyarrow as pa
import pytest
from daemon_harness import BIG_CITIES_DF_SNAPSHOTS, CITIES_SNAPSHOT

from coordinator.errors import DatasetNotFound
from node.adapters.query_engine import InMemoryQueryEngine
from node.adapters.state import InlineState
from node.app.data import BlockNotOnChain, UnknownTable, VerifiedData
from node.app.errors import HeadNotTrusted, InvalidArgument, QueryError, QueryRejected
from node.app.ports import QueryLimits, StatePort
from node.app.rows import TrustRecord
from node.compose import OfflineOptions, offline_application
from node.home import NodeHome
from node.state import NodeState

LIMITS = QueryLimits(deadline_s=5.0, memory_bytes=1 << 26, max_rows=100, max_bytes=1 << 20)
CSV = "event_time,city,population\n2020-01-01T00:00:00Z,A,10\n2020-01-02T00:00:00Z,B,20\n"


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[NodeHome, str, list[str]]:
    """A home owning ``cities`` with two slices; its DID and block hashes (newest first)."""
    home = NodeHome(tmp_path_factory.mktemp("owner"))
    home.init()
    csv = home.path / "c.csv"
    csv.write_text(CSV)

    async def make() -> tuple[str, list[str]]:
        with offline_application(home, OfflineOptions()) as app:
            [created] = await app.datasets.create(CITIES_SNAPSHOT.rstrip().removesuffix("---"))
            await app.datasets.ingest("cities", [csv], publish=False)
            csv.write_text(CSV.replace("A,10", "C,30").replace("B,20", "D,40"))
            await app.datasets.ingest("cities", [csv], publish=False)
            ds = app.repo.open("cities")
            return created.id, [str(h) for h, _ in ds.iter_blocks()]

    did, blocks = asyncio.run(make())
    return home, did, blocks


def copy_home(made: tuple[NodeHome, str, list[str]], dest: Path) -> tuple[VerifiedData, StatePort]:
    """Another home holding a copy of ``cities`` (no key: not owned)."""
    owner, did, _ = made
    home = NodeHome(dest)
    home.init()
    name = did.removeprefix("did:odf:")
    shutil.copytree(owner.path / "datasets" / name, home.path / "datasets" / name)
    # The alias index: pulled datasets are registered the same way (repository layout).
    for extra in (owner.path / "datasets").iterdir():
        if extra.is_file():
            shutil.copy(extra, home.path / "datasets" / extra.name)
    state = cast(StatePort, InlineState(NodeState.in_memory(time.time_ns)))
    return VerifiedData(home.repository(), state, InMemoryQueryEngine(), LIMITS), state


def test_owned_datasets_are_read_at_their_head(made: tuple[NodeHome, str, list[str]]) -> None:
    owner, did, blocks = made

    async def go() -> None:
        with offline_application(owner, OfflineOptions()) as app:
            assert app.data is not None
            data = VerifiedData(app.repo, app.state, InMemoryQueryEngine(), LIMITS)
            r = await data.resolve("cities")
            assert (r.trust, r.trusted, r.head, r.did) == ("owned", True, blocks[0], did)
            assert r.records == 4 and len(r.table.files) == 2
            answer = await data.query('select * from "cities"')
            assert answer.table.num_rows == 4 and [i.did for i in answer.inputs] == [did]
            tail = await data.tail("cities", 3)
            assert tail.table.column("city").to_pylist() == ["B", "C", "D"]

    asyncio.run(go())


def test_a_stored_copy_needs_trust(made: tuple[NodeHome, str, list[str]], tmp_path: Path) -> None:
    _, did, blocks = made
    data, state = copy_home(made, tmp_path / "h")

    async def go() -> None:
        with pytest.raises(HeadNotTrusted, match="--untrusted"):
            await data.resolve("cities")
        with pytest.raises(HeadNotTrusted):
            await data.query('select * from "cities"')
        assert await data.tables() == []
        r = await data.resolve("cities", untrusted=True)
        assert (r.trust, r.trusted, r.head) == ("untrusted", False, blocks[0])
        # This node replayed the head: verified.
        await state.record_verification(did, blocks[0], "verified", "", 0.1)
        assert (await data.resolve("cities")).trust == "verified"

    asyncio.run(go())


def test_a_followed_dataset_is_read_at_its_trusted_head_not_refs_head(
    made: tuple[NodeHome, str, list[str]], tmp_path: Path
) -> None:
    _, did, blocks = made
    data, state = copy_home(made, tmp_path / "h")
    older = next(b for b in blocks[1:] if b)  # the block before the newest

    async def go() -> None:
        await state.subscribe(did, "cities")
        await state.record_trust(did, TrustRecord(older, "trusted", "quorum"), older)
        r = await data.resolve("cities")
        assert (r.trust, r.head) == ("trusted", older)
        assert r.records == 2 and len(r.table.files) == 1  # only the first slice
        # A block before the trusted head is trusted too; the newest one is not.
        pinned = await data.resolve("cities", block=blocks[-1])
        assert pinned.trust == "trusted"
        with pytest.raises(HeadNotTrusted):
            await data.resolve("cities", block=blocks[0])
        with pytest.raises(BlockNotOnChain):
            await data.resolve("cities", block="f1620" + "00" * 32)

    asyncio.run(go())


def test_unknown_tables_and_oversized_sql(
    made: tuple[NodeHome, str, list[str]], tmp_path: Path
) -> None:
    data, _ = copy_home(made, tmp_path / "h")
    data.max_sql_bytes = 64

    async def go() -> None:
        with pytest.raises(DatasetNotFound):
            await data.resolve("nope")
        with pytest.raises(QueryRejected, match=r"\[query\] max_sql_bytes"):
            await data.query("select 1 -- " + "x" * 100)

    asyncio.run(go())


def missing(name: str) -> InMemoryQueryEngine:
    """An engine answering as DataFusion does when the SQL names a table it was not given."""

    def answer(sql: str, tables: Sequence[object]) -> pa.Table:
        raise QueryError(
            f"DataFusion error: Diagnostic(... message: \"table '{name}' not found\" ...), "
            f"Plan(\"table 'datafusion.public.{name}' not found\")"
        )

    return InMemoryQueryEngine(answer=answer)


def test_an_unknown_table_names_the_readable_ones(
    made: tuple[NodeHome, str, list[str]], tmp_path: Path
) -> None:
    _, did, blocks = made
    data, state = copy_home(made, tmp_path / "h")

    async def go() -> None:
        data.engine = missing("nope")
        # Nothing trusted yet: the stored copy is named as readable with --untrusted.
        with pytest.raises(UnknownTable) as e:
            await data.query('select * from "nope"')
        assert "Readable tables: none" in str(e.value)
        assert '(read with --untrusted): "cities"' in str(e.value)
        await state.record_verification(did, blocks[0], "verified", "", 0.1)
        with pytest.raises(UnknownTable, match=r'Readable tables: "cities"$'):
            await data.query('select * from "nope"')
        data.engine = missing("Cities")
        with pytest.raises(UnknownTable, match='case-sensitive: write "cities"'):
            await data.query("select * from Cities")

    asyncio.run(go())


def test_a_dataset_with_no_data_yet(tmp_path: Path) -> None:
    home = NodeHome(tmp_path / "h")
    home.init()

    async def go() -> None:
        with offline_application(home, OfflineOptions()) as app:
            await app.datasets.create(CITIES_SNAPSHOT.rstrip().removesuffix("---"))
            data = VerifiedData(app.repo, app.state, missing("cities"), LIMITS)
            r = await data.resolve("cities")
            assert (r.trust, r.records, r.table.files) == ("owned", 0, ())
            assert (await data.tail("cities")).table.num_rows == 0
            # The engine registers no table without data parts: the error says why.
            with pytest.raises(UnknownTable, match="has no records yet"):
                await data.query('select * from "cities"')
            target = tmp_path / "out.parquet"
            with pytest.raises(InvalidArgument, match="nothing to export"):
                await data.export("cities", str(target), "parquet")
            assert not target.exists()

    asyncio.run(go())


def test_export_writes_every_part_in_each_format(
    made: tuple[NodeHome, str, list[str]], tmp_path: Path
) -> None:
    import json

    import pyarrow.parquet as pq

    owner, _, blocks = made

    async def go() -> None:
        with offline_application(owner, OfflineOptions()) as app:
            data = VerifiedData(app.repo, app.state, None, LIMITS)
            seen: list[tuple[int, int]] = []
            got = await data.export(
                "cities", str(tmp_path / "c.parquet"), "parquet", progress=lambda *p: seen.append(p)
            )
            assert (got.rows, got.trust, got.head) == (4, "owned", blocks[0])
            assert seen[-1] == (4, 4)
            back = pq.read_table(tmp_path / "c.parquet")
            assert back.column("city").to_pylist() == ["A", "B", "C", "D"]
            await data.export("cities", str(tmp_path / "c.ndjson"), "ndjson")
            rows = [json.loads(line) for line in (tmp_path / "c.ndjson").read_text().splitlines()]
            assert [r["offset"] for r in rows] == [0, 1, 2, 3]
            assert rows[0]["event_time"] == "2020-01-01T00:00:00Z"
            await data.export("cities", str(tmp_path / "c.csv"), "csv")
            assert len((tmp_path / "c.csv").read_text().splitlines()) == 5
            # --as-of the block before the newest: the first slice only.
            old = await data.export("cities", str(tmp_path / "first.csv"), "csv", as_of=blocks[1])
            assert (old.rows, old.head) == (2, blocks[1])
            assert not list(tmp_path.glob(".*partial*"))

    asyncio.run(go())


def test_a_trusted_head_not_fetched_yet_is_not_read(
    made: tuple[NodeHome, str, list[str]], tmp_path: Path
) -> None:
    _, did, blocks = made
    data, state = copy_home(made, tmp_path / "h")
    ahead = "f1620" + "11" * 32  # trusted by attestations, its blocks not pulled yet

    async def go() -> None:
        await state.subscribe(did, "cities")
        await state.record_trust(did, TrustRecord(ahead, "trusted", "quorum"), ahead)
        with pytest.raises(HeadNotTrusted, match="not stored here yet"):
            await data.resolve("cities")
        assert await data.tables() == []
        r = await data.resolve("cities", untrusted=True)
        assert (r.trust, r.trusted, r.head) == ("untrusted", False, blocks[0])

    asyncio.run(go())


def test_which_datasets_a_query_names() -> None:
    from node.app.data import _mentioned

    assert _mentioned('select * from "covid19.canada"', "covid19.canada")
    assert _mentioned("select * from `covid19.canada`", "covid19.canada")
    assert _mentioned("select * from cities where 1=1", "cities")
    assert _mentioned("select * from CITIES", "cities")  # Spark folds case
    assert _mentioned("select * from datafusion.public.cities", "cities")
    # Not a substring of another name or column: its inputs would claim a dataset not read.
    assert not _mentioned('select city from "cities"', "c")
    assert not _mentioned('select * from "big-cities"', "cities")
    assert not _mentioned("select * from \"x\" where name = 'cities'", "cities")
    assert not _mentioned("select * from cities_2020", "cities")


def test_an_integrity_check_of_a_derivative_is_not_a_replay(tmp_path: Path) -> None:
    owner = NodeHome(tmp_path / "owner")
    owner.init()

    async def make() -> tuple[str, str]:
        with offline_application(owner, OfflineOptions()) as app:
            made = await app.datasets.create(BIG_CITIES_DF_SNAPSHOTS)
            ds = app.repo.open("big-cities")
            return made[1].id, str(ds.head())

    did, head = asyncio.run(make())
    data, state = copy_home((owner, did, [head]), tmp_path / "h")

    async def go() -> None:
        await state.record_verification(did, head, "verified", "", 0.1)
        # A light node ([pipeline] replay = false): its "verified" is an integrity check.
        data.replays = False
        with pytest.raises(HeadNotTrusted):
            await data.resolve("big-cities")
        data.replays = True
        assert (await data.resolve("big-cities")).trust == "verified"
        # A trust policy that asked only for an integrity check (the newest verify item).
        await state.enqueue("verify", did, head, {"replay": False})
        with pytest.raises(HeadNotTrusted):
            await data.resolve("big-cities")

    asyncio.run(go())
