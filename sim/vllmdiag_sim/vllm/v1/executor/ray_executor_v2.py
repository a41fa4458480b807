"""Mirror of vLLM 0.33 `vllm/v1/executor/ray_executor_v2.py`: `RayExecutorV2` runs the same shm-ring
control plane as `MultiprocExecutor`, but its workers (`RayWorkerProc`) are Ray actors started by
the raylet, not children of the EngineCore. Actor calls travel over a unix socket here instead of
Ray's gRPC; the ring traffic is the real MessageQueue.

Several nodes (a Ray cluster of raylets): bundles are placed driver-node first, so ranks
0..n-1 are on the engine's node and read its rpc ring from shared memory; ranks on other nodes
read the same MessageQueue as remote readers over TCP (its XPUB on the driver node's IP), and their
response queues have no local reader (`n_local = 0`): the engine subscribes to them over TCP.
Departure: the sim's TP-group broadcaster stays within each node.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import threading
from multiprocessing.connection import Client, Connection, Listener
from typing import Any

import setproctitle

from vllmdiag_sim import runtime
from vllmdiag_sim.ray.raylet import NODES_ENV, SOCKET_ENV
from vllmdiag_sim.vllm.config.parallel import ParallelConfig
from vllmdiag_sim.vllm.distributed.device_communicators.shm_broadcast import MessageQueue
from vllmdiag_sim.vllm.v1.executor.multiproc_executor import MultiprocExecutor, WorkerProc


def _ray_title(task: str | None = None) -> None:
    # Ray's execute_task: "ray::<task name>" while a task runs, "ray::<class>" after.
    setproctitle.setproctitle(f"ray::RayWorkerProc.{task}" if task else "ray::RayWorkerProc")


class RayWorkerProc(WorkerProc):
    def __init__(self, spec: dict[str, Any], conn: Connection) -> None:
        self._global_rank = int(spec["rank"])
        self._is_driver_node = bool(spec.get("driver_node", True))
        super().__init__(spec["pc"], spec["dp_rank"], spec["local_rank"], spec["rpc_handle"], spec["hub_port"],
                         conn, None)

    def _rpc_reader_rank(self, local_rank: int) -> int:
        return self._global_rank  # vLLM: MessageQueue.create_from_handle(input_shm_handle, self.worker.rank)

    def _make_response_mq(self) -> MessageQueue:
        # RayWorkerProc._init_message_queues: one local reader on the driver's node, else none (TCP).
        return MessageQueue(1, 1 if self._is_driver_node else 0, max_chunk_bytes=24 * 2**20, max_chunks=10)

    @staticmethod
    def actor_main(spec: dict[str, Any]) -> None:
        _ray_title("__init__")
        _ray_title()
        conn = Client(spec["driver"], "AF_UNIX")
        conn.send({"rank": spec["rank"]})
        _ray_title("initialize_worker")
        runtime.record("ray_workers", f"{spec['rank']} {os.getpid()}")
        worker = RayWorkerProc(spec, conn)
        _ray_title("run")
        mq = worker.rpc_broadcast_mq
        if getattr(mq, "_is_remote_reader", False):
            assert mq.remote_socket.recv() == b"READY"  # a remote reader's wait_until_ready
        worker.worker_busy_loop()


class RayExecutorV2(MultiprocExecutor):
    """Asks each raylet of the cluster for its share of actors; the actors dial back for READY."""

    def _init_executor(self, hub_sock: socket.socket | None) -> None:
        from vllmdiag_sim import collective, ringfmt

        pc: ParallelConfig = self.pc
        raylets = [os.environ[SOCKET_ENV]] + [s for s in os.environ.get(NODES_ENV, "").split(",") if s]
        world = pc.tensor_parallel_size
        self.per_node = max(1, world // len(raylets))
        self.rpc_broadcast_mq = MessageQueue(world, self.per_node, max_chunk_bytes=16 * ringfmt.MiB, max_chunks=10)
        hub_port = None
        if hub_sock is not None:
            collective.Hub(hub_sock, world).start()
            hub_port = hub_sock.getsockname()[1]
        base = runtime.deployment_dir()
        path = str(base / f"driver-{os.getpid()}.sock") if base else f"/tmp/driver-{os.getpid()}.sock"
        with Listener(path, "AF_UNIX") as listener:
            self.actor_pids: list[Any] = []
            for node, raylet_sock in enumerate(raylets):
                node_pc = dataclasses.replace(pc, nnodes=len(raylets), node_rank=node)
                specs = [{"driver": path, "pc": node_pc, "dp_rank": self.dp_rank, "local_rank": r,
                          "rank": node * self.per_node + r, "driver_node": node == 0, "dir": str(base or ""),
                          "rpc_handle": self.rpc_broadcast_mq.export_handle(), "hub_port": hub_port}
                         for r in range(self.per_node)]
                with Client(raylet_sock, "AF_UNIX") as raylet:
                    raylet.send({"actors": specs})
                    self.actor_pids += raylet.recv()
            conns = [listener.accept() for _ in range(self.per_node * len(raylets))]
        self.workers = list(self.actor_pids)  # only len() is used
        self.wait_for_ready(self._in_rank_order(conns))
        threading.Thread(target=lambda: None, name="RayWorkerMonitor", daemon=True).start()

    def wait_for_ready(self, pipes: list[Connection]) -> None:
        replies = [p.recv() for p in pipes]
        for rank, p in enumerate(pipes):  # each node's TP broadcaster is its first local rank's
            p.send(replies[rank - rank % self.per_node]["tp_handle"])
        self.rpc_broadcast_mq.wait_until_ready()
        self.rpc_broadcast_mq.wait_remote_ready()
        self.response_mqs = [MessageQueue.create_from_handle(r["handle"], 0) for r in replies]
        for mq in self.response_mqs:
            mq.wait_until_ready()

    @staticmethod
    def _in_rank_order(conns: list[Connection]) -> list[Connection]:
        hello = [(c.recv(), c) for c in conns]
        return [c for _, c in sorted(((h["rank"], c) for h, c in hello), key=lambda t: t[0])] if all(
            isinstance(h, dict) and "rank" in h for h, _ in hello) else conns

    def monitor_workers(self) -> None:
        return None  # Ray watches its actors (run_ref); the sim does not
