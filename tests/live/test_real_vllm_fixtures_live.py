"""The live tests of tests/unit/test_real_vllm_fixtures.py, which says what they check: these start something."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from test_real_vllm_fixtures import DATA  # noqa: F401 - shared with the pure half


@pytest.mark.parametrize(("name", "code", "status", "culprit_title"), [
    ("snap-a-healthy.json", 0, "healthy", None),
    ("snap-b-worker-tp2-stuck.json", 1, "blocked", "VLLM::Worker_TP2"),
    ("snap-c-engine-not-reading.json", 1, "blocked", "VLLM::EngineCore"),
])
def test_analyze_cli(name: str, code: int, status: str, culprit_title: str | None) -> None:
    res = subprocess.run([sys.executable, "-m", "vllmdiag", "analyze", "--json", str(DATA / name)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == code, res.stderr
    verdict = json.loads(res.stdout)["verdict"]
    assert verdict["status"] == status
    assert [c["title"] for c in verdict["culprits"]][:1] == ([culprit_title] if culprit_title else [])
