"""The live tests of tests/unit/test_readme.py, which says what they check: these start something."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from test_readme import README, REPO  # noqa: F401 - shared with the pure half


def test_readme_samples_are_the_renderers_output() -> None:
    """The triage and sweep samples replay recorded snapshots: any change to what the renderer prints
    shows here as a diff, fixed by running scripts/readme-sample. The gate sample (a live node) is held
    to its checks, statuses and last line where root can build a clean node."""
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "readme-sample"), "--check"], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr
    assert "$ vllmdiag analyze" in README.read_text()


def test_a_drifted_sample_is_caught(tmp_path: Path) -> None:
    """--check must fail on a README whose sample is not the output (a check that cannot fail tests nothing)."""
    copy = tmp_path / "repo"
    for rel in ("scripts/readme-sample", "README.md"):
        (copy / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, copy / rel)
    for rel in ("tests/data/readme", "tests/data/vllm-cpu-shapes", "examples/ci", "vllmdiag"):
        shutil.copytree(REPO / rel, copy / rel, ignore=shutil.ignore_patterns("__pycache__"))
    text = (copy / "README.md").read_text()
    assert "culprit:  VLLM::Worker_TP1  on vm, pid 17323" in text
    (copy / "README.md").write_text(text.replace("on vm, pid 17323", "on vm, pid 17324", 1))
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run([sys.executable, str(copy / "scripts" / "readme-sample"), "--check"], cwd=copy,
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 1 and "-│ culprit:  VLLM::Worker_TP1  on vm, pid 17324" in proc.stdout, proc.stdout[-3000:]
