"""The live tests of tests/unit/test_readme_gate_ci.py, which says what they check: these start something."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from test_readme_gate_ci import REPO, _gate_argv  # noqa: F401 - shared with the pure half

CONFIG = REPO / "examples" / "ci" / "gate.yaml"

CAN_UNSHARE = os.geteuid() == 0 and shutil.which("unshare") is not None


def _run_on_clean_node(tmp_path: Path, shm_size: str) -> subprocess.CompletedProcess[str]:
    """The workflow's own gate command, from a checkout-like directory, on a node of its own."""
    argv = _gate_argv()
    assert argv[:2] == ["vllmdiag", "gate"]
    work = tmp_path / f"job-{shm_size}"
    (work / "examples" / "ci").mkdir(parents=True)
    shutil.copy(CONFIG, work / "examples" / "ci" / "gate.yaml")
    (work / "rpc").mkdir()
    cmd = shlex.join([sys.executable, "-m", "vllmdiag", *argv[1:]])
    env = {**os.environ, "VLLM_RPC_BASE_PATH": str(work / "rpc")}
    return subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "--net", "--mount", "--propagation", "private",
                           "sh", "-c", f"mount -t tmpfs -o size={shm_size} tmpfs /dev/shm && exec {cmd}"],
                          cwd=work, capture_output=True, text=True, timeout=90, env=env)


def _junit(path: Path) -> dict[str, str | None]:
    (suite,) = ET.parse(path).getroot().findall("testsuite")
    return {c.get("name") or "": (None if c.find("failure") is None else c.find("failure").get("message"))  # type: ignore[union-attr]
            for c in suite.findall("testcase")}


@pytest.mark.skipif(not CAN_UNSHARE, reason="needs root and unshare (a clean node: private /dev/shm, no processes)")
def test_the_workflows_gate_command_passes_a_clean_node_and_fails_a_small_dev_shm(tmp_path: Path) -> None:
    ok = _run_on_clean_node(tmp_path, "4g")
    assert ok.returncode == 0, ok.stdout[-3000:] + ok.stderr
    cases = _junit(tmp_path / "job-4g" / "gate-junit.xml")
    assert "shm_capacity" in cases and "ports" in cases and not [c for c, f in cases.items() if f], cases
    assert "vllmdiag_gate_passed{" in (tmp_path / "job-4g" / "gate.prom").read_text()

    bad = _run_on_clean_node(tmp_path, "64m")  # TP=8's rings and the 512 MiB headroom do not fit
    assert bad.returncode == 1, bad.stdout[-3000:] + bad.stderr
    assert "shm_capacity" in bad.stdout and "GATE FAILED" in bad.stdout
    failed = {c: f for c, f in _junit(tmp_path / "job-64m" / "gate-junit.xml").items() if f}
    assert list(failed) == ["shm_capacity"], failed
