"""The gate's CI example (issue 35): examples/ci/github-actions.yml parses as a workflow whose gate step
runs `vllmdiag gate --config examples/ci/gate.yaml ...` after installing the release wheel with its
checksum checked, and that very command line, run on a clean node (its own pid, net and mount
namespace with a private /dev/shm), passes with exit 0 and JUnit without failures, and fails with exit 1
and a JUnit failure when /dev/shm is too small for the config's TP=8."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
WORKFLOW = REPO / "examples" / "ci" / "github-actions.yml"
CONFIG = REPO / "examples" / "ci" / "gate.yaml"
GATE_LINE = "vllmdiag gate --config examples/ci/gate.yaml --junit gate-junit.xml --prom gate.prom"
CAN_UNSHARE = os.geteuid() == 0 and shutil.which("unshare") is not None


def _steps() -> list[dict[str, Any]]:
    flow = yaml.safe_load(WORKFLOW.read_text())
    assert flow.get("on", flow.get(True)), "no trigger"  # YAML 1.1 reads the key `on` as true
    return [step for job in flow["jobs"].values() for step in job["steps"]]


def _gate_argv() -> list[str]:
    runs = [line.strip() for step in _steps() for line in str(step.get("run", "")).splitlines()]
    (line,) = [r for r in runs if "vllmdiag gate" in r]
    return shlex.split(line)


def test_workflow_builds_checks_installs_the_wheel_then_runs_the_gate() -> None:
    steps = _steps()
    text = "\n".join(str(s.get("run", "")) for s in steps)
    assert "scripts/build-release" in text and "sha256sum -c" in text
    assert "pip install -q ./dist/vllmdiag-" in text and "pip install vllmdiag" not in text
    assert shlex.join(_gate_argv()) == GATE_LINE
    order = [i for i, s in enumerate(steps) for key in ("sha256sum -c", "vllmdiag gate")
             if key in str(s.get("run", ""))]
    assert order == sorted(order) and len(order) == 2  # checked before anything of it runs
    kept = [s for s in steps if s.get("if") == "always()" and "gate-junit.xml" in str(s.get("with", {}).get("path"))]
    assert kept, "the JUnit file must be kept when the gate fails"


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
