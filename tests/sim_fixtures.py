"""Shared helpers for the simulator's tests: isolated state, cleanup checks, ring reading."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from vllmdiag_sim import ringfmt


@pytest.fixture
def sim_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Deployments of this test keep their state and ipc sockets under tmp_path."""
    state, rpc = tmp_path / "state", tmp_path / "rpc"
    rpc.mkdir()
    monkeypatch.setenv("VLLMDIAG_SIM_STATE", str(state))
    monkeypatch.setenv("VLLM_RPC_BASE_PATH", str(rpc))
    yield state


def wait_until(cond: object, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if callable(cond) and cond():
            return True
        time.sleep(0.05)
    return False


def alive(rec: dict[str, object]) -> bool:
    try:
        proc = psutil.Process(int(rec["pid"]))  # type: ignore[call-overload]
        return abs(proc.create_time() - float(rec["create_time"])) < 0.01  # type: ignore[arg-type]
    except psutil.NoSuchProcess:
        return False


def assert_clean(processes: list[dict[str, object]], segments: list[str], ipc_paths: list[str]) -> None:
    """Nothing the deployment started is left: processes (zombies included), segments, sockets."""
    assert wait_until(lambda: not any(alive(p) for p in processes)), [p for p in processes if alive(p)]
    assert [s for s in segments if os.path.exists(f"/dev/shm/{s}")] == []
    assert [p for p in ipc_paths if os.path.exists(p)] == []


def read_ring(name: str, geo: ringfmt.Geometry, root: str = "/dev/shm") -> bytes:
    """Only the metadata region, with plain read-only file I/O (never SharedMemory)."""
    with open(f"{root}/{name}", "rb") as f:
        f.seek(geo.metadata_offset)
        return f.read()


def unread(name: str, geo: ringfmt.Geometry, root: str = "/dev/shm") -> list[int]:
    meta = read_ring(name, geo, root)
    shifted = ringfmt.Geometry(geo.n_reader, 0, geo.max_chunks)  # metadata at offset 0
    return ringfmt.unread_counts(ringfmt.slot_flags(meta, shifted), geo.n_reader)


def segment_by_size(names: list[str], size: int, root: str = "/dev/shm") -> list[str]:
    return [n for n in names if os.path.exists(f"{root}/{n}") and os.path.getsize(f"{root}/{n}") == size]


@contextlib.contextmanager
def two_node_group(tmp_path: Path, fault_b: str, rank_b: int | None) -> Iterator[list[Any]]:
    """A TP=4 group over two namespaced nodes (rank 0-1 on A, 2-3 on B), fault_b on node B."""
    from vllmdiag_sim.deployment import STATE_ENV, Deployment

    from ports import free_port

    port = free_port("127.0.0.1", count=3)  # master_port, +1 (remote readers), +2 (kicks)
    deps: list[Any] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(STATE_ENV, str(tmp_path / "sim"))
        try:
            deps.append(Deployment.up(tp=4, namespace=True, nnodes=2, node_rank=0, master_port=port))
            deps.append(Deployment.up(tp=4, namespace=True, nnodes=2, node_rank=1, master_port=port,
                                      fault=fault_b, rank=rank_b))
            yield deps
        finally:
            for dep in deps:
                dep.down()


@contextlib.contextmanager
def two_node_ray(tmp_path: Path, fault: str, rank: int | None) -> Iterator[list[Any]]:
    """`vllm serve --distributed-executor-backend ray` TP=4 over a two-node Ray cluster (namespaced):
    node A (returned first) runs the head raylet, the API server, the EngineCore and ranks 0-1;
    node B only a raylet whose actors hold ranks 2-3. ``fault`` is injected through the engine."""
    from vllmdiag_sim.deployment import STATE_ENV, Deployment

    from ports import free_port

    port = free_port("127.0.0.1", count=3)  # master_port, +1 (remote readers), +2 (kicks)
    deps: list[Any] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(STATE_ENV, str(tmp_path / "sim"))
        try:
            node_b = Deployment.up(tp=4, namespace=True, nnodes=2, node_rank=1, master_port=port, shape="ray")
            deps.append(node_b)
            deps.insert(0, Deployment.up(tp=4, namespace=True, nnodes=2, node_rank=0, master_port=port,
                                         shape="ray", fault=fault, rank=rank))
            node_b.refresh()
            yield deps
        finally:
            for dep in deps:
                dep.down()
