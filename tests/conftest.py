"""Shared pytest setup. Every test cleans up what it starts; see tests/fake_tree.py and the
simulator's own fixtures."""

from __future__ import annotations

import os
import sys
from pathlib import Path

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
    c = _COUNTER
    if c.cases:
        terminalreporter.write_line(
            f"reliability: {c.cases} cases tried, hangs {c.hangs}, writes {c.writes}, tracebacks {c.tracebacks}")
