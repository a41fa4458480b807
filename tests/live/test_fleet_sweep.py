"""End to end: `vllmdiag sweep` over real sshd's, each inside its own PID+mount namespace ("node")."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fleet_fixtures import Fleet, NodeSpec, fleet, ns_init_pid, silent_listener, skip_reason

pytestmark = [pytest.mark.root, pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")]
TP4 = ["fake/model", "--tensor-parallel-size", "4"]
MULTI = ["fake/model", "--tensor-parallel-size", "8", "--nnodes", "2", "--master-addr", "127.0.0.1",
         "--master-port", "29777"]
FAST = ["--probe", "processes", "--probe", "host"]  # the fake tree has no sockets/rings: the process layer decides


@pytest.fixture(scope="module")
def nodes() -> Iterator[Fleet]:
    specs = [NodeSpec(f"gpu{i:02d}", f"127.0.0.{20 + i}", TP4) for i in range(3)]
    specs += [NodeSpec("gpu-a", "127.0.0.30", [*MULTI, "--ranks", "0,1,2,3", "--node-rank", "0"]),
              NodeSpec("gpu-b", "127.0.0.31", [*MULTI, "--ranks", "4,5,6,7", "--node-rank", "1", "--headless"],
                       stop_ranks=[5])]
    with silent_listener("127.0.0.9") as silent, fleet(specs, {
            "gpu98": {"address": "127.0.0.9", "port": silent},  # accepts TCP, never speaks SSH
            "gpu99": {"address": "127.0.0.8", "port": 9}}) as fl:  # nothing listens: refused
        yield fl


def sweep(fl: Fleet, *args: str, timeout: float = 60) -> tuple[int, dict[str, Any], float]:
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "vllmdiag", "sweep", *args, "--inventory", str(fl.inventory), "--json"],
                          capture_output=True, text=True, timeout=timeout)
    assert proc.stdout, proc.stderr
    return proc.returncode, json.loads(proc.stdout), time.monotonic() - start


def test_healthy_nodes_are_folded_and_saved(nodes: Fleet, tmp_path: Path) -> None:
    rc, out, _ = sweep(nodes, "gpu[00-02]", "--remote-cmd", nodes.remote_cmd, *FAST, "--save", str(tmp_path / "s"))
    assert rc == 0, out["verdict"]
    assert [(n["name"], n["status"]) for n in out["nodes"]] == [("gpu00", "ok"), ("gpu01", "ok"), ("gpu02", "ok")]
    assert [(c["nodes"], c["status"]) for c in out["fleet"]["classes"]] == [("gpu[00-02]", "healthy")]
    # each node saw its own namespace: its own tree only, with namespace-local pids
    assert all(len(s["probes"]["processes"]["data"]["processes"]) == 6 for s in out["snapshots"])
    offline = subprocess.run([sys.executable, "-m", "vllmdiag", "analyze", str(tmp_path / "s"), "--json"],
                             capture_output=True, text=True, timeout=60)
    assert offline.returncode == 0 and json.loads(offline.stdout)["verdict"]["status"] == "healthy"


def test_rank_stuck_on_node_b_of_a_cross_node_group(nodes: Fleet) -> None:
    rc, out, _ = sweep(nodes, "gpu-a,gpu-b", "--remote-cmd", nodes.remote_cmd, *FAST)
    v = out["verdict"]
    assert rc == 1 and v["status"] == "blocked"
    assert (v["culprits"][0]["node"], v["culprits"][0]["rank"], v["culprits"][0]["role"]) == ("gpu-b", 5, "worker")
    assert out["fleet"]["groups"][0]["nodes"] == ["gpu-a", "gpu-b"]
    assert not [f for f in out["findings"] if "rank_missing" in f["code"]]  # each node holds half the ranks


def test_dead_nodes_listed_and_sweep_ends_on_time(nodes: Fleet) -> None:
    rc, out, wall = sweep(nodes, "gpu00,gpu[98-99]", "--remote-cmd", nodes.remote_cmd, *FAST,
                          "--connect-timeout", "1", "--timeout", "4")
    status = {n["name"]: (n["status"], n["reason"]) for n in out["nodes"]}
    assert status["gpu00"][0] == "ok"
    assert status["gpu98"][0] in ("unreachable", "timeout") and status["gpu99"][0] == "unreachable"
    assert "refused" in str(status["gpu99"][1])
    assert rc == 4 and {c["node"] for c in out["verdict"]["culprits"]} == {"gpu98", "gpu99"}
    assert wall < 4 + 3  # per-node deadline plus CLI start-up, not ssh's defaults


def test_whole_sweep_deadline_kills_hung_nodes(tmp_path: Path) -> None:
    hang = tmp_path / "hang"
    hang.write_text("#!/bin/sh\nsleep 60\n")
    hang.chmod(0o755)
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "vllmdiag", "sweep", "n[1-3]", "--exec", f"{hang} %h", "--timeout", "30",
                           "--sweep-timeout", "1.5", "--json"], capture_output=True, text=True, timeout=30)
    assert time.monotonic() - start < 5
    out = json.loads(proc.stdout)
    assert proc.returncode == 4 and {n["status"] for n in out["nodes"]} == {"timeout"}
    assert not subprocess.run(["pgrep", "-f", str(hang)], capture_output=True).stdout  # killed with its group


def test_ship_runs_the_bundle_with_the_vllm_python(nodes: Fleet) -> None:
    rc, out, _ = sweep(nodes, "gpu01", "--ship", *FAST)
    assert rc == 0 and out["nodes"][0]["status"] == "ok", out["nodes"]
    titles = {p["title"].split()[0] for p in out["snapshots"][0]["probes"]["processes"]["data"]["processes"]}
    assert "VLLM::Worker_TP3" in titles


def test_exec_template_with_a_fake_kubectl(nodes: Fleet, tmp_path: Path) -> None:
    log = tmp_path / "argv.log"
    for name in ("gpu00", "gpu02"):
        (tmp_path / f"{name}.pid").write_text(str(ns_init_pid(nodes.procs[name].pid)))
    kubectl = tmp_path / "kubectl"
    # `kubectl exec POD -- CMD...` enters the pod: here, the node's namespaces.
    kubectl.write_text(f'#!/bin/sh\necho "$@" >> {log}\npod=$2\nshift 3\n'
                       f'exec nsenter -t "$(cat {tmp_path}/$pod.pid)" -p -m -- "$@"\n')
    kubectl.chmod(0o755)
    proc = subprocess.run([sys.executable, "-m", "vllmdiag", "sweep", "gpu[00,02]", "--exec", f"{kubectl} exec %h --",
                           "--remote-cmd", nodes.remote_cmd, *FAST, "--json"], capture_output=True, text=True, timeout=60)
    out = json.loads(proc.stdout)
    assert proc.returncode == 0, out["nodes"]
    lines = log.read_text().splitlines()
    assert sorted(line.split()[:3] for line in lines) == [["exec", "gpu00", "--"], ["exec", "gpu02", "--"]]
    assert all("collect --json --node" in line for line in lines)


def test_gate_over_the_fleet_with_junit(nodes: Fleet, tmp_path: Path) -> None:
    junit = tmp_path / "gate.xml"
    rc, out, _ = sweep(nodes, "gpu[00-01,99]", "--remote-cmd", nodes.remote_cmd, "--gate", "--junit", str(junit),
                       "--connect-timeout", "1", "--timeout", "8")
    assert rc == 1 and out["status"] == "fail" and "gpu99" in out["failed_nodes"]
    by_node = {n["node"]: n for n in out["nodes"]}
    assert {"gpu00", "gpu01", "gpu99"} <= set(by_node)
    assert any(c["name"] == "collect" and c["status"] == "fail" for c in by_node["gpu99"]["checks"])
    assert len(by_node["gpu00"]["checks"]) > 3  # the gate's node checks ran on the swept snapshot
    assert "vllmdiag sweep --gate" in junit.read_text()
