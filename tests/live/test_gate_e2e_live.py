"""The live tests of tests/unit/test_gate_e2e.py, which says what they check: these start something."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from vllmdiag.gate.contract import names

CAN_UNSHARE = os.geteuid() == 0 and shutil.which("unshare") is not None
root_only = pytest.mark.skipif(not CAN_UNSHARE, reason="needs root and unshare (private /dev/shm tmpfs)")


def gate_in_namespace(tmp_path: Path, shm_size: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`vllmdiag gate` as a clean node: own pid, net and mount namespace with its own tmpfs /dev/shm."""
    rpc = tmp_path / "rpc"
    rpc.mkdir(exist_ok=True)
    cmd = shlex.join([sys.executable, "-m", "vllmdiag", "gate", *args])
    script = f"mount -t tmpfs -o size={shm_size} tmpfs /dev/shm && exec {cmd}"
    env = {**os.environ, "VLLM_RPC_BASE_PATH": str(rpc)}
    return subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "--net", "--mount", "--propagation", "private",
                           "sh", "-c", script], capture_output=True, text=True, timeout=60, env=env)


@root_only
def test_clean_node_passes_and_junit_has_one_testcase_per_check(tmp_path: Path) -> None:
    junit = tmp_path / "gate.xml"
    prom = tmp_path / "gate.prom"
    cfg = tmp_path / "gate.yaml"
    cfg.write_text("ports: [8000, 29500]\n")
    proc = gate_in_namespace(tmp_path, "2g", "--tp", "2", "--config", str(cfg), "--json", "--junit", str(junit),
                             "--prom", str(prom))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    out = json.loads(proc.stdout)
    checks = {c["name"]: c for c in out["gate"]["checks"]}
    assert checks["shm_capacity"]["status"] == "pass" and checks["shm_leaks"]["status"] == "pass"
    assert checks["gpu_health"]["status"] in ("skip", "warn", "pass")
    assert set(checks) == set(names("node", "url")) - {"url_health", "url_metrics", "url_completion"}
    suites = ET.parse(junit).getroot()
    assert suites.tag == "testsuites"
    (suite,) = suites.findall("testsuite")
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == list(checks)
    assert suite.get("tests") == str(len(cases)) and suite.get("failures") == "0"
    assert int(suite.get("skipped") or 0) == sum(1 for c in cases if c.find("skipped") is not None)
    text = prom.read_text()
    assert 'vllmdiag_gate_check{node="' in text and 'check="shm_capacity",status="pass",required="true"} 1' in text
    assert "vllmdiag_gate_passed{" in text and "vllmdiag_gate_last_run_timestamp_seconds{" in text
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


@root_only
def test_too_small_dev_shm_fails_shm_capacity(tmp_path: Path) -> None:
    proc = gate_in_namespace(tmp_path, "64m", "--tp", "8", "--json")
    assert proc.returncode == 1, proc.stderr
    checks = {c["name"]: c for c in json.loads(proc.stdout)["gate"]["checks"]}
    shm = checks["shm_capacity"]
    assert shm["status"] == "fail" and shm["required"]
    assert shm["numbers"]["size_bytes"] == 64 << 20 and shm["numbers"]["need_bytes"] > 2 << 30


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vllmdiag", "gate", *args], capture_output=True, text=True, timeout=60)


def test_bad_usage_and_config_exit_2_with_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "gate.yaml"
    bad.write_text("limits:\n  nofile_min: many\n")
    for args in (["--config", str(bad)], ["--tp", "0"], ["--url", "ftp://x"], ["--config", str(tmp_path / "none.yaml")]):
        proc = _cli(*args)
        assert proc.returncode == 2, (args, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("vllmdiag: "), proc.stderr
    assert "limits.nofile_min" in _cli("--config", str(bad)).stderr
