"""Each catalog fault leaves the raw state a real vLLM hang of that kind leaves.

These check the simulator's ground truth directly (process states, ring flags, stacks, Send-Q);
the triage-level assertions (layer + culprit) live with the analysis tests.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.request
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from vllmdiag_sim import Deployment, faults, ringfmt

from sim_fixtures import assert_clean, sim_state, unread, wait_until  # noqa: F401

pytestmark = pytest.mark.timeout(60)
TP, CULPRIT = 2, 1


def frames(pid: int) -> list[str]:
    out = subprocess.run(["py-spy", "dump", "--json", "--pid", str(pid)], capture_output=True, timeout=15)
    main = next(t for t in json.loads(out.stdout) if t["thread_name"] == "MainThread")
    return [str(f["name"]) for f in main["frames"]]


def leaf(pid: int) -> str:
    return frames(pid)[0]


SPIN_LOOP = {"sched_yield", "get_metadata", "acquire_write", "note_blocked", "__enter__", "__exit__"}


def spins_on_full_ring(pid: int, samples: int = 3) -> bool:
    """A writer spinning on a full ring (acquire_write: read the flags, sched_yield, again). One sample
    may land on any line of that loop, including contextlib's frames around get_metadata or a moment
    with no Python frame above the loop (CI, under load, once): every sample must be inside
    acquire_write, and one of them on the loop itself."""
    for _ in range(samples):
        stack = frames(pid)
        if "MessageQueue.acquire_write" not in stack:
            return False
        above = stack[:stack.index("MessageQueue.acquire_write") + 1]
        if all(name.rsplit(".", 1)[-1] in SPIN_LOOP for name in above):
            return True
    return False


def metric(dep: Deployment, name: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{dep.http_port}/metrics", timeout=5).read().decode()
    return float(next(line.split()[-1] for line in text.splitlines() if line.startswith(f"vllm:{name}{{")))


def ring(dep: Deployment, geo: ringfmt.Geometry, owner_pid: int | None = None) -> str:
    names = [s for s in dep.segments if os.path.getsize(f"/dev/shm/{s}") == geo.total_bytes]
    if owner_pid is not None:  # the worker's own response ring is the one it maps and created
        names = [n for n in names if n in Path(f"/proc/{owner_pid}/maps").read_text()
                 and all(n not in Path(f"/proc/{w}/maps").read_text() for w in dep.pids_by_role["worker"]
                         if w != owner_pid)]
    assert len(names) == 1, names
    return names[0]


def check_load(dep: Deployment) -> None:
    before = metric(dep, "generation_tokens_total")
    assert wait_until(lambda: metric(dep, "generation_tokens_total") > before + 5)
    assert dep.pids_by_role["client"]


def assert_status(pid: int, want: str) -> None:
    assert faults.status(pid) == want


def check_engine_killed(dep: Deployment) -> None:
    assert "engine_core" not in dep.pids_by_role
    for pid in dep.pids_by_role["worker"]:
        assert psutil.Process(pid).ppid() not in (0, dep.root_pid)


def check_endpoint_gone(dep: Deployment) -> None:
    path = dep.ipc_paths[0]  # the API server's input ROUTER is the first endpoint it binds
    assert os.path.exists(path) and path not in Path("/proc/net/unix").read_text()


def check_leaf(rank_leaf: dict[int, str]) -> Callable[[Deployment], None]:
    def check(dep: Deployment) -> None:
        assert {r: leaf(dep.worker_pid(r)) for r in rank_leaf} == rank_leaf
    return check


def check_engine_stuck(dep: Deployment) -> None:
    assert metric(dep, "num_requests_waiting") == 1
    assert leaf(dep.engine_pid()) == "Scheduler._update_waiting_for_remote_kv"
    assert leaf(dep.worker_pid(0)) == "Poller.poll"


def check_rpc_full(dep: Deployment) -> None:
    assert unread(ring(dep, ringfmt.rpc_geometry(TP)), ringfmt.rpc_geometry(TP)) == [0, 10]
    assert spins_on_full_ring(dep.engine_pid())


def check_response_full(dep: Deployment) -> None:
    geo = ringfmt.response_geometry()
    assert unread(ring(dep, geo, dep.worker_pid(CULPRIT)), geo) == [10]
    assert spins_on_full_ring(dep.worker_pid(CULPRIT))


def check_client_stalled(dep: Deployment) -> None:
    port = int(next((dep.path / "acks").glob("client-stalled-*")).name.rsplit("-", 1)[1])
    first = faults.send_q_bytes(dep.http_port or 0, port)
    assert first > 0 and wait_until(lambda: faults.send_q_bytes(dep.http_port or 0, port) > first)


PID_AT_FAULT: dict[str, int] = {}  # deployment id -> its culprit worker's pid before the fault (after it, none may be)
CHECKS: dict[str, Callable[[Deployment], None]] = {
    "healthy-load": check_load,
    "worker-killed": lambda d: assert_status(PID_AT_FAULT[d.id], "zombie"),
    "worker-gone": lambda d: assert_status(PID_AT_FAULT[d.id], "gone"),
    "worker-stopped": lambda d: assert_status(d.worker_pid(CULPRIT), "stopped"),
    "engine-killed": check_engine_killed,
    "endpoint-gone": check_endpoint_gone,
    "rpc-ring-full": check_rpc_full,
    "response-ring-full": check_response_full,
    "engine-stuck": check_engine_stuck,
    "straggler": check_leaf({0: "NCCLLibrary.ncclAllReduce", 1: "GPUModelRunner._prepare_inputs"}),
    "collective-mismatch": check_leaf({0: "NCCLLibrary.ncclAllReduce", 1: "NCCLLibrary.ncclAllGather"}),
    "client-stalled": check_client_stalled,
}


@pytest.mark.parametrize("fault", sorted(CHECKS))
def test_fault_state(fault: str, sim_state: Path) -> None:  # noqa: F811
    with Deployment.up(tp=TP) as dep:
        PID_AT_FAULT[dep.id] = dep.worker_pid(CULPRIT)
        dep.inject(fault)  # the default rank is the node's last one (CULPRIT)
        CHECKS[fault](dep)
        records, segments, ipc = list(dep.processes), dep.segments, dep.ipc_paths
        records.append({"pid": PID_AT_FAULT[dep.id], "create_time": 0})
    assert_clean(records, segments, ipc)


def test_shm_leak_is_removed_unless_kept(sim_state: Path) -> None:  # noqa: F811
    dep = Deployment.up(tp=TP, fault="shm-leak")
    leaked = list(dep.leaked)
    try:
        sizes = sorted(os.path.getsize(f"/dev/shm/{n}") for n in leaked)
        assert sizes == [ringfmt.rpc_geometry(TP).total_bytes, ringfmt.response_geometry().total_bytes]
        assert unread(leaked[0], ringfmt.rpc_geometry(TP)) == [0, 0]
    finally:
        dep.down(keep_leak=True)
    try:
        assert all(os.path.exists(f"/dev/shm/{n}") for n in leaked)
    finally:
        for n in leaked:
            os.unlink(f"/dev/shm/{n}")


def test_unknown_and_start_only_faults_are_refused(sim_state: Path) -> None:  # noqa: F811
    with pytest.raises(faults.FaultError):
        Deployment.up(tp=TP, fault="no-such-fault")
    with pytest.raises(faults.FaultError):
        Deployment.up(tp=1, fault="straggler")
    assert shutil.which("py-spy")
