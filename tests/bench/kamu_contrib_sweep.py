"""``dataset create`` over a directory of kamu ``DatasetSnapshot`` files (e.g. a checkout of
kamu-contrib), in a fresh offline home, in dependency order: accepted / refused, with the reason.

Run: ``.venv/bin/python tests/bench/kamu_contrib_sweep.py DIR [--json] [--keep HOME]``.

Every ``*.yaml`` / ``*.yml`` under ``DIR`` whose text holds ``kind: DatasetSnapshot`` is one
candidate (a file may hold several documents). Roots come first; a derivative is created once
the datasets its ``SetTransform`` inputs name have been created (as ``kamu add -r`` resolves
inputs by name among the snapshots it is given). A snapshot whose input is refused, or named by
no snapshot, is still tried (its refusal then says which input is missing). Each file runs
``odf-node dataset create`` as a separate process, as a user would (in the snapshot's
directory). A file naming a dataset that an earlier file created (kamu-contrib keeps alternative
sources of one dataset side by side) is created in a home of its own, after its inputs.

Each dataset created in the shared home is then read back with ``dataset log -o json`` and its
events compared with what kamu's ``add`` writes for the snapshot (:func:`kamu_normalised`).
Exit status 0 only if every file is accepted and logged as kamu normalises it.

Figures (docs/dataset-create.md): kamu-contrib at 15059c70820fb6694814e0635331ed60c4366cd1
(73 snapshot files): 73 accepted, 71 of 71 logged as kamu normalises them (2 alternatives in
homes of their own); kamu-cli's ``examples/`` at f95532386211216f20645eef580b292bb4555726 (54
files; ``--account examples/private-datasets/snapshots/alice=alice`` and ``...bob=bob``, as its
``init.sh`` adds them): 54 accepted, 53 of 53 logged as kamu normalises them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
CLI = ROOT / ".venv" / "bin" / "odf-node"


def _snapshots(directory: Path) -> list[tuple[Path, list[dict[str, Any]]]]:
    """``(file, [content of each DatasetSnapshot document])`` for every snapshot file."""
    out = []
    for f in sorted([*directory.rglob("*.yaml"), *directory.rglob("*.yml")]):
        text = f.read_text(encoding="utf-8", errors="replace")
        if "DatasetSnapshot" not in text:
            continue
        try:
            docs = [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]
        except yaml.YAMLError:
            docs = []
        contents = [d.get("content") or {} for d in docs if d.get("kind") == "DatasetSnapshot"]
        out.append((f, contents))
    return out


def _inputs(content: dict[str, Any]) -> list[str]:
    refs = []
    for event in content.get("metadata") or ():
        if isinstance(event, dict) and event.get("kind") == "SetTransform":
            for i in event.get("inputs") or ():
                if isinstance(i, dict) and isinstance(i.get("datasetRef"), str):
                    refs.append(i["datasetRef"])
    return refs


def dependency_order(files: list[tuple[Path, list[dict[str, Any]]]]) -> list[Path]:
    """Files ordered so that every input named by a snapshot of the set comes first."""
    names = {str(c.get("name")): f for f, cs in files for c in cs}
    needs = {f: {names[r] for c in cs for r in _inputs(c) if r in names} - {f} for f, cs in files}
    order: list[Path] = []
    done: set[Path] = set()
    while len(order) < len(files):
        ready = [f for f, _ in files if f not in done and needs[f] <= done]
        if not ready:  # a cycle: take the rest as they come (create names the missing input)
            ready = [f for f, _ in files if f not in done]
        for f in ready:
            order.append(f)
            done.add(f)
    return order


def kamu_normalised(content: dict[str, Any], dids: dict[str, str]) -> list[Any]:
    """The events kamu's ``add`` writes after the Seed for a snapshot ``content``.

    kamu-cli (``src/odf/dataset/src/services/metadata_helpers.rs``,
    ``normalize_and_validate_dataset_snapshot``): a transform's single ``query`` becomes
    ``queries: [{query}]`` (``SetTransform`` and a source's ``preprocess``); a ``SetTransform``
    input's ``datasetRef`` becomes the input's DID and its ``alias`` defaults to the reference
    as written. Each event is first spelled canonically by this project's YAML serde (enum
    variants, schema short forms: pinned against kamu by the wire-format tests). ``dids`` maps
    the names created so far to their DIDs.
    """

    def transform(t: dict[str, Any]) -> dict[str, Any]:
        if t.get("query") is None:
            return t
        out = {k: v for k, v in t.items() if k != "query"}
        out["queries"] = [{"query": t["query"]}]
        return out

    from coordinator.metadata import yaml_serde

    events = []
    for raw in content.get("metadata") or ():
        # The canonical spelling of each event (enum variants, schema short forms) is the
        # wire format's (pinned by its own tests); what is compared here is what create does.
        e = yaml_serde.event_to_dict(yaml_serde.event_from_dict(raw, "event"))
        if e.get("kind") == "SetTransform":
            e["transform"] = transform(e["transform"])
            e["inputs"] = [
                {
                    "datasetRef": dids.get(i["datasetRef"], i["datasetRef"]),
                    "alias": i.get("alias") or i["datasetRef"],
                }
                for i in e.get("inputs") or ()
            ]
        elif e.get("kind") in ("SetPollingSource", "AddPushSource") and e.get("preprocess"):
            e["preprocess"] = transform(e["preprocess"])
        events.append(e)
    return events


def _same(a: Any, b: Any) -> bool:
    """Equal as data, YAML's number spellings aside (``1`` and ``1.0``)."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def check_log(
    f: Path, env: dict[str, str], dids: dict[str, str], account: str | None = None
) -> list[str]:
    """Where ``dataset log -o json`` of ``f``'s datasets differs from kamu's normalisation."""
    problems = []
    for content in dict(_snapshots_of(f)).get(f, []):
        name = str(content.get("name"))
        if account is not None and "/" not in name:
            name = f"{account}/{name}"
        proc = subprocess.run(
            [str(CLI), "dataset", "log", name, "-o", "json", "--limit", "1000"],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            problems.append(f"{name}: log failed: {_reason(proc)}")
            continue
        blocks = sorted(json.loads(proc.stdout), key=lambda b: b["block"]["sequenceNumber"])
        dids[name] = blocks[0]["block"]["event"]["datasetId"]
        got = [b["block"]["event"] for b in blocks[1:]]
        want = kamu_normalised(content, dids)
        if not _same(got, want):
            for i, (g, w) in enumerate(zip(got, want, strict=False)):
                if not _same(g, w):
                    problems.append(f"{name}: event {i + 1}: logged {g} != kamu {w}")
                    break
            else:
                problems.append(f"{name}: {len(got)} events logged, kamu {len(want)}")
    return problems


def _snapshots_of(f: Path) -> list[tuple[Path, list[dict[str, Any]]]]:
    text = f.read_text(encoding="utf-8")
    docs = [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]
    return [(f, [d.get("content") or {} for d in docs if d.get("kind") == "DatasetSnapshot"])]


def _reason(proc: subprocess.CompletedProcess[str]) -> str:
    text = (proc.stderr or proc.stdout).strip()
    lines = [ln.strip(" │╭╮╰╯─") for ln in text.splitlines()]
    return " ".join(ln for ln in lines if ln and not ln.startswith("Error")).strip()[:300]


def _create(
    f: Path, env: dict[str, str], account: str | None = None
) -> subprocess.CompletedProcess[str]:
    extra = ["--account", account] if account is not None else []
    return subprocess.run(
        [str(CLI), "dataset", "create", "--json", *extra, str(f)],
        env=env,
        capture_output=True,
        text=True,
        cwd=f.parent,
        check=False,
    )


def _fresh_home(home: Path) -> dict[str, str]:
    env = {**os.environ, "ODF_NODE_HOME": str(home)}
    subprocess.run([str(CLI), "init"], env=env, check=True, capture_output=True, text=True)
    return env


def _account_of(f: Path, accounts: dict[Path, str]) -> str | None:
    for folder, account in accounts.items():
        if f.is_relative_to(folder):
            return account
    return None


def sweep(
    directory: Path, home: Path, accounts: dict[Path, str] | None = None
) -> list[dict[str, Any]]:
    """Create each snapshot file of ``directory`` in ``home`` (initialised here).

    A file naming a dataset an earlier file already created (kamu-contrib keeps alternative
    sources of one dataset side by side) is created in a home of its own, after the files that
    its inputs name (as one would ``kamu add`` it in a workspace of its own). ``accounts``:
    the files under a folder are created as that account (``kamu --account NAME add``).
    """
    accounts = accounts or {}
    env = _fresh_home(home)
    files = _snapshots(directory)
    by_name = {str(c.get("name")): f for f, cs in reversed(files) for c in cs}
    contents = dict(files)
    created: set[str] = set()
    dids: dict[str, str] = {}
    results = []
    for n, f in enumerate(dependency_order(files)):
        names = {str(c.get("name")) for c in contents[f]}
        mismatches: list[str] = []
        t0 = time.perf_counter()
        if names & created:
            alt = _fresh_home(home.with_name(f"{home.name}-alt{n}"))
            for dep in _input_closure(f, contents, by_name):
                _create(dep, alt, _account_of(dep, accounts))
            proc = _create(f, alt, _account_of(f, accounts))
            where = "own home"
        else:
            proc = _create(f, env, _account_of(f, accounts))
            where = "shared home"
        if proc.returncode == 0:
            created |= names
            if where == "shared home":
                mismatches = check_log(f, env, dids, _account_of(f, accounts))
        row: dict[str, Any] = {
            "file": str(f.relative_to(directory)),
            "names": sorted(names),
            "accepted": proc.returncode == 0,
            "home": where,
            "seconds": round(time.perf_counter() - t0, 2),
        }
        if proc.returncode != 0:
            row["reason"] = _reason(proc)
        if mismatches:
            row["log_differs"] = mismatches
        results.append(row)
    return results


def _input_closure(
    f: Path, contents: dict[Path, list[dict[str, Any]]], by_name: dict[str, Path]
) -> list[Path]:
    """The files ``f``'s inputs name, transitively, inputs first (``f`` itself excluded)."""
    out: list[Path] = []

    def visit(g: Path) -> None:
        for c in contents[g]:
            for ref in _inputs(c):
                dep = by_name.get(ref)
                if dep is not None and dep != f and dep not in out:
                    visit(dep)
                    out.append(dep)

    visit(f)
    return out


def main() -> int:
    """Command line: sweep a directory, print one line per file and the totals."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--json", action="store_true", help="one JSON document")
    parser.add_argument("--keep", type=Path, help="use (and keep) this home directory")
    parser.add_argument(
        "--account",
        action="append",
        default=[],
        metavar="SUBDIR=NAME",
        help="create the files under DIRECTORY/SUBDIR as account NAME (repeatable)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="odf-sweep-") as tmp:
        home = args.keep or Path(tmp) / "home"
        accounts = {}
        for spec in args.account:
            sub, _, name = spec.partition("=")
            accounts[(args.directory / sub).resolve()] = name
        results = sweep(args.directory.resolve(), home, accounts)
    accepted = sum(r["accepted"] for r in results)
    if args.json:
        print(json.dumps({"accepted": accepted, "total": len(results), "files": results}))
    else:
        for r in results:
            mark = "accepted" if r["accepted"] else "REFUSED "
            own = " (own home)" if r["home"] == "own home" else ""
            print(f"{mark} {r['file']}{own}" + (f"  -- {r['reason']}" if "reason" in r else ""))
            for problem in r.get("log_differs", ()):
                print(f"         log differs from kamu's normalisation: {problem[:300]}")
        reasons = Counter(r["reason"][:80] for r in results if "reason" in r)
        for reason, n in reasons.most_common():
            print(f"{n:4d} x {reason}")
        print(f"{accepted} accepted of {len(results)}")
        checked = sum(r["home"] == "shared home" and r["accepted"] for r in results)
        differs = sum(bool(r.get("log_differs")) for r in results)
        print(f"{checked - differs} of {checked} logged as kamu normalises them")
    ok = accepted == len(results) and not any(r.get("log_differs") for r in results)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
