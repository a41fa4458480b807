"""Mirror of `vllm/v1/executor/multiproc_executor.py`: forked workers driven over shm rings.

Departures from vLLM, all so a hang stays observable instead of tearing itself down: a dead
worker is reported but the executor keeps running (and is reaped only when the fault asks for
it), and an orphaned worker keeps its queues open when its EngineCore dies.
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import os
import queue
import socket
import threading
from enum import Enum
from typing import Any

from vllmdiag_sim import collective, ringfmt, runtime
from vllmdiag_sim.vllm.config.parallel import ParallelConfig
from vllmdiag_sim.vllm.distributed.device_communicators.shm_broadcast import Handle, MessageQueue
from vllmdiag_sim.vllm.utils.system_utils import set_process_title
from vllmdiag_sim.vllm.v1.worker.gpu_worker import Worker

logger = logging.getLogger("vllm.v1.executor.multiproc_executor")


class WorkerProc:
    class ResponseStatus(Enum):
        SUCCESS = "SUCCESS"
        FAILURE = "FAILURE"

    def __init__(self, pc: ParallelConfig, dp_rank: int, local_rank: int, rpc_handle: Handle,
                 hub_port: int | None, ready: multiprocessing.connection.Connection,
                 death: multiprocessing.connection.Connection | None,
                 pp_links: dict[int, socket.socket] | None = None) -> None:
        set_process_title("Worker")
        self.rank = pc.first_local_rank + local_rank
        self.worker = Worker(self.rank, pc.tensor_parallel_size, pc.pipeline_parallel_size, pp_links)
        self.worker.init_device(hub_port)
        self.worker.model_runner.dp_rank = dp_rank  # which DP rank this worker serves (a dense one's title says not)
        if pc.dp_hub_ports:  # the DP group of this TP rank: the same TP rank of every DP rank
            self.worker.init_dp_group(collective.connect(pc.dp_hub_ports[self.rank], dp_rank), dp_rank)
        if pc.dp_moe_hub_ports:  # MoE DP without EP: the MoE layer's dispatch/combine across the DP ranks
            self.worker.init_moe_dp(collective.connect(pc.dp_moe_hub_ports[self.rank], dp_rank), dp_rank,
                                    pc.data_parallel_size)
        if pc.ep_hub_port:  # the EP group: every TP rank of every DP rank, EP rank = dp * TP + tp
            ep_rank, ep_size = dp_rank * pc.tensor_parallel_size + self.rank, pc.data_parallel_size * pc.tensor_parallel_size
            self.worker.init_ep_group(collective.connect(pc.ep_hub_port, ep_rank), ep_rank, ep_size)
        set_process_title("Worker", pc.worker_suffix(dp_rank, self.rank))
        # The launcher's sign that this worker is past init_device even when its title did not change (a dense
        # DP rank's lone worker stays plain "VLLM::Worker"): its pid as the deployment sees it, and its ranks.
        runtime.ack(f"worker-titled-{os.getpid()}-{dp_rank}-{self.rank}")
        self.rpc_broadcast_mq = MessageQueue.create_from_handle(rpc_handle, self._rpc_reader_rank(local_rank))
        self.worker_response_mq = self._make_response_mq()
        tp_mq = None
        tp_local = pc.local_world_size // pc.pipeline_parallel_size  # the local ranks of one TP group
        if local_rank % tp_local == 0 and tp_local > 1:
            # TP-group broadcaster, written by TP rank 0 of each group (GroupCoordinator, 4 MiB x 6).
            n = tp_local - 1
            tp_mq = MessageQueue(n, n, max_chunk_bytes=4 * ringfmt.MiB, max_chunks=6)
            tp_mq.handle.local_reader_ranks = list(range(1, tp_local))
        ready.send({"status": "READY", "handle": self.worker_response_mq.export_handle(),
                    "tp_handle": tp_mq.export_handle() if tp_mq else None})
        tp_handle = ready.recv()
        if tp_mq is None and tp_handle is not None:
            tp_mq = MessageQueue.create_from_handle(tp_handle, local_rank % tp_local)
        self.rpc_broadcast_mq.wait_until_ready()
        self.worker_response_mq.wait_until_ready()
        if tp_mq is not None:
            tp_mq.wait_until_ready()
        self.tp_mq = tp_mq
        self.async_output_queue: queue.Queue[Any] = queue.Queue()
        if death is not None:  # Ray actors have no death pipe (RayExecutorV2)
            threading.Thread(target=self.monitor_death_pipe, args=(death,), name="DeathPipeMonitor",
                             daemon=True).start()
        threading.Thread(target=self.async_output_busy_loop, name="WorkerAsyncOutputCopy",
                         daemon=True).start()

    def _rpc_reader_rank(self, local_rank: int) -> int:
        # MP: each node's workers read their own node's ring (a headless node relays the leader's).
        return local_rank

    def _make_response_mq(self) -> MessageQueue:
        return MessageQueue(1, 1, max_chunk_bytes=24 * ringfmt.MiB, max_chunks=10)

    @staticmethod
    def worker_main(death_writers: list[multiprocessing.connection.Connection], *args: Any) -> None:
        # Close the inherited write ends so this worker sees EOF on its death pipe when the
        # parent dies (fork copies every sibling's writer too).
        for w in death_writers:
            w.close()
        worker = WorkerProc(*args)
        worker.worker_busy_loop()

    def monitor_death_pipe(self, death: multiprocessing.connection.Connection) -> None:
        try:
            death.recv()
        except EOFError:
            logger.info("Parent process exited, terminating worker queues")

    def async_output_busy_loop(self) -> None:
        while True:
            self.enqueue_output(self.async_output_queue.get())

    def worker_busy_loop(self) -> None:
        while True:
            method, args, kwargs, output_rank = self.rpc_broadcast_mq.dequeue(indefinite=True)
            output = self._execute_worker_rpc(method, args, kwargs)
            if output_rank is None or self.rank == output_rank:
                self.handle_output(output)

    def _execute_worker_rpc(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        try:
            return (WorkerProc.ResponseStatus.SUCCESS, getattr(self.worker, method)(*args, **kwargs))
        except Exception as e:
            logger.exception("WorkerProc hit an exception.")
            return (WorkerProc.ResponseStatus.FAILURE, str(e))

    def handle_output(self, output: Any) -> None:
        self.enqueue_output(output)

    def enqueue_output(self, output: Any) -> None:
        self.worker_response_mq.enqueue(output)


class MultiprocExecutor:
    def __init__(self, pc: ParallelConfig, dp_rank: int, hub_sock: socket.socket | None) -> None:
        self.pc, self.dp_rank = pc, dp_rank
        self.reap_dead_workers = False
        self._init_executor(hub_sock)

    def _init_executor(self, hub_sock: socket.socket | None) -> None:
        pc, n_local = self.pc, self.pc.local_world_size
        remote = pc.nnodes - 1 if pc.is_leader else 0
        self.rpc_broadcast_mq = MessageQueue(
            n_local + remote, n_local, max_chunk_bytes=16 * ringfmt.MiB, max_chunks=10,
            remote_port=pc.master_port + 1 if remote else None)
        hub_port = pc.master_port or None
        if hub_sock is not None:
            collective.Hub(hub_sock, pc.tensor_parallel_size).start()
            hub_port = hub_sock.getsockname()[1]
        hub_ports, pp_links = self._pp_groups(hub_port)
        ctx = multiprocessing.get_context("fork")
        self.workers: list[multiprocessing.process.BaseProcess] = []
        ready_pipes, self.death_writers = [], []
        for local_rank in range(n_local):
            ready_parent, ready_child = ctx.Pipe()
            death_reader, death_writer = ctx.Pipe(duplex=False)
            self.death_writers.append(death_writer)
            rank = pc.first_local_rank + local_rank
            proc = ctx.Process(
                target=WorkerProc.worker_main, name=f"VllmWorker-{rank}", daemon=True,
                args=(self.death_writers, pc, self.dp_rank, local_rank,
                      self.rpc_broadcast_mq.export_handle(), hub_ports[rank // pc.tensor_parallel_size], ready_child,
                      death_reader, pp_links.get(rank)))
            proc.start()
            ready_child.close()
            death_reader.close()
            self.workers.append(proc)
            ready_pipes.append(ready_parent)
        self.wait_for_ready(ready_pipes)
        threading.Thread(target=self.monitor_workers, name="MultiprocWorkerMonitor", daemon=True).start()

    def _pp_groups(self, stage0_hub: int | None) -> tuple[list[int | None], dict[int, dict[int, socket.socket]]]:
        """PP > 1 (one node): a TP rendezvous per stage (stage 0 keeps the API server's), and per TP
        index a channel between consecutive stages, standing in for the PP group's cpu (gloo) group."""
        pc = self.pc
        tp, pp = pc.tensor_parallel_size, pc.pipeline_parallel_size
        ports: list[int | None] = [stage0_hub]
        for _ in range(1, pp):
            srv = collective.listen(0) if tp > 1 else None
            if srv is not None:
                collective.Hub(srv, tp).start()
            ports.append(srv.getsockname()[1] if srv is not None else None)
        links: dict[int, dict[int, socket.socket]] = {}
        for stage in range(pp - 1):
            for t in range(tp):
                up, down = socket.socketpair()
                links.setdefault(stage * tp + t, {})[stage + 1] = up
                links.setdefault((stage + 1) * tp + t, {})[stage] = down
        return ports, links

    def wait_for_ready(self, pipes: list[multiprocessing.connection.Connection]) -> None:
        try:
            replies = [p.recv() for p in pipes]
        except EOFError as e:
            raise Exception("WorkerProc initialization failed due to an exception in a background "
                            "process. See stack trace for root cause.") from e
        tp_local = len(pipes) // self.pc.pipeline_parallel_size
        for i, p in enumerate(pipes):
            p.send(replies[i - i % tp_local]["tp_handle"])  # the broadcaster of this rank's TP group
        self.rpc_broadcast_mq.wait_until_ready()
        self.response_mqs = [MessageQueue.create_from_handle(r["handle"], 0) for r in replies]
        for mq in self.response_mqs:
            mq.wait_until_ready()

    def monitor_workers(self) -> None:
        sentinels: dict[Any, multiprocessing.process.BaseProcess] = {p.sentinel: p for p in self.workers}
        while sentinels:
            for sentinel in multiprocessing.connection.wait(list(sentinels)):
                proc = sentinels.pop(sentinel)
                # The sentinel fires before the child is a zombie, so reaping must block (join);
                # without it the dead worker stays a zombie, as the fault wants.
                code = None
                if self.reap_dead_workers:
                    proc.join(5)
                    code = proc.exitcode
                logger.error("Worker proc %s died unexpectedly (exit code: %s), shutting down executor.",
                             proc.name, code)

    def collective_rpc(self, method: str, timeout: float | None = None, args: tuple[Any, ...] = (),
                       kwargs: dict[str, Any] | None = None, non_block: bool = False,
                       unique_reply_rank: int | None = None) -> list[Any]:
        self.rpc_broadcast_mq.wait_remote_ready()
        self.rpc_broadcast_mq.enqueue((method, args, kwargs or {}, unique_reply_rank))
        if non_block:
            return []
        ranks = [unique_reply_rank] if unique_reply_rank is not None else list(range(len(self.workers)))
        return [self.get_response(r - self.pc.first_local_rank, method, timeout) for r in ranks]

    def get_response(self, local_rank: int, method: str, timeout: float | None) -> Any:
        status, result = self.response_mqs[local_rank].dequeue(timeout=timeout)
        if status != WorkerProc.ResponseStatus.SUCCESS:
            raise RuntimeError(f"Worker failed with error '{result}', please check the stack trace "
                               "above for the root cause")
        return result

    @property
    def output_rank(self) -> int:
        # `_get_output_rank`: the first TP rank of the last PP stage replies (rank 0 when PP = 1).
        return self.pc.world_size - self.pc.tensor_parallel_size

    def output_rank_is_local(self) -> bool:
        return self.pc.first_local_rank <= self.output_rank < self.pc.first_local_rank + len(self.workers)


    def execute_dummy_batch(self, sim_fault: dict[str, Any] | None = None) -> None:
        self.collective_rpc("execute_dummy_batch", None, (), {"sim_fault": sim_fault},
                            unique_reply_rank=self.output_rank, non_block=not self.output_rank_is_local())

    def execute_model(self, scheduler_output: dict[str, Any]) -> list[Any]:
        # The sim waits without the 300 s RPC deadline so a hang stays in place for diagnosis;
        # the wait is still non-indefinite, so the 60 s INFO line repeats like in vLLM.
        return self.collective_rpc("execute_model", None, (scheduler_output,), unique_reply_rank=self.output_rank,
                                   non_block=not self.output_rank_is_local())
