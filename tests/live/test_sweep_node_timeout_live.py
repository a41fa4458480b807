"""``sweep --timeout`` bounds reaching and collecting a node as written; only a node that reported a suspicion
(its collect wrote ``deadline.CONFIRMING``: the confirm window opened) gets --confirm on top (issue 26 item 3).
Before, every node's deadline silently grew by the window: ``--timeout 5`` held a node that never spoke SSH
for 15.6 s. Timings are asserted loosely (a loaded machine); the structure is what is checked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from vllmdiag.runtime.deadline import CONFIRMING

from fleet_fixtures import silent_listener

ROOT = Path(__file__).resolve().parent.parent.parent
GOOD = ROOT / "tests" / "data" / "vllm-real" / "snap-a-healthy.json"


def _cli(*args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "vllmdiag", *args], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return proc, time.monotonic() - start


def _nodes(proc: subprocess.CompletedProcess[str]) -> dict[str, dict[str, object]]:
    return {n["name"]: n for n in json.loads(proc.stdout)["nodes"]}


def test_a_node_that_never_speaks_ssh_times_out_at_timeout(tmp_path: Path) -> None:
    with silent_listener() as port:
        proc, wall = _cli("sweep", "127.0.0.9", "-o", f"Port={port}", "--timeout", "2", "--connect-timeout", "5",
                          "--confirm", "10", "--json")
    node = _nodes(proc)["127.0.0.9"]
    assert node["status"] == "timeout" and node["reason"] == "no answer within 2s", node
    assert wall < 2 + 10  # loosely: not the confirm window on top (before: 2 + 10 + overhead)


def _script(tmp_path: Path, confirming: bool) -> Path:
    raw = json.loads(GOOD.read_text())
    (tmp_path / "good.json").write_text(json.dumps(raw.get("snapshot", raw)))
    say = f"echo '{CONFIRMING}' >&2\n" if confirming else ""
    script = tmp_path / "node"
    script.write_text(f"#!/bin/sh\n{say}sleep 3\ncat {tmp_path}/good.json\n")
    script.chmod(0o755)
    return script


def test_only_a_node_in_its_confirm_window_gets_it_on_top(tmp_path: Path) -> None:
    args = ["--timeout", "1.5", "--confirm", "8", "--json"]
    slow, _ = _cli("sweep", "n1", "--exec", f"{_script(tmp_path, False)} %h", *args)
    assert _nodes(slow)["n1"]["status"] == "timeout" and _nodes(slow)["n1"]["reason"] == "no answer within 1.5s"
    confirming, _ = _cli("sweep", "n1", "--exec", f"{_script(tmp_path, True)} %h", *args)
    node = _nodes(confirming)["n1"]
    assert node["status"] == "ok", node
    assert CONFIRMING not in confirming.stdout + confirming.stderr  # the marker is protocol, not a reason
