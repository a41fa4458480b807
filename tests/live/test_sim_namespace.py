"""Namespaced "nodes": private /proc and /dev/shm; a TP group spanning two of them."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from vllmdiag_sim import Deployment

from sim_fixtures import assert_clean, sim_state  # noqa: F401

pytestmark = [pytest.mark.timeout(60), pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root for unshare")]


def leaf(pid: int) -> str:
    out = subprocess.run(["py-spy", "dump", "--json", "--pid", str(pid)], capture_output=True, timeout=15)
    return str(next(t for t in json.loads(out.stdout) if t["thread_name"] == "MainThread")["frames"][0]["name"])


def test_shm_small_node_has_private_small_dev_shm(sim_state: Path) -> None:  # noqa: F811
    with Deployment.up(tp=2, fault="shm-small") as dep:
        root = f"/proc/{dep.root_pid}/root/dev/shm"
        st = os.statvfs(root)
        assert st.f_blocks * st.f_frsize == 256 << 20
        assert sorted(os.listdir(root)) == sorted(dep.segments)
        assert not any(os.path.exists(f"/dev/shm/{s}") for s in dep.segments)
        records, ipc = list(dep.processes), dep.ipc_paths
    assert_clean(records, [], ipc)


def test_tp_group_across_two_nodes_straggler_on_node_b(sim_state: Path) -> None:  # noqa: F811
    port = 29000 + os.getpid() % 1000 * 3
    with Deployment.up(tp=4, nnodes=2, node_rank=0, master_port=port, namespace=True) as a, \
            Deployment.up(tp=4, nnodes=2, node_rank=1, master_port=port, namespace=True,
                          fault="straggler", rank=3) as b:
        assert "api_server" in a.pids_by_role and "headless" in b.pids_by_role
        leaves = {r: leaf(d.worker_pid(r)) for d, r in ((a, 0), (a, 1), (b, 2), (b, 3))}
        assert leaves == {0: "NCCLLibrary.ncclAllReduce", 1: "NCCLLibrary.ncclAllReduce",
                          2: "NCCLLibrary.ncclAllReduce", 3: "GPUModelRunner._prepare_inputs"}
        records = a.processes + b.processes
        ipc = a.ipc_paths + b.ipc_paths
    assert_clean(records, [], ipc)
