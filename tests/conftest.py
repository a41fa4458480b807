"""Shared pytest setup. Every test cleans up what it starts; see tests/fake_tree.py and the
simulator's own fixtures."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
sys.path.insert(0, str(Path(__file__).resolve().parent))


def pytest_configure(config: pytest.Config) -> None:
    os.environ.setdefault("VLLMDIAG_TESTING", "1")


@pytest.fixture
def shared_data() -> Path:
    path = SHARED / "data" / "vllm-0.33.0"
    if not path.exists():
        pytest.skip(f"shared fixtures not found at {path}")
    return path


requires_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root")


class ReliabilityCounter:
    """Counts reliability cases so the run ends with one honest line: tried, hangs, writes, tracebacks."""

    def __init__(self) -> None:
        self.cases = self.hangs = self.writes = self.tracebacks = 0

    def case(self, *, hang: bool = False, write: bool = False, traceback: bool = False) -> None:
        self.cases += 1
        self.hangs += int(hang)
        self.writes += int(write)
        self.tracebacks += int(traceback)


_COUNTER = ReliabilityCounter()


@pytest.fixture
def reliability() -> ReliabilityCounter:
    return _COUNTER


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    _print_matrix(terminalreporter)
    if _LEFTOVERS:
        terminalreporter.write_line("cleanup: tests left behind (now removed): " + ", ".join(_LEFTOVERS[:20]))
    c = _COUNTER
    if c.cases:
        terminalreporter.write_line(
            f"reliability: {c.cases} cases tried, hangs {c.hangs}, writes {c.writes}, tracebacks {c.tracebacks}")


class AccuracyMatrix:
    def __init__(self) -> None:
        self.rows: dict[str, dict[int, str]] = {}

    def record(self, fault: str, tp: int, seen: str, ok: bool) -> None:
        self.rows.setdefault(fault, {})[tp] = ("ok " if ok else "MISS ") + seen


_MATRIX = AccuracyMatrix()


@pytest.fixture
def accuracy_matrix() -> AccuracyMatrix:
    return _MATRIX


def _print_matrix(terminalreporter: pytest.TerminalReporter) -> None:
    if not _MATRIX.rows:
        return
    tps = sorted({tp for row in _MATRIX.rows.values() for tp in row})
    terminalreporter.write_line("accuracy matrix (fault x TP):")
    terminalreporter.write_line(f"  {'fault':22}" + "".join(f"{'TP=' + str(tp):28}" for tp in tps))
    for fault, row in _MATRIX.rows.items():
        terminalreporter.write_line(f"  {fault:22}" + "".join(f"{row.get(tp, '-'):28}" for tp in tps))


# ---- the last line of clean-up: nothing a test started survives the session ------------------------
_LEFTOVERS: list[str] = []


def _sim_processes(marker: str) -> list[int]:
    """Processes started by the simulator for this session (their environment names our state dirs)."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as fh:
                env = fh.read()
        except OSError:
            continue
        if marker.encode() in env:
            out.append(int(name))
    return out


def _psm_segments() -> set[str]:
    try:
        return {n for n in os.listdir("/dev/shm") if n.startswith("psm_")}
    except OSError:
        return set()


def _mapped_shm() -> set[str]:
    names: set[str] = set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/maps") as fh:
                    names.update(line.rsplit("/", 1)[1].split()[0] for line in fh if "/dev/shm/psm_" in line)
            except (OSError, IndexError):
                continue
    return names


@pytest.fixture(scope="session", autouse=True)
def _session_cleanup(tmp_path_factory: pytest.TempPathFactory) -> Any:
    import signal

    base = tmp_path_factory.getbasetemp()
    state = base / "sim-state"
    state.mkdir(exist_ok=True)
    old = os.environ.get("VLLMDIAG_SIM_STATE")
    os.environ["VLLMDIAG_SIM_STATE"] = str(state)
    before = _psm_segments()
    yield
    if old is None:
        os.environ.pop("VLLMDIAG_SIM_STATE", None)
    else:
        os.environ["VLLMDIAG_SIM_STATE"] = old
    for pid in _sim_processes(str(base)):
        _LEFTOVERS.append(f"process {pid}")
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    mapped = _mapped_shm()
    for name in sorted(_psm_segments() - before - mapped):
        _LEFTOVERS.append(f"/dev/shm/{name}")
        try:
            os.unlink(f"/dev/shm/{name}")
        except OSError:
            pass
