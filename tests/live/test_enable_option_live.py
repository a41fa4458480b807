"""The live tests of tests/unit/test_enable_option.py, which says what they check: these start something."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vllmdiag", *args], capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})


def test_collect_and_triage_take_enable() -> None:
    out = _run("collect", "--enable", "preflight", "--budget", "4")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["probes"]["preflight"]["status"] in ("ok", "partial")
    bad = _run("triage", "--json", "--enable", "nope")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "opt-in probes:" in bad.stderr
