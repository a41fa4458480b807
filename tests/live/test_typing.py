"""`mypy tests` is clean with the project's own [tool.mypy] settings and no extra flags (issue 36 item 4):
the tests are code too, and an annotation that lies about a probe's answer (a dict that may be a
Partial) hides the case a test forgot. Skipped where mypy is not installed."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 300  # a cold cache on a loaded 2-core machine took ~25 s; a warm one ~2 s

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy is not installed"),
    pytest.mark.skipif(not (ROOT / "pyproject.toml").is_file(), reason="not a checkout (no pyproject.toml)"),
]


def mypy(*args: str) -> subprocess.CompletedProcess[str]:
    """mypy as a developer runs it: from the checkout's root, so pyproject.toml's [tool.mypy] applies."""
    return subprocess.run([sys.executable, "-m", "mypy", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=TIMEOUT_S)


def test_mypy_tests_is_clean_without_flags() -> None:
    res = mypy("tests")
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]


def test_the_check_sees_the_tests_sibling_helpers(tmp_path: Path) -> None:
    """The config must resolve a test's bare-name sibling import (fake_tree, sim_fixtures, real_vllm...):
    with ignore_missing_imports an unresolved one is Any and a wrong call would pass unseen."""
    planted = tmp_path / "planted_wrong_call.py"
    planted.write_text("from fake_tree import wait_state\n\nwait_state('not a pid', 'T')\n")
    res = mypy(str(planted))
    assert res.returncode == 1 and "wait_state" in res.stdout and "arg-type" in res.stdout, res.stdout + res.stderr
