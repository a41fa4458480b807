"""The live tests of tests/unit/test_two_nodes_fixtures.py, which says what they check: these start something."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from test_two_nodes_fixtures import DATA  # noqa: F401 - shared with the pure half


@pytest.mark.parametrize(("state", "rc", "status"), [("idle", 0, "healthy"), ("rank1-held", 1, "blocked"),
                                                    ("node1-worker-killed-then-request", 3, "no-deployment")])
def test_analyze_of_the_saved_sweep_directory(state: str, rc: int, status: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "vllmdiag", "analyze", str(DATA / state), "--json"],
                          capture_output=True, text=True, timeout=120)
    out = json.loads(proc.stdout)
    assert (proc.returncode, out["verdict"]["status"]) == (rc, status), out["verdict"]["summary"]
