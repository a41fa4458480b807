"""`-h` prints help and exits 0 on every command and subcommand (issue 26 item 3): the habit of kubectl,
clush and py-spy users. A real process per command line: the fast paths (triage, collect) read argv first."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
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
