"""The terminal at 80 columns: verdict first and said once, the culprit marked wherever it appears,
healthy rows folded (a healthy TP=8 node fits one screen; -v shows every row), nothing a user needs
cut (model name, pids), every red cell explained; live progress on a terminal; `collect --help`."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
from pathlib import Path

import pytest

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="py-spy needs root to read the simulator's stacks")
SCREEN_LINES = 40


def _vllmdiag(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "80", "NO_COLOR": "1", **(env or {})}
    return subprocess.run([sys.executable, "-m", "vllmdiag", *args], capture_output=True, text=True, timeout=120, env=env)


@pytest.fixture
def sim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> object:
    monkeypatch.setenv("VLLMDIAG_SIM_STATE", str(tmp_path / "state"))
    from vllmdiag_sim.deployment import Deployment

    return Deployment


def _assert_fits_80(text: str) -> None:
    wide = [line for line in text.splitlines() if len(line) > 80]
    assert not wide, wide[:3]
    assert "…" not in text, "nothing is cut with an ellipsis"


def _pids_shown(text: str) -> set[int]:
    """Every pid the text names: a folded group lists its pids or, when they run consecutively in rank
    order, spans them (`pids 8402-8409`: a fresh machine forks the workers back to back, as CI's did)."""
    flat = re.sub(r"[\s│├└─]+", " ", text)  # a wrapped line goes on after the tree's guides
    out = {int(p) for p in re.findall(r"\bpid (\d+)", flat)}
    for group in re.findall(r"\bpids ([\d,\- ]+)", flat):
        for part in group.replace(" ", "").split(","):
            lo, _, hi = part.partition("-")
            if lo.isdigit():
                out.update(range(int(lo), int(hi or lo) + 1))
    return out


@needs_root
def test_healthy_tp8_node_fits_one_80_column_screen(sim: object) -> None:
    with sim.up(tp=8) as dep:  # type: ignore[attr-defined]
        out = _vllmdiag("triage", "--pid", str(dep.root_pid))
        verbose = _vllmdiag("triage", "--pid", str(dep.root_pid), "-v")
        workers = dep.pids_by_role["worker"]
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    assert len(text.splitlines()) <= SCREEN_LINES, f"{len(text.splitlines())} lines:\n{text}"
    _assert_fits_80(text)
    assert "facebook/opt-125m" in text and "VLLM::Worker_TP[0-7]" in text
    assert set(workers) <= _pids_shown(text), "every worker pid is still shown"
    for line in text.splitlines():  # a red word on a healthy node must say why it is fine
        if "timeout" in line or "silent" in line:
            assert "not ZMQ" in line or "fine" in line, line
    assert "HEALTHY" in text.splitlines()[1], "the verdict comes first"
    assert verbose.returncode == 0 and all(f"VLLM::Worker_TP{r} " in verbose.stdout for r in range(8))
    assert len(verbose.stdout.splitlines()) > len(text.splitlines())
    _assert_fits_80(verbose.stdout)


@needs_root
def test_blocked_node_says_the_verdict_once_and_marks_the_culprit(sim: object) -> None:
    with sim.up(tp=4, fault="straggler", rank=2) as dep:  # type: ignore[attr-defined]
        culprit = dep.worker_pid(2)
        out = _vllmdiag("triage", "--pid", str(dep.root_pid))
    assert out.returncode == 1, out.stdout + out.stderr
    text = out.stdout
    _assert_fits_80(text)
    flat = re.sub(r"[│╭╮╰╯\s]+", " ", text)
    assert flat.count("TP2 never arrived") == 1, "the verdict's sentence is said once"
    tree_line = next(line for line in text.splitlines() if f"pid {culprit}  " in line and "Worker_TP2" in line
                     and "│ " not in line[:3])
    assert "◀ culprit" in tree_line
    assert re.search(r"TP2 ◀ culprit\s+executing", text), "the stack class row of the culprit is marked"


def test_collect_help_is_in_the_style_of_the_other_commands() -> None:
    out = _vllmdiag("collect", "--help")
    assert out.returncode == 0 and "Usage: vllmdiag collect [OPTIONS]" in out.stdout
    assert "╭─ Options" in out.stdout and "--budget" in out.stdout and "<path>" in out.stdout  # --out's metavar
    assert "whole command" in " ".join(out.stdout.replace("│", " ").split())  # --budget: the README's meaning
    triage = _vllmdiag("triage", "--help")
    assert "╭─ Options" in triage.stdout and "--verbose" in triage.stdout


def test_watch_shows_live_progress_on_a_terminal_only() -> None:
    try:
        master, slave = pty.openpty()
    except OSError as exc:
        pytest.skip(f"no pseudo-terminal here ({exc})")
    env = {**os.environ, "COLUMNS": "80"}
    proc = subprocess.Popen([sys.executable, "-m", "vllmdiag", "triage", "--probe", "host", "--probe", "processes",
                             "--rates", "1"], stdout=subprocess.PIPE, stderr=slave, env=env)
    os.close(slave)
    seen = b""
    while True:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
        elif proc.poll() is not None:
            break
    proc.communicate(timeout=60)
    os.close(master)
    assert b"following" in seen, seen[-500:]
    piped = _vllmdiag("triage", "--probe", "host", "--probe", "processes", "--rates", "1")
    assert "following" not in piped.stderr, "no progress in pipes and logs"
