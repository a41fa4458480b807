"""The live tests of tests/unit/test_progress.py, which says what they check: these start something."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from vllmdiag.analysis.views.stack_match import StackClass, stop_signature


def test_stop_signature_ignores_the_waiting_leaf() -> None:
    base = [["_wait_until_readable", "vllm/distributed/device_communicators/shm_broadcast.py", 871],
            ["get_response", "vllm/v1/executor/multiproc_executor.py", 507]]
    spin = [{"name": "MainThread", "frames": [["sched_yield", "vllm/distributed/utils.py", 40],
                                              ["wait", "vllm/distributed/device_communicators/shm_broadcast.py", 219],
                                              *base]}]
    poll = [{"name": "MainThread", "frames": [["poll", "zmq/sugar/poll.py", 106],
                                              ["wait", "vllm/distributed/device_communicators/shm_broadcast.py", 221],
                                              *base]}]
    sc = StackClass("engine_waiting_workers", thread="MainThread")
    assert stop_signature(spin, sc) == stop_signature(poll, sc)


BASE = {"schema_version": 1, "node": "n1", "collected_at": "", "vllmdiag_version": "x", "duration_s": 0.1, "probes": {}}


@pytest.mark.parametrize("passes", ["x", [1], [{**BASE, "passes": [BASE]}], [BASE] * 300])
def test_malformed_passes_are_one_line_bad_input(tmp_path: Path, passes: Any) -> None:
    f = tmp_path / "bad.json"
    f.write_text(json.dumps({**BASE, "passes": passes}))
    out = subprocess.run([sys.executable, "-m", "vllmdiag", "analyze", str(f)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert "passes" in out.stderr


@pytest.mark.parametrize("value", ["-1", "601", "soon"])
def test_confirm_option_is_checked(value: str) -> None:
    out = subprocess.run([sys.executable, "-m", "vllmdiag", "triage", "--confirm", value], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 2 and "Traceback" not in out.stderr


sim = pytest.importorskip("vllmdiag_sim.deployment")


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="py-spy needs root to read the simulator's stacks")
def test_cli_confirm_off_says_suspected_and_the_saved_file_agrees(tmp_path: Path) -> None:
    with sim.Deployment.up(tp=2, fault="uniform-collective") as d:
        saved = tmp_path / "snap.json"
        argv = [sys.executable, "-m", "vllmdiag", "triage", "--json", "--pid", str(d.root_pid), "--confirm", "0",
                "--save", str(saved)]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        root = d.root_pid
    live = json.loads(out.stdout)
    (f,) = [f for f in live["findings"] if f["code"] in ("gpu.stall_suspected", "gpu.uniform_hang")]
    # Without a window only the quick pass judges: suspected, unless that pass alone lasted 3 s (a loaded box).
    held = f["evidence"]["window_s"] >= 3.0
    assert out.returncode == 1 and live["verdict"]["status"] == ("blocked" if held else "degraded"), f["message"]
    assert "confirm" not in live["snapshot"]["options"]
    again = subprocess.run([sys.executable, "-m", "vllmdiag", "analyze", "--json", "--pid", str(root), str(saved)],
                           capture_output=True, text=True, timeout=60)
    assert json.loads(again.stdout)["verdict"] == live["verdict"]
