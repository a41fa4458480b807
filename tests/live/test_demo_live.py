"""`vllmdiag demo` teaches: it says what it injected (fault, rank, pid), what the catalog expects, and
whether the verdict named it; `--fleet` sweeps namespaced nodes through an nsenter exec template;
everything it starts is torn down, also on SIGTERM."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="py-spy and namespaces need root")


def _demo(*args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vllmdiag", "demo", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "rpc").mkdir()
    return {**os.environ, "VLLMDIAG_SIM_STATE": str(tmp_path / "state"), "VLLM_RPC_BASE_PATH": str(tmp_path / "rpc"),
            "COLUMNS": "100"}


def _leftovers(tmp_path: Path) -> list[str]:
    state = tmp_path / "state"
    return [str(p) for p in state.iterdir()] if state.exists() else []


def test_unknown_fault_is_one_line_exit_2_naming_the_list(env: dict[str, str]) -> None:
    """Issue 35 item 8: a near miss gets "did you mean", anything else where the list is, not 28 names."""
    out = _demo("--fault", "nope", env=env, timeout=30)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "vllmdiag sim list-faults" in out.stderr
    assert "shm-leak" not in out.stderr, out.stderr
    typo = _demo("--fault", "stragler", env=env, timeout=30)
    assert typo.returncode == 2 and "did you mean straggler?" in typo.stderr, typo.stderr


@needs_root
def test_demo_says_what_it_injected_and_that_it_found_it(env: dict[str, str], tmp_path: Path) -> None:
    report = tmp_path / "demo.html"
    out = _demo("--tp", "2", "--report", str(report), env=env)
    assert out.returncode == 1, out.stdout[-2000:] + out.stderr
    text = re.sub(r"\s+", " ", out.stdout)
    injected = re.search(r"injected straggler: .* -> VLLM::Worker_TP1 rank 1, pid (\d+)", text)
    assert injected, text[:2000]
    assert "expected answer: blocked at the gpu layer" in text and "BLOCKED" in text
    assert re.search(rf"FOUND vllmdiag answered blocked at the gpu layer; culprit VLLM::Worker_TP1 rank 1 "
                     rf"\(pid {injected.group(1)}\)", text), text[-1500:]
    assert report.read_text().startswith("<!doctype html>")
    assert _leftovers(tmp_path) == []


@needs_root
def test_demo_of_a_healthy_deployment_is_healthy_and_graded(env: dict[str, str], tmp_path: Path) -> None:
    out = _demo("--fault", "healthy", "--tp", "2", env=env)
    assert out.returncode == 0, out.stdout[-2000:]
    assert "FOUND vllmdiag answered healthy" in re.sub(r"\s+", " ", out.stdout)


def test_fleet_demo_without_root_says_so_exit_2(env: dict[str, str]) -> None:
    if os.geteuid() == 0:
        code = "import os, sys; os.geteuid = lambda: 1000; from vllmdiag.cli.app import main; main(sys.argv[1:])"
        out = subprocess.run([sys.executable, "-c", code, "demo", "--fleet"], capture_output=True, text=True,
                             timeout=30, env=env)
    else:
        out = _demo("--fleet", env=env, timeout=30)
    assert out.returncode == 2 and "needs root" in out.stderr and len(out.stderr.strip().splitlines()) == 1


@needs_root
@pytest.mark.slow
def test_fleet_demo_sweeps_namespaced_nodes_and_names_the_sick_one(env: dict[str, str], tmp_path: Path) -> None:
    out = _demo("--fleet", env=env, timeout=180)
    text = re.sub(r"\s+", " ", out.stdout)
    assert out.returncode == 1, text[-3000:] + out.stderr
    assert "injected straggler on gpu01" in text and "--exec 'nsenter --pid=" in text
    assert "FOUND the fleet verdict names gpu01" in text and "gpu[00,02-03] healthy" in text
    links = re.search(r"--pid=(\S+)/%h/ns/pid", text)
    assert links and not Path(links.group(1)).exists(), "the node links directory must be removed"
    assert _leftovers(tmp_path) == []


@needs_root
@pytest.mark.slow
def test_sigterm_during_the_fleet_demo_tears_every_node_down(env: dict[str, str], tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "vllmdiag", "demo", "--fleet", "--nodes", "2"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    seen = ""
    deadline = time.monotonic() + 90
    while "injected" not in seen and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen += line
    assert "injected" in seen, seen
    launchers = _launcher_pids(tmp_path)
    assert launchers, "the demo's nodes were not recorded"
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert _leftovers(tmp_path) == []
    assert not [p for p in launchers if Path(f"/proc/{p}").exists()]


def _launcher_pids(tmp_path: Path) -> list[int]:
    import json

    pids = []
    for state in (tmp_path / "state").glob("*/state.json"):
        pids.append(int(json.loads(state.read_text())["launcher_pid"]))
    return pids
