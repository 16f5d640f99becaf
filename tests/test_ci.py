"""The CI script's verdict: a pytest run that collected no tests is a failure, never a pass."""

from __future__ import annotations

import subprocess
from pathlib import Path

CI_RUN = Path(__file__).resolve().parent.parent / ".ci" / "run"
PYTEST_LINE = "python3 -P -m pytest -q tests || rc=$?"


def _verdict(pytest_rc: int) -> subprocess.CompletedProcess:
    """.ci/run from its test command on, with pytest replaced by a command exiting `pytest_rc`."""
    text = CI_RUN.read_text()
    tail = text[text.index("rc=0\n"):]
    assert PYTEST_LINE in tail
    script = "set -euo pipefail\n" + tail.replace(PYTEST_LINE, f"(exit {pytest_rc}) || rc=$?")
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)


def test_no_tests_collected_fails():
    proc = _verdict(5)  # pytest's "no tests were collected"
    assert proc.returncode != 0
    assert "collected no tests" in proc.stderr


def test_pytest_verdicts_pass_through():
    assert _verdict(0).returncode == 0
    assert _verdict(1).returncode == 1
