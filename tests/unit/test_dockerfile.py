"""The Dockerfile at the repository root, checked without a container runtime.

``make test`` builds no image (``make test-image`` builds and runs it with podman:
tests/image/check_image.py). What can rot silently is checked here, in a second: every path
it copies exists in the project, it installs the same pinned dependency set as ``make setup``
(``constraints.txt``) and the embedded IPFS node with the same ``npm ci`` command, and the
commands it runs (entry point, health check) are commands the installed CLI has. The compose
file builds this Dockerfile.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from typer.testing import CliRunner

from node.cli import app

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def makefile_setup_commands() -> list[str]:
    return [
        line.strip() for line in (ROOT / "Makefile").read_text().splitlines() if line[:1] == "\t"
    ]


def test_every_copied_path_exists() -> None:
    # COPY --from=STAGE copies from another image (the Node.js runtime), not from the project.
    copies = [args for word, args in instructions() if word == "COPY" and "--from=" not in args]
    assert copies
    for args in copies:
        *sources, _dest = shlex.split(args)
        for src in sources:
            assert (ROOT / src).exists(), f"Dockerfile copies {src!r}, which is not in the project"


def test_the_node_runtime_meets_the_embedded_ipfs_minimum() -> None:
    """Helia needs Node.js >= 20, as `make setup` checks: the image copies it from the official
    Node.js 20 image and checks the version at build time; Debian's own nodejs (18 on
    bookworm) is not installed."""
    stages = [args for word, args in instructions() if word == "FROM"]
    node = next(a for a in stages if a.startswith("node:"))
    assert int(re.match(r"node:(\d+)", node).group(1)) >= 20  # type: ignore[union-attr]
    runs = " ".join(args for word, args in instructions() if word == "RUN")
    assert "nodejs" not in runs.split("apt-get install", 1)[1].split("&&", 1)[0]
    assert ">= 20" in runs


def test_python_dependencies_are_the_pinned_set_of_make_setup() -> None:
    runs = " ".join(args for word, args in instructions() if word == "RUN")
    assert re.search(r"pip install [^&]*-c constraints\.txt (-e )?\.", runs), runs
    assert any("-c constraints.txt" in c for c in makefile_setup_commands())
    copied = " ".join(args for word, args in instructions() if word == "COPY")
    assert "constraints.txt" in copied


def test_js_ipfs_is_installed_with_the_same_npm_command_as_make_setup() -> None:
    npm_make = next(c for c in makefile_setup_commands() if "npm ci" in c)
    npm_make = npm_make.split("&&", 1)[1].strip()  # "cd js && npm ci ..."
    runs = " ".join(args for word, args in instructions() if word == "RUN")
    assert npm_make in runs


def test_entrypoint_is_a_real_cli_command() -> None:
    found = dict(instructions())
    assert '"odf-node"' in found["ENTRYPOINT"]
    assert re.search(r"odf-node =", (ROOT / "pyproject.toml").read_text())
    result = CliRunner().invoke(app, ["run", "--help"])
    assert result.exit_code == 0, result.output


def _probe(command: list[str]) -> str:
    """The URL a health check's ``python -c`` snippet opens (the snippet must compile)."""
    assert command[:2] == ["python", "-c"], command
    compile(command[2], "<healthcheck>", "exec")
    match = re.search(r"urlopen\('([^']+)'", command[2])
    assert match, command[2]
    return match.group(1)


def test_health_checks_probe_the_http_listener() -> None:
    """The image checks liveness (/healthz), compose readiness (/readyz), both on the HTTP
    listener's default port, which the image exposes."""
    import json

    from node.config import load_config

    port = load_config(environ={}).http.port
    found = dict(instructions())
    interval, _, cmd = found["HEALTHCHECK"].partition("CMD ")
    assert "--start-period" in interval
    assert _probe(json.loads(cmd)) == f"http://127.0.0.1:{port}/healthz"
    assert str(port) in found["EXPOSE"].split()
    compose = (ROOT / "deploy" / "compose.yaml").read_text()
    test = re.search(r"test: (\[.*\])", compose)
    assert test, "compose.yaml has no healthcheck test"
    assert _probe(json.loads(test.group(1))[1:]) == f"http://127.0.0.1:{port}/readyz"


def test_compose_builds_the_root_dockerfile() -> None:
    compose = (ROOT / "deploy" / "compose.yaml").read_text()
    assert re.search(r"context:\s*\.\.", compose)
    assert re.search(r"dockerfile:\s*Dockerfile\b", compose)
    assert not (ROOT / "deploy" / "Dockerfile").exists()
