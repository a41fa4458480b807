"""The live tests of tests/unit/test_error_fixes.py, which says what they check: these start something."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import vllmdiag.analysis.views.stack_match
import vllmdiag.files.infile
import vllmdiag.files.outfile
import vllmdiag.gate.config
import vllmdiag.model
import vllmdiag.playbooks.playbook
import vllmdiag.registry  # noqa: F401  (each module defines one error class)

ROOT = Path(__file__).resolve().parents[2]


def test_the_cli_prints_the_fix_on_its_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "snap.json"
    bad.write_text("{not json")
    out = subprocess.run([sys.executable, "-m", "vllmdiag", "analyze", str(bad)], capture_output=True, text=True,
                         timeout=120, cwd=ROOT)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].endswith(")") and "(fix: " in lines[0], out.stderr
