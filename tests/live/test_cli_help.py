"""`-h` prints help and exits 0 on every command and subcommand (issue 26 item 3): the habit of kubectl,
clush and py-spy users. A real process per command line: the fast paths (triage, collect) read argv first."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = ["", "triage", "analyze", "collect", "playbook", "demo", "sweep", "gate", "watch",
            "sim", "sim up", "sim inject", "sim list", "sim list-faults", "sim down"]


@pytest.mark.parametrize("command", COMMANDS)
def test_dash_h_prints_help_and_exits_0(command: str) -> None:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'sim'}", "COLUMNS": "120"}
    done = subprocess.run([sys.executable, "-m", "vllmdiag", *command.split(), "-h"], capture_output=True,
                          text=True, timeout=120, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "usage" in done.stdout.lower(), done.stdout
    assert "--help" in done.stdout or "-h" in done.stdout


def _vllmdiag(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'sim'}", "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "vllmdiag", *args], capture_output=True, text=True, timeout=120,
                          env=env, cwd=ROOT)


def test_triage_rates_is_listed_and_the_old_watch_is_not() -> None:
    out = _vllmdiag("triage", "-h").stdout
    assert "--rates" in out and "--watch" not in out


@pytest.mark.parametrize("spelling", ["--watch", "--watch="])
def test_triage_watch_still_works_and_says_once_it_is_rates(spelling: str) -> None:
    args = [spelling + "0.3"] if spelling.endswith("=") else [spelling, "0.3"]
    done = _vllmdiag("triage", "--json", "--budget", "1", "--confirm", "0", *args)
    assert done.stderr.count("--watch is now --rates") == 1, done.stderr
    assert done.returncode in (0, 1, 3, 4), done.stderr  # the node's verdict (no vLLM here: 3), not a usage error
    assert '"watch_s":0.3' in done.stdout.replace(" ", ""), done.stdout[-300:]  # it observed, as --rates does


def test_triage_rates_says_nothing_about_watch() -> None:
    done = _vllmdiag("triage", "--json", "--budget", "1", "--confirm", "0", "--rates", "0.3")
    assert "--watch" not in done.stderr and done.returncode in (0, 1, 3, 4), done.stderr
    bad = _vllmdiag("triage", "--rates", "-1")
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") <= 3
