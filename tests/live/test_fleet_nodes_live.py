"""The live tests of tests/unit/test_fleet_nodes.py, which says what they check: these start something."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_cli_rejects_hostile_names_and_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    fake = tmp_path / "kubectl"
    fake.write_text(f"#!/bin/sh\ntouch {marker}\n")
    fake.chmod(0o755)
    for name in (f"gpu1;touch {marker}", "$(touch x)", "-oProxyCommand=id", "gpu1 gpu2", "gpu1\ngpu2", "n[0-9999999]"):
        proc = subprocess.run([sys.executable, "-m", "vllmdiag", "sweep", "-w", name, "--exec", f"{fake} exec %h --"],
                              capture_output=True, text=True, timeout=30)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("vllmdiag: ")
        assert not marker.exists()
