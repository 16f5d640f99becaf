"""The CI script's verdict: a pytest run that collected no tests is a failure, never a pass; and the
suite's layout: test files import helper modules, never one another."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CI_RUN = ROOT / ".ci" / "run"


def readme_test_command() -> str:
    """The command in the README's "Test" section."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("\n## Test\n"):]
    return section[section.index("```bash\n") + len("```bash\n"):].splitlines()[0].strip()


PYTEST_LINE = f"{readme_test_command()} || rc=$?"


def test_ci_runs_the_readme_test_command():
    assert readme_test_command().startswith("python3 -P -m pytest")
    assert PYTEST_LINE in CI_RUN.read_text()


def _verdict(pytest_rc: int) -> subprocess.CompletedProcess:
    """.ci/run from its test command on, with pytest replaced by a command exiting `pytest_rc`."""
    text = CI_RUN.read_text()
    tail = text[text.index("rc=0\n"):]
    assert PYTEST_LINE in tail
    script = "set -euo pipefail\nstarted=$SECONDS\n" + tail.replace(PYTEST_LINE, f"(exit {pytest_rc}) || rc=$?")
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)


def test_no_tests_collected_fails():
    proc = _verdict(5)  # pytest's "no tests were collected"
    assert proc.returncode != 0
    assert "collected no tests" in proc.stderr


def test_pytest_verdicts_pass_through():
    assert _verdict(0).returncode == 0
    assert _verdict(1).returncode == 1


def test_test_files_import_only_helpers():
    """Shared data and helpers live in helper modules (tests/cli_helpers.py, tests/op_bad_inputs.py, ...):
    a test file, or the code it runs in a child process, imports no test file."""
    tests = ROOT / "tests"
    found = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
             for path in sorted(tests.rglob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), 1)
             if re.match(r"\s*(from|import)\s+\.?test_\w*", line)]
    assert found == []
