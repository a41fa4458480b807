"""The live tests of tests/unit/test_watch_parts.py, which says what they check: these start something."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize("args", [["--on-stall", "echo 'unbalanced"], ["--webhook", "file:///etc/passwd"],
                                  ["--interval", "0"], ["--keep", "0"], ["--max-bytes", "lots"],
                                  ["--select", "no equals"], ["--report-format", "pdf"],
                                  ["--metrics-port", "70000"], ["--out", "/dev/shm/vllmdiag-watch-test"]])
def test_bad_watch_options_are_one_line_and_exit_2(args: list[str], tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "vllmdiag", "watch", "--out", str(tmp_path / "o"), *args],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) <= 3
    assert not (tmp_path / "o").exists() and not os.path.exists("/dev/shm/vllmdiag-watch-test")
