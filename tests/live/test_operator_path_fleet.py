"""Issue 35 items 5 and 8 on the fleet path and the simulator, read as a person reads them: the fleet report's
header (one budget, the hosts as one folded node set), the summary said once, each node-aimed command whole
on one line of an 80-column terminal (a wrapped `nsenter ... --` pasted line by line ran half a command), and
`sim up` / `sim inject` saying which process got the fault."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
CAN_NS = os.geteuid() == 0 and shutil.which("unshare") is not None


def _cli(*args: str, env: dict[str, str] | None = None, columns: int | None = None,
         timeout: float = 180) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    full.update(PYTHONPATH=str(ROOT), **({"COLUMNS": str(columns)} if columns else {}), **(env or {}))
    return subprocess.run([sys.executable, "-m", "vllmdiag", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT, env=full)


@pytest.mark.skipif(not CAN_NS, reason="demo --fleet needs root (namespaced nodes)")
def test_fleet_report_and_terminal_read_right(tmp_path: Path) -> None:
    md = tmp_path / "fleet.md"
    out = _cli("demo", "--fleet", "--nodes", "4", "--report", str(md), columns=80)
    assert out.returncode == 1 and "demo FOUND" in out.stdout, out.stdout[-3000:] + out.stderr
    steps = [line for line in out.stdout.splitlines() if line.startswith("  $ ")]
    sweep = [s for s in steps if s.startswith("  $ vllmdiag sweep ")]  # the demo's own command, whole too
    assert len(sweep) == 1 and sweep[0].endswith("-m vllmdiag'"), steps
    steps.remove(sweep[0])
    assert steps and all(re.search(r"-- (py-spy|nvidia-smi|dmesg)", s) for s in steps), steps  # whole commands
    text = md.read_text()
    header = text.split("## Collection")[1].split("##")[0]
    assert "- hosts: gpu[00-03]" in header, header
    (budget,) = re.findall(r"of an? ([\d.]+(?:-[\d.]+)? s) budget", header)  # one budget, not one per node
    assert "," not in budget, header
    summary = text.split("\n\n")[1]
    assert text.split("## Findings")[0].count(summary) == 1, "the summary repeated before the findings"


def test_sim_says_which_process_got_the_fault(tmp_path: Path) -> None:
    env = {"VLLMDIAG_SIM_STATE": str(tmp_path / "state")}
    up = _cli("sim", "up", "--tp", "2", "--fault", "straggler", env=env)
    healthy = _cli("sim", "up", "--tp", "2", env=env)
    try:
        assert up.returncode == 0, up.stderr
        line = next(x for x in up.stdout.splitlines() if x.strip().startswith("fault on"))
        pid = re.search(r"worker\s+\d+\s+(\d+)", up.stdout)
        assert "VLLM::Worker_TP1 rank 1" in line and pid and f"pid {pid.group(1)}" in line, up.stdout
        assert healthy.returncode == 0 and "fault on" not in healthy.stdout, healthy.stdout
        inject = _cli("sim", "inject", healthy.stdout.split()[1], "--fault", "straggler", "--rank", "0", env=env)
        assert inject.returncode == 0 and "fault on         VLLM::Worker_TP0 rank 0" in inject.stdout, inject.stdout
    finally:
        _cli("sim", "down", "--all", env=env)
    typo = _cli("sim", "up", "--fault", "worker-stoped", env=env)
    assert typo.returncode == 2 and "did you mean worker-stopped?" in typo.stderr, typo.stderr
