"""Dataset repository: creation from snapshots (kamu's rules), aliases, atomic creation."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from factories import T0

from coordinator.errors import DatasetAlreadyExists, DatasetNotFound, InvalidSnapshot
from coordinator.identity import DatasetId, generate_private_key, load_private_key
from coordinator.metadata import model as m
from coordinator.metadata.snapshot import DatasetSnapshot
from coordinator.storage.repository import DatasetRepository, normalize_transform


def make_repo(tmp_path: Path) -> DatasetRepository:
    counter = iter(range(1, 1000))
    return DatasetRepository(
        tmp_path / "datasets",
        tmp_path / "keys",
        clock=lambda: T0,
        key_source=lambda: generate_private_key(bytes([next(counter)]) * 32),
        durable=False,
    )


ROOT = DatasetSnapshot(
    name="root",
    kind=m.DatasetKind.ROOT,
    metadata=(
        m.AddPushSource(
            source_name="default",
            read=m.ReadStepCsv(ddl_schema=("a BIGINT",)),
            preprocess=m.TransformSql(engine="spark", query="SELECT * FROM input"),
            merge=m.MergeStrategyAppend(),
        ),
        m.SetInfo(description="d"),
    ),
)


def test_create_root_and_derivative(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    root = repo.create_from_snapshot(ROOT)
    ds = repo.open("root")
    blocks = list(reversed(list(ds.iter_blocks())))
    assert [type(b.event).__name__ for _, b in blocks] == ["Seed", "AddPushSource", "SetInfo"]
    assert [b.sequence_number for _, b in blocks] == [0, 1, 2]
    assert all(b.system_time == T0 for _, b in blocks), "kamu gives all blocks one system time"
    seed = blocks[0][1].event
    assert isinstance(seed, m.Seed) and seed.dataset_id == root.id
    push = blocks[1][1].event
    assert isinstance(push, m.AddPushSource) and push.preprocess is not None
    assert push.preprocess.query is None
    assert push.preprocess.queries == (m.SqlQueryStep(query="SELECT * FROM input"),)
    # The node keeps the dataset's private key, mode 0600.
    key_path = repo.key_path(root.id)
    assert stat.S_IMODE(key_path.stat().st_mode) == 0o600
    assert load_private_key(key_path).dataset_id() == root.id
    # The directory is keyed by DID.
    assert root.root.name == root.id.as_multibase()

    deriv = repo.create_from_snapshot(
        DatasetSnapshot(
            name="deriv",
            kind=m.DatasetKind.DERIVATIVE,
            metadata=(
                m.SetTransform(
                    inputs=(m.TransformInput(dataset_ref="root"),),
                    transform=m.TransformSql(engine="spark", query="SELECT * FROM root"),
                ),
            ),
        )
    )
    st = repo.open(deriv.id.as_did_str()).state()
    assert st.set_transform is not None
    assert st.set_transform.inputs == (
        m.TransformInput(dataset_ref=root.id.as_did_str(), alias="root"),
    )
    assert repo.resolve(root.id.as_did_str()).alias == "root"
    assert [h.alias for h in repo.list()] == ["deriv", "root"]


@pytest.mark.parametrize(
    ("kind", "event"),
    [
        (m.DatasetKind.ROOT, m.AddData(new_watermark=T0)),
        (m.DatasetKind.ROOT, m.DisablePollingSource()),
        (
            m.DatasetKind.DERIVATIVE,
            m.AddPushSource(
                source_name="s",
                read=m.ReadStepCsv(ddl_schema=("a INT",)),
                merge=m.MergeStrategyAppend(),
            ),
        ),
        (
            m.DatasetKind.ROOT,
            m.SetTransform(
                inputs=(m.TransformInput(dataset_ref="x"),),
                transform=m.TransformSql(engine="spark", query="q"),
            ),
        ),
    ],
)
def test_forbidden_snapshot_events(tmp_path: Path, kind: m.DatasetKind, event: object) -> None:
    repo = make_repo(tmp_path)
    with pytest.raises(InvalidSnapshot):
        repo.create_from_snapshot(DatasetSnapshot(name="x", kind=kind, metadata=(event,)))  # type: ignore[arg-type]
    assert repo.list() == []


def test_unknown_input_and_duplicates(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    bad = DatasetSnapshot(
        name="d",
        kind=m.DatasetKind.DERIVATIVE,
        metadata=(
            m.SetTransform(
                inputs=(m.TransformInput(dataset_ref="missing"),),
                transform=m.TransformSql(engine="spark", query="q"),
            ),
        ),
    )
    with pytest.raises(InvalidSnapshot, match="missing"):
        repo.create_from_snapshot(bad)
    repo.create_from_snapshot(ROOT)
    with pytest.raises(DatasetAlreadyExists):
        repo.create_from_snapshot(ROOT)
    with pytest.raises(InvalidSnapshot):
        repo.create_from_snapshot(
            DatasetSnapshot(name="bad name!", kind=m.DatasetKind.ROOT, metadata=())
        )
    with pytest.raises(DatasetNotFound):
        repo.resolve("nope")
    assert not [p for p in repo.root.iterdir() if p.name.startswith(".")], "no staging left"


def test_rename_and_delete(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    h = repo.create_from_snapshot(ROOT)
    (repo.root / ".pull-staging").mkdir()  # hidden work directories are not datasets
    (repo.root / "not-a-did").mkdir()
    (repo.root / h.id.as_multibase()).with_name(h.id.as_multibase()[:-1] + "x").write_text("")
    assert repo.count() == len(repo.list()) == 1  # files, even DID-like names, are not datasets
    repo.rename("root", "acme/root2")
    assert repo.resolve("acme/root2").id == h.id
    repo.delete("acme/root2")
    assert repo.list() == []
    assert repo.count() == 0
    assert make_repo(tmp_path / "absent").count() == 0


def test_normalize_transform() -> None:
    t = normalize_transform(m.TransformSql(engine="spark", query="q"))
    assert t.query is None and t.queries == (m.SqlQueryStep(query="q"),)
    assert normalize_transform(t) is t


def test_alias_lookups_see_renames_and_deletes_by_other_instances(tmp_path: Path) -> None:
    """Alias resolution is cached per instance but never serves a stale answer."""
    a = make_repo(tmp_path)
    b = DatasetRepository(tmp_path / "datasets", tmp_path / "keys", clock=lambda: T0)
    h = a.create_from_snapshot(ROOT)
    assert a.resolve("root").id == h.id  # now remembered by `a`
    b.rename("root", "renamed")  # another process renames it
    with pytest.raises(DatasetNotFound):
        a.resolve("root")
    assert a.resolve("renamed").id == h.id
    b.delete("renamed")
    with pytest.raises(DatasetNotFound):
        a.resolve("renamed")


def test_catalog_matches_list_heads_and_keys(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    owned = repo.create_from_snapshot(ROOT)
    # A pulled copy not written yet: empty chain, no key.
    repo.create_empty(DatasetId.new_seeded_ed25519(b"\x07" * 32), "pulled")
    (repo.root / ".staging-x").mkdir()  # hidden and non-DID entries are not datasets
    (repo.root / "not-a-did").mkdir()
    cat = repo.catalog()
    assert [c.handle for c in cat] == repo.list()
    by_alias = {c.handle.alias: c for c in cat}
    assert by_alias["root"].owned and not by_alias["pulled"].owned
    assert by_alias["root"].head_ref == str(repo.open("root").head())
    assert by_alias["pulled"].head_ref is None
    # A rename and a new head are seen on the next read (nothing is cached).
    repo.rename("root", "renamed")
    repo.key_path(owned.id).unlink()
    again = {c.handle.alias: c for c in repo.catalog()}
    assert set(again) == {"renamed", "pulled"} and not again["renamed"].owned
