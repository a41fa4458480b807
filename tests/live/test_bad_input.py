"""Malformed input to analyze: one line on stderr, exit 2, no traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

GOOD = {"schema_version": 1, "node": "n1", "collected_at": "", "vllmdiag_version": "x", "duration_s": 0.1,
        "probes": {}}


def _analyze(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vllmdiag", "analyze", str(path)], capture_output=True, text=True,
                          timeout=60)


@pytest.mark.parametrize("content", [
    '{"schema_version": 1, "node": ',  # truncated
    "this is not json",
    json.dumps({**GOOD, "schema_version": 99}),
    json.dumps({**GOOD, "probes": {"processes": {"status": "weird", "duration_s": 0}}}),
    json.dumps({**GOOD, "probes": {"processes": {"status": "ok", "duration_s": 0, "data": {"processes": "x"}}}}),
    json.dumps({**GOOD, "probes": {"processes": {"status": "ok", "duration_s": 0, "data": {"processes": [{"pid": "a"}]}}}}),
    json.dumps([1, 2, 3]),
    "",
    "\x00\x01\x02",
])
def test_malformed_snapshot_one_line_exit_2(tmp_path: Path, content: str) -> None:
    f = tmp_path / "bad.json"
    f.write_text(content)
    out = _analyze(f)
    assert out.returncode == 2, (out.returncode, out.stdout, out.stderr)
    assert "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert out.stderr.startswith("vllmdiag: ")


def test_missing_file(tmp_path: Path) -> None:
    out = _analyze(tmp_path / "nope.json")
    assert out.returncode == 2 and "no such file" in out.stderr


def test_unknown_option_is_usage_error() -> None:
    out = subprocess.run([sys.executable, "-m", "vllmdiag", "triage", "--frobnicate"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
