"""The live tests of tests/unit/test_render_injection.py, which says what they check: these start something."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_render_injection import CONTROL, hostile_snapshot  # noqa: F401 - shared with the pure half


@pytest.mark.parametrize("fmt", ["md", "html"])
def test_cli_analyze_of_a_hostile_snapshot(tmp_path: Path, fmt: str, reliability: Any) -> None:
    snap = tmp_path / "hostile.json"
    snap.write_text(json.dumps(hostile_snapshot()))
    out_file = tmp_path / f"r.{fmt}"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), "COLUMNS": "200"}
    out = subprocess.run([sys.executable, "-m", "vllmdiag", "analyze", str(snap), "--report", str(out_file)],
                         capture_output=True, text=True, timeout=60, env=env)
    reliability.case(traceback="Traceback" in out.stderr)
    assert out.returncode in (0, 1, 4), out.stderr
    assert not CONTROL.findall(out.stdout.replace("\n", "")) and not CONTROL.findall(out.stderr.replace("\n", ""))
    assert "<script>" not in out_file.read_text()
