"""The live tests of tests/unit/test_triage_remembers.py, which says what they check: these start something."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from test_triage_remembers import _watch_dir  # noqa: F401 - shared with the pure half

from vllmdiag.watch.history import ENV

ROOT = Path(__file__).resolve().parent.parent.parent


def test_the_triage_command_says_it_first_then_its_own_look(tmp_path: Path) -> None:
    out = _watch_dir(tmp_path)
    # no --pid: with one, a vLLM running beside the test makes it a usage error before the memory is said
    proc = subprocess.run([sys.executable, "-m", "vllmdiag", "triage", "--json", "--budget", "3", "--confirm", "0",
                           "--no-boost", "--probe", "processes"],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT), ENV: str(out)})
    assert proc.stderr.startswith("watch saw deployment gpu01:77 stall at 2027-01-15T07:50:00Z ("), proc.stderr
    assert re.search(r"evidence \S+vllmdiag-watch-x\.json", proc.stderr)
    assert "Traceback" not in proc.stderr
    # its own look follows: stdout is triage's JSON contract, untouched by the memory
    if proc.stdout.strip():
        assert json.loads(proc.stdout)["verdict"]["status"]
