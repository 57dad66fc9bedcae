"""The command line shows text as written: help, errors, query rows and subscriptions.

Found by trying the product as a new user: typer renders help as rich markup with emoji codes,
so ``[trust] k`` lost its ``[trust]`` and ``did:key:…`` showed a key emoji; error messages lost
their ``[section]`` names; an ``odf-node sql`` row holding ``[/x]`` failed with rich's
``MarkupError`` and one holding ``[bold]x[/bold]`` lost its brackets; the ``subscriptions``
table printed twelve JSON columns that no terminal could show, and ``subscribe`` twelve mostly
empty fields.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from node.app.results import PeerRow, SubscriptionRow
from node.cli import app
from node.commands.catalog import BY_NAME
from node.commands.cli import RichOutput, err, fail, help_text, out
from node.commands.data import render_rows

DID = "did:odf:fed01" + "ab" * 32


@pytest.fixture(autouse=True)
def _narrow_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests read the output as an 80-column terminal shows it. The CLI's consoles are
    module globals that other test modules in the same worker widen (to 200), so set it here."""
    monkeypatch.setattr(out, "width", 80)
    monkeypatch.setattr(err, "width", 80)


def _plain(text: str) -> str:
    """The help as a reader sees it: no zero-width joiners, lines and box edges undone."""
    text = text.replace("\u2060", "")
    return " ".join(w for w in text.split() if w not in {"│", "╭", "╰"})


def test_help_keeps_config_sections_and_did_key() -> None:
    result = CliRunner().invoke(app, ["subscribe", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    shown = _plain(result.output)
    assert "over [trust] k." in shown
    assert "over the node's [trust] policy" in shown
    assert "(did:key:…)" in shown
    assert "\N{KEY}" not in result.output


def test_help_text_is_plain_for_rich() -> None:
    from rich.text import Text

    for raw in ("[trust] k and [p2p] bootstrap", "did:key:z6Mk… and :smile: and http://x"):
        assert Text.from_markup(help_text(raw)).plain.replace("\u2060", "") == raw


def test_error_keeps_the_setting_it_names(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(typer.Exit):
        fail("[trust] trusted_attesters: policy 'quorum' needs at least k node ids")
    assert "error: [trust] trusted_attesters: policy" in capsys.readouterr().err


def test_query_rows_are_data_not_markup(capsys: pytest.CaptureFixture[str]) -> None:
    answer = {
        "columns": ["s", "t"],
        "rows": [["[bold]x[/bold] and [trust] k", "[/x]"]],
        "inputs": [],
    }
    render_rows(answer, RichOutput(), {})
    shown = capsys.readouterr().out
    assert "[bold]x[/bold] and [trust] k" in shown and "[/x]" in shown
    assert "1 row" in shown


def test_subscriptions_table_fits_and_says_trust(capsys: pytest.CaptureFixture[str]) -> None:
    rows = [
        SubscriptionRow(
            did=DID,
            alias="big-cities",
            since_ns=1,
            accepted_head="f1620" + "c" * 60 + "206a71ed",
            sequence=3,
            verification="verified",
            trust={"state": "trusted", "by": "local", "attesters": []},
            pull={"last_ok_ns": 1, "attempts": []},
        ),
        SubscriptionRow(
            did=DID,
            alias=None,
            since_ns=1,
            trust={"state": "pending", "by": None, "attesters": []},
            pull={"last_ok_ns": None, "attempts": [{"url": "ipfs://x", "reason": "unreachable"}]},
        ),
    ]
    render = BY_NAME["subscriptions.list"].render
    assert render is not None
    render(rows, RichOutput(), {})
    shown = capsys.readouterr().out
    for word in ("big-cities", "verified", "trusted", "206a71ed", "pending", "1 failed"):
        assert word in shown, word
    assert max(len(line) for line in shown.splitlines()) <= 80  # pytest's capture: 80 columns


def test_subscribe_says_what_it_follows_and_where_to_watch(
    capsys: pytest.CaptureFixture[str],
) -> None:
    row = SubscriptionRow(did=DID, alias="big-cities", since_ns=1)
    render = BY_NAME["subscriptions.add"].render
    assert render is not None
    render(row, RichOutput(), {})
    shown = capsys.readouterr().out
    assert f"following big-cities ({DID})" in shown.replace("\n", "")
    assert "odf-node subscriptions" in shown


def test_status_without_a_daemon_says_so(tmp_path: Path) -> None:
    home = tmp_path / "home"
    runner = CliRunner()
    assert runner.invoke(app, ["init", "--home", str(home)]).exit_code == 0
    result = runner.invoke(app, ["status", "--home", str(home)])
    assert result.exit_code == 0, result.output
    assert f"no daemon runs on {home}" in result.stderr.replace("\n", "")
    assert "node_id: did:key:" in result.stdout
    as_json = runner.invoke(app, ["status", "--home", str(home), "--json"])
    assert "no daemon" not in as_json.output  # --json: one JSON document, no note


def test_peers_show_a_score_and_an_age(capsys: pytest.CaptureFixture[str]) -> None:
    seen = time.time_ns() - 90 * 1_000_000_000
    row = PeerRow(
        peer_id="12D3KooWPeer",
        connected=True,
        score=1.0672825206648733,
        addrs=[],
        last_seen_ns=seen,
    )
    render = BY_NAME["peers.list"].render
    assert render is not None
    render([row], RichOutput(), {})
    shown = capsys.readouterr().out
    assert "1.07" in shown and "1.0672" not in shown
    assert "90 s ago" in shown or "91 s ago" in shown
    assert "12D3KooWPeer" in shown and "yes" in shown
