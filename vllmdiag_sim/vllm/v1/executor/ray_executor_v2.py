"""Mirror of vLLM 0.33 `vllm/v1/executor/ray_executor_v2.py`: `RayExecutorV2` runs the same shm-ring
control plane as `MultiprocExecutor`, but its workers (`RayWorkerProc`) are Ray actors started by
the raylet, not children of the EngineCore. Actor calls travel over a unix socket here instead of
Ray's gRPC; the ring traffic is the real MessageQueue.
"""

from __future__ import annotations

import os
import socket
import threading
from multiprocessing.connection import Client, Connection, Listener
from typing import Any

import setproctitle

from vllmdiag_sim import runtime
from vllmdiag_sim.ray.raylet import SOCKET_ENV
from vllmdiag_sim.vllm.config.parallel import ParallelConfig
from vllmdiag_sim.vllm.distributed.device_communicators.shm_broadcast import MessageQueue
from vllmdiag_sim.vllm.v1.executor.multiproc_executor import MultiprocExecutor, WorkerProc


def _ray_title(task: str | None = None) -> None:
    # Ray's execute_task: "ray::<task name>" while a task runs, "ray::<class>" after.
    setproctitle.setproctitle(f"ray::RayWorkerProc.{task}" if task else "ray::RayWorkerProc")


class RayWorkerProc(WorkerProc):
    @staticmethod
    def actor_main(spec: dict[str, Any]) -> None:
        _ray_title("__init__")
        _ray_title()
        conn = Client(spec["driver"], "AF_UNIX")
        conn.send({"local_rank": spec["local_rank"]})
        _ray_title("initialize_worker")
        runtime.record("ray_workers", f"{spec['local_rank']} {os.getpid()}")
        worker = RayWorkerProc(spec["pc"], spec["dp_rank"], spec["local_rank"], spec["rpc_handle"],
                               spec["hub_port"], conn, None)
        _ray_title("run")
        worker.worker_busy_loop()


class RayExecutorV2(MultiprocExecutor):
    """Asks the raylet for one actor per rank; the actors dial back for the READY handshake."""

    def _init_executor(self, hub_sock: socket.socket | None) -> None:
        from vllmdiag_sim import collective, ringfmt

        pc: ParallelConfig = self.pc
        n_local = pc.local_world_size
        self.rpc_broadcast_mq = MessageQueue(n_local, n_local, max_chunk_bytes=16 * ringfmt.MiB, max_chunks=10)
        hub_port = None
        if hub_sock is not None:
            collective.Hub(hub_sock, pc.tensor_parallel_size).start()
            hub_port = hub_sock.getsockname()[1]
        base = runtime.deployment_dir()
        path = str(base / f"driver-{os.getpid()}.sock") if base else f"/tmp/driver-{os.getpid()}.sock"
        with Listener(path, "AF_UNIX") as listener:
            specs = [{"driver": path, "pc": pc, "dp_rank": self.dp_rank, "local_rank": r,
                      "rpc_handle": self.rpc_broadcast_mq.export_handle(), "hub_port": hub_port} for r in range(n_local)]
            with Client(os.environ[SOCKET_ENV], "AF_UNIX") as raylet:
                raylet.send({"actors": specs})
                self.actor_pids = raylet.recv()
            conns = [listener.accept() for _ in range(n_local)]
        self.workers = list(self.actor_pids)  # only len() is used
        self.wait_for_ready(self._in_rank_order(conns))
        threading.Thread(target=lambda: None, name="RayWorkerMonitor", daemon=True).start()

    @staticmethod
    def _in_rank_order(conns: list[Connection]) -> list[Connection]:
        hello = [(c.recv(), c) for c in conns]
        return [c for _, c in sorted(((h["local_rank"], c) for h, c in hello), key=lambda t: t[0])] if all(
            isinstance(h, dict) and "local_rank" in h for h, _ in hello) else conns

    def monitor_workers(self) -> None:
        return None  # Ray watches its actors (run_ref); the sim does not
