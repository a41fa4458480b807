"""The live tests of tests/unit/test_option_groups.py, which says what they check: these start something."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "VLLMDIAG_BOOST": "0", "VLLMDIAG_WATCH_DIR": str(tmp_path)}
    return subprocess.run([sys.executable, "-m", "vllmdiag", *args], capture_output=True, text=True, timeout=60,
                          cwd=ROOT, env=env)


@pytest.mark.parametrize(("args", "line"), [
    (["triage", "--no-boost", "--confirm", "601"], "vllmdiag: --confirm must be between 0 and 600 seconds (fix: "),
    (["triage", "--no-boost", "--watch", "3601"], "vllmdiag: --rates must be between 0 and 3600 seconds (fix: "),
    # the collector's argparse door: the bare line, as a sweep shows it per node
    (["collect", "--no-boost", "--confirm", "-1"], "vllmdiag collect: --confirm must be between 0 and 600 seconds\n"),
    (["collect", "--no-boost", "--budget", "0.1"], "vllmdiag collect: --budget must be between 0.2 and 600 seconds\n"),
    # before any node is resolved or reached: the sweep's Transport no longer checks it a second time
    (["sweep", "n[1-2]", "--confirm", "601"], "vllmdiag: --confirm must be between 0 and 600 seconds (fix: "),
    (["sweep", "n1", "-f", "0"], "vllmdiag: --fanout must be between 1 and 4096 (fix: "),
    (["watch", "--interval", "0"], "vllmdiag: --interval must be between 0.2 and 3600 seconds (fix: "),
])
def test_every_door_says_the_tables_line_and_exits_2(args: list[str], line: str, tmp_path: Path) -> None:
    if args[-1] == "0" and args[0] == "watch":
        args = [*args, "--out", str(tmp_path / "watch")]
    done = _run(*args, tmp_path=tmp_path)
    assert done.returncode == 2, done
    last = done.stderr.splitlines()[-1]  # after it, nothing; before it only triage --watch's rename notice
    assert last == line[:-1] if line.endswith("\n") else last.startswith(line), done.stderr
    assert done.stdout == ""
