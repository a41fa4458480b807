"""The live tests of tests/unit/test_strict_json.py, which says what they check: these start something."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from test_strict_json import _strict  # noqa: F401 - shared with the pure half

ROOT = Path(__file__).resolve().parent.parent.parent


def test_analyze_json_of_a_snapshot_with_nan_and_overflow_is_strict(tmp_path: Path, reliability: Any) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    snap = json.loads(subprocess.run([sys.executable, "-m", "vllmdiag", "collect", "--json", "--probe", "host"],
                                     capture_output=True, text=True, timeout=120, env=env, check=True).stdout)
    snap["probes"]["host"]["data"]["hostile"] = {"nan": float("nan"), "big": float("inf"), "list": [float("-inf")]}
    snap["probes"]["host"]["duration_s"] = float("nan")
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(snap))  # NaN, Infinity: what a hostile or old file may hold
    out = subprocess.run([sys.executable, "-m", "vllmdiag", "analyze", str(path), "--json"], capture_output=True,
                         text=True, timeout=120, env=env)
    reliability.case(traceback="Traceback" in out.stderr)
    assert out.stdout, out.stderr
    _strict(out.stdout)
