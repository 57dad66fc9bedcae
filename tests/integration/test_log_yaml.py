"""``odf-node dataset log`` as kamu-cli's ``log`` prints it (issue 41), and which block version a
new chain is written with.

The CLI runs in-process-per-call (subprocess, no daemon, offline): ``dataset create`` of a
snapshot with five metadata events makes a five-block chain without touching any source.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from daemon_harness import ROOT

from coordinator.metadata import model as m
from coordinator.metadata.flatbuffers_serde import decode_manifest, encode_block
from coordinator.metadata.yaml_serde import block_from_dict, block_to_dict, load_yaml_all
from coordinator.multiformats import Multihash
from coordinator.storage.dataset import Dataset

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

#: Seed + four events: five blocks, none using a field newer than spec v0.34.
SNAPSHOT = """\
kind: DatasetSnapshot
version: 1
content:
  name: logged
  kind: Root
  metadata:
    - kind: SetPollingSource
      fetch:
        kind: Url
        url: http://example.invalid/data.csv
      read:
        kind: Csv
        header: true
        schema:
          - "event_time TIMESTAMP"
          - "city STRING"
      merge:
        kind: Ledger
        primaryKey:
          - event_time
    - kind: SetInfo
      description: Five blocks of metadata
      keywords: [a, b]
    - kind: SetLicense
      shortName: CC0
      name: Creative Commons Zero
      websiteUrl: https://creativecommons.org/publicdomain/zero/1.0/
    - kind: SetVocab
      eventTimeColumn: event_time
"""


def cli(home: Path, *args: str, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "node.cli", *args, "--home", str(home)],
        check=False,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        env={**os.environ, **(env or {})},
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout
    return proc.stdout


def make_chain(home: Path, env: dict[str, str] | None = None) -> Dataset:
    cli(home, "init")
    snap = home.parent / f"{home.name}.yaml"
    snap.write_text(SNAPSHOT)
    created = json.loads(cli(home, "dataset", "create", str(snap), "--json", env=env))
    did = created[0]["id"].removeprefix("did:odf:")
    return Dataset(home / "datasets" / did, durable=False)


@pytest.fixture(scope="module")
def v2(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Dataset]:
    home = tmp_path_factory.mktemp("log") / "v2"
    return home, make_chain(home)


@pytest.fixture(scope="module")
def v3(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Dataset]:
    home = tmp_path_factory.mktemp("log") / "v3"
    return home, make_chain(home, {"ODF_NODE_METADATA_WRITE_VERSION": "current"})


def chain(ds: Dataset) -> list[tuple[Multihash, int, Any]]:
    out = []
    for h, block in ds.iter_blocks():
        version, _ = decode_manifest(ds.get_block_bytes(h))
        out.append((h, version, block))
    return out


def test_yaml_log_of_five_blocks_is_a_stream_of_five_blocks(v2: tuple[Path, Dataset]) -> None:
    home, ds = v2
    blocks = chain(ds)
    assert len(blocks) == 5
    text = cli(home, "dataset", "log", "logged", "-o", "yaml")
    # kamu's layout: `---`, `# Block: <hash>`, the manifest, a blank line, per block.
    assert text.count("---\n# Block: ") == 5 and text.startswith("---\n# Block: ")
    ours = load_yaml_all(text)
    theirs = list(yaml.safe_load_all(text))
    assert len(ours) == len(theirs) == 5
    for (h, version, block), doc, doc2 in zip(blocks, ours, theirs, strict=True):
        assert f"# Block: {h}\n" in text
        assert doc["kind"] == "MetadataBlock" and doc["version"] == version == 2
        assert block_from_dict(doc["content"], "content") == block
        assert doc["content"] == block_to_dict(block)
        assert doc2["content"]["sequenceNumber"] == block.sequence_number
    # The chain written without v0.35+ fields is what kamu's spec-v0.34 era writes: version 2,
    # the read step's DDL under `schema` (not `ddlSchema`).
    assert "ddlSchema" not in text and "    schema:\n" in text


def test_a_version_3_chain_prints_version_3_and_the_new_keys(v3: tuple[Path, Dataset]) -> None:
    home, ds = v3
    blocks = chain(ds)
    assert {v for _, v, _ in blocks} == {3}
    text = cli(home, "dataset", "log", "logged", "-o", "yaml")
    docs = load_yaml_all(text)
    assert [d["version"] for d in docs] == [3] * 5
    assert "ddlSchema:" in text
    for (_, _, block), doc in zip(blocks, docs, strict=True):
        assert block_from_dict(doc["content"], "content") == block
    assert len(list(yaml.safe_load_all(text))) == 5


def test_json_and_table_show_every_block(
    v2: tuple[Path, Dataset], v3: tuple[Path, Dataset]
) -> None:
    for home, ds in (v2, v3):
        blocks = chain(ds)
        entries = json.loads(cli(home, "dataset", "log", "logged", "--json"))
        assert [e["hash"] for e in entries] == [str(h) for h, _, _ in blocks]
        assert [e["version"] for e in entries] == [v for _, v, _ in blocks]
        for e, (_, _, block) in zip(entries, blocks, strict=True):
            assert block_from_dict(e["block"], "block") == block
        table = cli(home, "dataset", "log", "logged")
        for kind in ("Seed", "SetPollingSource", "SetInfo", "SetLicense", "SetVocab"):
            assert kind in table


def test_new_chains_keep_the_v034_era_block_bytes(v2: tuple[Path, Dataset], tmp_path: Path) -> None:
    """docs/odf-wire-format.md "Which block version is written": the default form writes
    version 2 whatever the events, including spec v0.35 fields (an MQTT fetch step), which
    kamu-cli v0.264 and earlier wrote in version-2 blocks too."""
    _, ds = v2
    for h, version, block in chain(ds):
        assert version == 2 and encode_block(block, 2) == ds.get_block_bytes(h)
    home = tmp_path / "mqtt"
    cli(home, "init")
    snap = tmp_path / "mqtt.yaml"
    snap.write_text(
        SNAPSHOT.replace("name: logged", "name: sensors").replace(
            "        kind: Url\n        url: http://example.invalid/data.csv\n",
            "        kind: Mqtt\n        host: 127.0.0.1\n        port: 1883\n"
            "        topics:\n          - path: a/b\n            qos: AtLeastOnce\n",
        )
    )
    created = json.loads(cli(home, "dataset", "create", str(snap), "--json"))
    mqtt = Dataset(home / "datasets" / created[0]["id"].removeprefix("did:odf:"), durable=False)
    blocks = chain(mqtt)
    fetches = [b.event.fetch for _, _, b in blocks if isinstance(b.event, m.SetPollingSource)]
    assert len(fetches) == 1 and isinstance(fetches[0], m.FetchStepMqtt)
    for h, version, block in blocks:
        assert version == 2 and encode_block(block, 2) == mqtt.get_block_bytes(h)
    text = cli(home, "dataset", "log", "sensors", "-o", "yaml")
    assert [d["version"] for d in load_yaml_all(text)] == [2] * 5
