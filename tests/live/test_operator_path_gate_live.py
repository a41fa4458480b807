"""Issue 35 items 8 and 10 for the gate: a required check that could not look never ends "GATE PASSED";
`--nagios` is a plugin (one line, exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN); `--prom` refuses a name
node_exporter never reads before any check runs; ptrace without Yama is said in words. The real command on a
clean node (its own pid, net and mount namespaces, a private /dev/shm), read as its output reads."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
CAN_UNSHARE = os.geteuid() == 0 and shutil.which("unshare") is not None
NO_NVML = not (Path("/proc/driver/nvidia").exists() or Path("/dev/nvidiactl").exists())


def _gate(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`vllmdiag gate ARGS` on a clean node of its own (piped: a CI log)."""
    cmd = shlex.join([sys.executable, "-m", "vllmdiag", "gate", *args])
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env.update(PYTHONPATH=str(ROOT), VLLM_RPC_BASE_PATH=str(tmp_path))
    return subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "--net", "--mount", "--propagation", "private",
                           "sh", "-c", f"mount -t tmpfs -o size=4g tmpfs /dev/shm && exec {cmd}"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.skipif(not (CAN_UNSHARE and NO_NVML), reason="needs root, unshare and a node without NVML")
def test_a_skipped_required_check_is_not_a_pass_and_is_unknown_to_nagios(tmp_path: Path) -> None:
    out = _gate(tmp_path)
    last = " ".join(out.stdout.split("GATE ")[-1].split())
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr
    assert last.startswith("NOT PROVEN") and "gpu_health" in last and "GATE PASSED" not in out.stdout, last
    assert "ptrace_scope=None" not in out.stdout
    nagios = _gate(tmp_path, "--nagios")
    assert nagios.returncode == 3 and nagios.stdout.count("\n") == 1, nagios.stdout + nagios.stderr
    assert nagios.stdout.startswith("VLLMDIAG GATE UNKNOWN - ") and "gpu_health" in nagios.stdout
    assert nagios.stdout.rstrip().endswith("skip=1") and " | pass=" in nagios.stdout
    config = tmp_path / "gate.yaml"
    config.write_text("skip: [gpu_health]\n")  # where NVML cannot apply, as the NOT PROVEN line says
    skipped = _gate(tmp_path, "--config", str(config))
    assert skipped.returncode == 0 and "GATE PASSED" in skipped.stdout, skipped.stdout[-1500:]
    quiet = _gate(tmp_path, "--config", str(config), "--nagios")
    assert quiet.returncode in (0, 1) and quiet.stdout.startswith(("VLLMDIAG GATE OK - ", "VLLMDIAG GATE WARNING - "))


def test_prom_name_is_checked_before_any_check_runs(tmp_path: Path) -> None:
    junit = tmp_path / "j.xml"
    out = subprocess.run([sys.executable, "-m", "vllmdiag", "gate", "--prom", str(tmp_path / "gate.txt"),
                          "--junit", str(junit)], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 2 and out.stdout == "" and len(out.stderr.splitlines()) == 1, out.stderr
    assert "*.prom" in out.stderr and not junit.exists() and not (tmp_path / "gate.txt").exists()
    nagios = subprocess.run([sys.executable, "-m", "vllmdiag", "gate", "--nagios", "--prom", "gate.txt"],
                            capture_output=True, text=True, timeout=60, cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert nagios.returncode == 3 and nagios.stdout.startswith("VLLMDIAG GATE UNKNOWN - --prom"), nagios.stdout
