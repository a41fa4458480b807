"""The live tests of tests/unit/test_real_vllm_cpu_fixtures.py, which says what they check: these start something."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_real_vllm_cpu_fixtures import root, unpacked  # noqa: F401 - shared with the pure half

from vllmdiag.api import analyze_files, load_snapshots


def _version_fields(report_deployments: list[dict[str, Any]]) -> list[str]:
    """Values of any version field of the deployments (not the venv path that names 0.32.0)."""
    out = []
    for dep in report_deployments:
        for key, value in dep.items():
            if "version" in key.lower():
                out.append(str(value.get("version") if isinstance(value, dict) else value))
    return out


@pytest.mark.parametrize(("name", "code"), [
    ("tp2/snap-straggler.json.gz", 1), ("tp2/snap-idle.json.gz", 0), ("tp1/snap-stalled-client.json.gz", 1)])
def test_analyze_cli_on_recorded_real_server(name: str, code: int, tmp_path: Path) -> None:
    path = unpacked(name, tmp_path)
    res = subprocess.run([sys.executable, "-m", "vllmdiag", "analyze", "--json", "--pid", str(root(name)), str(path)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == code, res.stderr[-2000:]
    assert len(json.loads(res.stdout)["deployments"]) == 1


@pytest.mark.parametrize("name", ["tp1/snap-idle.json.gz", "tp2/snap-idle.json.gz"])
def test_vllm_version_is_not_guessed_from_snapshots_recorded_before_the_version_probe(name: str, tmp_path: Path) -> None:
    """These fixtures were recorded before the libs probe read the target's vLLM install (its
    `vllm_installs`): the version is 'not seen', never guessed (not from the venv path that names 0.32.0).
    Reading it is judged on the real env's files (tests/unit/test_vllm_cpu_shapes.py) and live
    (tests/live/test_real_vllm_live.py::test_vllm_version_is_reported)."""
    path = unpacked(name, tmp_path)
    assert "vllm_installs" not in load_snapshots(path)[0].data("libs")
    report = analyze_files([path], pids=[root(name)]).report
    assert _version_fields(report.to_dict()["deployments"]) == ["None", "None"]
