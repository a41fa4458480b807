"""Sweeps under hostile or huge input (issue 15 items 7, 9, 14), through the real CLI and real processes.

- one node answering with a malformed snapshot becomes a node-level finding; the others get their
  verdict and --save is still written; absurdly nested input is bad input (exit 2), not a crash;
- --sweep-timeout covers everything from the command's start to the verdict, a 100,000-line hostfile
  included (it took 58 s to resolve before);
- an inventory's ssh_options cannot run a command (ProxyCommand & co. are refused, nothing runs) and
  never precede our hardening options.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from vllmdiag.sweep.inventory import parse_inventory

ROOT = Path(__file__).resolve().parent.parent.parent
GOOD = ROOT / "tests" / "data" / "vllm-real" / "snap-a-healthy.json"


def _cli(*args: str, timeout: float = 120) -> tuple[subprocess.CompletedProcess[str], float]:
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "vllmdiag", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return proc, time.monotonic() - start


def _snapshot() -> dict[str, Any]:
    raw = json.loads(GOOD.read_text())
    return raw.get("snapshot", raw)


def _node_script(tmp_path: Path, bad: dict[str, Any]) -> Path:
    """An exec template's stand-in: prints a real snapshot for every node, the ``bad`` one for node n2."""
    (tmp_path / "good.json").write_text(json.dumps(_snapshot()))
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    script = tmp_path / "node"
    script.write_text(f'#!/bin/sh\nif [ "$1" = n2 ]; then cat {tmp_path}/bad.json; else cat {tmp_path}/good.json; fi\n')
    script.chmod(0o755)
    return script


def test_one_malformed_node_does_not_sink_the_sweep(tmp_path: Path, reliability: Any) -> None:
    bad = _snapshot()
    bad["probes"]["processes"]["data"]["processes"][0]["pid"] = "not-a-pid"
    script = _node_script(tmp_path, bad)
    proc, _ = _cli("sweep", "n[1-3]", "--exec", f"{script} %h", "--json", "--save", str(tmp_path / "saved"))
    reliability.case(traceback=proc.returncode in (2, 4) and not proc.stdout)
    assert proc.stdout, proc.stderr
    out = json.loads(proc.stdout)
    status = {n["name"]: (n["status"], n["reason"]) for n in out["nodes"]}
    assert status["n1"][0] == status["n3"][0] == "ok"
    assert status["n2"][0] == "error" and "snapshot unreadable" in status["n2"][1]
    assert any(f["code"] == "fleet.node_unreadable" and f["node"] == "n2" for f in out["findings"])
    saved = sorted(p.name for p in (tmp_path / "saved").iterdir())
    assert saved == ["n1.json", "n3.json", "nodes.sweep"]
    offline, _ = _cli("analyze", str(tmp_path / "saved"), "--json")  # the saved directory reads back
    assert offline.returncode in (0, 1, 4) and json.loads(offline.stdout)["verdict"]["status"]


def test_deeply_nested_input_is_bad_input_not_a_crash(tmp_path: Path, reliability: Any) -> None:
    deep: Any = {"leaf": 1}
    for _ in range(900):  # json.loads accepts it; anything recursive after it would not
        deep = {"x": deep}
    snap = _snapshot()
    snap["probes"]["host"]["data"]["nested"] = deep
    path = tmp_path / "deep.json"
    path.write_text(json.dumps(snap))
    proc, _ = _cli("analyze", str(path), "--json")
    reliability.case(traceback=proc.returncode == 4)
    assert proc.returncode == 2 and "nested deeper" in proc.stderr and len(proc.stderr.splitlines()) == 1
    script = _node_script(tmp_path, snap)  # the same from a node: that node is garbled, the others fine
    proc, _ = _cli("sweep", "n[1-2]", "--exec", f"{script} %h", "--json")
    status = {n["name"]: (n["status"], n["reason"]) for n in json.loads(proc.stdout)["nodes"]}
    assert status["n1"][0] == "ok" and status["n2"][0] == "error" and "nested deeper" in status["n2"][1]


def test_sweep_timeout_covers_a_100k_line_hostfile(tmp_path: Path, reliability: Any) -> None:
    hostfile = tmp_path / "hosts"
    hostfile.write_text("".join(f"node{i:06d}\n" for i in range(100_000)))
    hang = tmp_path / "hang"
    hang.write_text("#!/bin/sh\nexec sleep 60\n")
    hang.chmod(0o755)
    limit = 5.0
    proc, wall = _cli("sweep", "--hostfile", str(hostfile), "--exec", f"{hang} %h", "--sweep-timeout", str(limit),
                      "--json", timeout=300)
    reliability.case(hang=wall > limit + 2.5)
    assert wall < limit + 2.5, f"--sweep-timeout {limit} took {wall:.1f} s"
    out = json.loads(proc.stdout)
    assert proc.returncode == 4 and len(out["nodes"]) == 100_000
    assert {n["status"] for n in out["nodes"]} == {"timeout"}
    assert not subprocess.run(["pgrep", "-f", str(hang)], capture_output=True).stdout  # none left running


def test_hostfile_longer_than_the_cap_is_refused(tmp_path: Path) -> None:
    hostfile = tmp_path / "hosts"
    hostfile.write_text("".join(f"n{i}\n" for i in range(100_001)))
    proc, _ = _cli("sweep", "--hostfile", str(hostfile), "--exec", "/bin/true %h", "--json")
    assert proc.returncode == 2 and "too long" in proc.stderr and not proc.stdout


def test_proxy_command_in_an_inventory_runs_nothing(tmp_path: Path, reliability: Any) -> None:
    marker = tmp_path / "ran"
    evil = tmp_path / "evil"
    evil.write_text(f"#!/bin/sh\ntouch {marker}\n")
    evil.chmod(0o755)
    inventory = tmp_path / "fleet.yaml"
    inventory.write_text(json.dumps({"nodes": {"n1": {"address": "127.0.0.1", "ssh_options": [
        f"-oProxyCommand={evil}"]}}}))
    proc, _ = _cli("sweep", "n1", "--inventory", str(inventory), "--json", "--connect-timeout", "2", "--timeout", "5")
    reliability.case(unsafe=marker.exists())
    assert not marker.exists(), "the inventory's ProxyCommand ran"
    assert proc.returncode == 2 and "ProxyCommand" in proc.stderr and len(proc.stderr.splitlines()) == 1


def test_ssh_config_file_in_an_inventory_is_held_to_the_same_allow_list(tmp_path: Path, reliability: Any) -> None:
    marker = tmp_path / "ran"
    config = tmp_path / "ssh_config"
    config.write_text(f"Host n1\n  HostName 127.0.0.1\n  Port 22\n\nHost *\n  ProxyCommand touch {marker}\n")
    inventory = tmp_path / "fleet.yaml"
    inventory.write_text(json.dumps({"defaults": {"ssh_config": str(config)}}))
    proc, _ = _cli("sweep", "n1", "--inventory", str(inventory), "--json", "--connect-timeout", "2", "--timeout", "5")
    reliability.case(unsafe=marker.exists())
    assert not marker.exists() and proc.returncode == 2 and "ProxyCommand" in proc.stderr
    config.write_text("Host n1\n  HostName 127.0.0.1\n  Port=2222\n  IdentitiesOnly yes\n")
    assert parse_inventory({"defaults": {"ssh_config": str(config)}}, "inv").defaults.ssh_config == str(config)
