"""The live tests of tests/unit/test_gate_nothing.py, which says what they check: these start something."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vllmdiag", *args], capture_output=True, text=True, timeout=60,
                          cwd=cwd, env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.mark.parametrize("args", [["sweep", "@typo", "--inventory", "inv.yaml", "--gate", "--junit", "j.xml"],
                                  ["sweep", "@gpus", "--gate", "--junit", "j.xml"],
                                  ["sweep", "@empty", "--inventory", "inv.yaml", "--gate"],
                                  ["sweep", "gpu01,@typo", "--inventory", "inv.yaml"]],
                         ids=["unknown-group", "no-inventory", "empty-group", "unknown-in-a-list"])
def test_an_unknown_or_empty_group_is_a_one_line_usage_error(args: list[str], tmp_path: Path,
                                                             reliability: Any) -> None:
    (tmp_path / "inv.yaml").write_text('groups:\n  gpus: "gpu[01-02]"\n  empty: ""\n')
    out = _run(args, tmp_path)
    reliability.case(traceback="Traceback" in out.stderr)
    assert out.returncode == 2, (out.returncode, out.stdout, out.stderr)
    assert "PASS" not in out.stdout and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "@" in out.stderr
    assert not (tmp_path / "j.xml").exists()
