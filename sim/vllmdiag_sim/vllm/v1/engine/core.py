"""Mirror of `vllm/v1/engine/core.py`: `EngineCoreProc`, its busy loop and IO threads.

The sim adds three inputs to vLLM's: `SIM_FAULT` (the launcher changed `fault.json`),
`KICK` (a headless node asks the leader for a step) and `RELAY` (a headless node's copy of
the leader's rpc, re-enqueued on its local ring, standing in for vLLM's remote readers).
"""

from __future__ import annotations

import json
import logging
import pickle
import queue
import socket
import threading
import time
from typing import Any

import zmq

from vllmdiag_sim import runtime
from vllmdiag_sim.vllm.config.parallel import ParallelConfig
from vllmdiag_sim.vllm.platforms.cuda import import_kernels
from vllmdiag_sim.vllm.utils.network_utils import make_zmq_socket
from vllmdiag_sim.vllm.utils.system_utils import set_process_title
from vllmdiag_sim.vllm.v1.core.sched.scheduler import Scheduler
from vllmdiag_sim.vllm.v1.engine.sim_faults import EngineFaults
from vllmdiag_sim.vllm.v1.executor.multiproc_executor import MultiprocExecutor
from vllmdiag_sim.vllm.v1.executor.uniproc_executor import UniProcExecutor
from vllmdiag_sim.vllm.v1.structured_output import StructuredOutputManager

logger = logging.getLogger("vllm.v1.engine.core")
KV_YIELD_S = 0.02
REQUEST_TYPES = {b"\x00": "ADD", b"\x01": "ABORT", b"\x02": "START_DP_WAVE"}


def _executor_class(pc: ParallelConfig) -> type[MultiprocExecutor]:
    if pc.distributed_executor_backend == "ray":
        from vllmdiag_sim.vllm.v1.executor.ray_executor_v2 import RayExecutorV2

        return RayExecutorV2
    return MultiprocExecutor


class EngineCoreProc:
    def __init__(self, pc: ParallelConfig, dp_rank: int, input_addrs: list[str],
                 output_addrs: list[str], hub_sock: socket.socket | None) -> None:
        import_kernels()  # before the executor forks workers: they inherit the mapping
        self.pc, self.dp_rank = pc, dp_rank
        self.input_queue: queue.Queue[tuple[str, Any]] = queue.Queue()
        self.output_queue: queue.Queue[list[dict[str, Any]]] = queue.Queue()
        self.structured_output_manager = StructuredOutputManager()
        self.scheduler = Scheduler(pc.kv_transfer_config, dp_rank)
        self.model_executor: MultiprocExecutor | UniProcExecutor = (
            _executor_class(pc)(pc, dp_rank, hub_sock) if pc.uses_multiproc_executor else UniProcExecutor())
        self.faults = EngineFaults(self)
        self.pending_steps: list[tuple[str, Any]] = []
        self.model_executed = False
        self.kv_fetch_published: dict[str, int] | None = None
        self.client_of: dict[str, int] = {}  # request id -> the front end (API server index) it came from
        if self.scheduler.connector is not None:  # vLLM: after the KV caches are registered
            self.scheduler.connector.set_xfer_handshake_metadata({})
            self._publish_kv_fetch()
        threading.Thread(target=self.process_input_sockets, args=(input_addrs,), daemon=True).start()
        if output_addrs:
            threading.Thread(target=self.process_output_sockets, args=(output_addrs,), daemon=True).start()
        runtime.ack(f"engine-ready-{dp_rank}")

    @staticmethod
    def run_engine_core(pc: ParallelConfig, dp_rank: int, input_addrs: list[str],
                        output_addrs: list[str], hub_sock: socket.socket | None) -> None:
        set_process_title(pc.engine_name(dp_rank))
        runtime.close_inherited_listeners([*input_addrs, *output_addrs])
        # MoE with DP steps every DP rank in lockstep (vLLM 0.32: `data_parallel and model_config.is_moe`).
        engine_cls = DPEngineCoreProc if pc.steps_in_waves else EngineCoreProc
        try:
            engine = engine_cls(pc, dp_rank, input_addrs, output_addrs, hub_sock)
        except Exception:
            logger.exception("EngineCore failed to start.")
            raise
        engine.run_busy_loop()

    def run_busy_loop(self) -> None:
        while True:
            self._process_input_queue()
            self._process_engine_step()

    def _process_input_queue(self) -> None:
        while not self.scheduler.has_requests() and not self.pending_steps:
            self._handle_client_request(*self.input_queue.get())
        while not self.input_queue.empty():
            self._handle_client_request(*self.input_queue.get_nowait())

    def _handle_client_request(self, kind: str, payload: Any) -> None:
        if kind == "ADD":
            self.scheduler.add_request(payload)
        elif kind == "ABORT":
            self.scheduler.finish_requests(payload)
            for rid in payload:
                self.client_of.pop(str(rid), None)
        elif kind == "SIM_FAULT":
            self.faults.apply(payload)
        elif kind in ("KICK", "RELAY"):
            self.pending_steps.append((kind, payload))

    def _process_engine_step(self) -> None:
        outputs = self.step()
        if outputs:
            self.output_queue.put(outputs)
        if self.scheduler.connector is not None:
            self._publish_kv_fetch()
        # vLLM 0.33: no model run but scheduler work left (WAITING_FOR_REMOTE_KVS, a grammar still compiling):
        # yield for the connector's / grammar's threads. vLLM sleeps 1 ms; the sim 20 ms, to spare the cores.
        if not self.model_executed and self.scheduler.has_requests():
            time.sleep(KV_YIELD_S)

    def _publish_kv_fetch(self) -> None:
        """SchedulerStats to the front end (its /metrics): the KV-fetch stages a kv_consumer exports."""
        counts = self.scheduler.kv_fetch_counts()
        if counts != self.kv_fetch_published:
            self.kv_fetch_published = counts
            self.output_queue.put([{"scheduler_stats": {"kv_fetch": counts}}])

    def step(self) -> list[dict[str, Any]]:
        if self.pending_steps:
            self.model_executed = True
            kind, payload = self.pending_steps.pop(0)
            self.faults.run_pending(kind, payload)
            return []
        scheduler_output = self.scheduler.schedule()
        self.model_executed = bool(scheduler_output["req_ids"])
        scheduler_output["sim_fault"] = self.faults.step_fault
        scheduler_output["dp_sync"] = isinstance(self, DPEngineCoreProc)  # MoE DP: coordinate_batch_across_dp
        self.model_executor.execute_model(scheduler_output)
        return self.scheduler.update_from_output(scheduler_output)

    def process_input_sockets(self, input_addrs: list[str]) -> None:
        ctx, poller = zmq.Context(), zmq.Poller()
        kinds: dict[zmq.Socket, str] = {}
        clients: dict[zmq.Socket, int] = {}
        for index, input_addr in enumerate(input_addrs):  # one per API server
            identity = self.dp_rank.to_bytes(2, "little")
            sock = make_zmq_socket(ctx, input_addr, zmq.DEALER, bind=False, identity=identity, linger=0)
            sock.send(json.dumps({"status": "READY", "engine_index": self.dp_rank}).encode())
            kinds[sock], clients[sock] = "client", index
        if self.pc.nnodes > 1 and self.pc.is_leader:
            kinds[make_zmq_socket(ctx, f"tcp://127.0.0.1:{self.pc.master_port + 2}", zmq.PULL)] = "kick"
        if self.pc.nnodes > 1 and not self.pc.is_leader:
            sub = ctx.socket(zmq.SUB)
            sub.setsockopt_string(zmq.SUBSCRIBE, "")
            sub.connect(f"tcp://127.0.0.1:{self.pc.master_port + 1}")
            kinds[sub] = "relay"
        for sock in kinds:
            poller.register(sock, zmq.POLLIN)
        watch = runtime.FaultWatch()
        while True:
            for sock, _ in poller.poll(500):
                self._decode_input(kinds[sock], sock.recv_multipart(), clients.get(sock, 0))
            spec = watch.poll()
            if spec is not None:
                self.input_queue.put(("SIM_FAULT", spec))

    def _decode_input(self, kind: str, frames: list[bytes], client: int = 0) -> None:
        if kind == "client" and frames[0] in REQUEST_TYPES:
            payload = json.loads(frames[1])
            if REQUEST_TYPES[frames[0]] == "ADD":
                payload = self.preprocess_add_request(payload)
                self.client_of[str(payload.get("request_id"))] = client
            self.input_queue.put((REQUEST_TYPES[frames[0]], payload))
        elif kind == "kick":
            self.input_queue.put(("KICK", None))
        elif kind == "relay" and frames != [b"READY"]:
            self.input_queue.put(("RELAY", pickle.loads(frames[0], buffers=frames[1:])))

    def preprocess_add_request(self, request: dict[str, Any]) -> dict[str, Any]:
        # vLLM 0.33 runs this on the input thread: grammar_init only submits the compile to the pool
        if request.get("structured_outputs"):
            self.structured_output_manager.grammar_init(request)
        return request

    def process_output_sockets(self, output_addrs: list[str]) -> None:
        ctx = zmq.Context()
        socks = [make_zmq_socket(ctx, addr, zmq.PUSH, linger=4000) for addr in output_addrs]
        while True:
            by_client: dict[int, list[dict[str, Any]]] = {}
            for out in self.output_queue.get():  # each request's tokens go back to the API server that sent it
                rid = out.get("request_id")
                client = self.client_of.get(str(rid), 0) if rid is not None else 0
                if rid is not None and out.get("finished"):
                    self.client_of.pop(str(rid), None)
                by_client.setdefault(client if client < len(socks) else 0, []).append(out)
            for client, outs in by_client.items():
                socks[client].send(json.dumps(outs).encode())


class DPEngineCoreProc(EngineCoreProc):
    """Mirror of vLLM 0.33's `DPEngineCoreProc` (MoE with DP): within a request wave every DP rank steps,
    a rank without requests on a dummy batch, so the per-step DP sync and the MoE all2all always find
    every rank; after each step the engines all-reduce whether any still has requests. A rank that got
    a request while paused starts a wave; the front end relays START_DP_WAVE to the others (vLLM's
    DP coordinator does that hop)."""

    def __init__(self, pc: ParallelConfig, dp_rank: int, input_addrs: list[str],
                 output_addrs: list[str], hub_sock: socket.socket | None) -> None:
        from vllmdiag_sim import collective
        from vllmdiag_sim.torch.distributed.distributed_c10d import StatelessProcessGroup

        self.engines_running, self.current_wave = False, 0
        self.dp_group = StatelessProcessGroup(collective.connect(pc.dp_engine_hub_port, dp_rank), dp_rank)
        super().__init__(pc, dp_rank, input_addrs, output_addrs, hub_sock)

    def _process_input_queue(self) -> None:
        while not self.scheduler.has_requests() and not self.pending_steps and not self.engines_running:
            self._handle_client_request(*self.input_queue.get())
        while not self.input_queue.empty():
            self._handle_client_request(*self.input_queue.get_nowait())

    def _handle_client_request(self, kind: str, payload: Any) -> None:
        if kind == "START_DP_WAVE":
            new_wave, exclude = payload
            if exclude != self.dp_rank and new_wave >= self.current_wave:
                self.current_wave, self.engines_running = new_wave, True
            return
        if kind == "ADD" and not self.engines_running:
            self.engines_running = True
            self.output_queue.put([{"start_wave": self.current_wave, "exclude": self.dp_rank}])
        super()._handle_client_request(kind, payload)

    def run_busy_loop(self) -> None:
        while True:
            self._process_input_queue()
            executed = self.scheduler.has_requests() or bool(self.pending_steps)
            if executed:
                self._process_engine_step()
            local_unfinished_reqs = self.scheduler.has_requests()
            if not executed:
                if not local_unfinished_reqs and not self.engines_running:
                    continue
                self.execute_dummy_batch()
            self.engines_running = self._has_global_unfinished_reqs(local_unfinished_reqs)
            if not self.engines_running:
                self.current_wave += 1  # wave finished: every engine pauses

    def execute_dummy_batch(self) -> None:
        assert isinstance(self.model_executor, MultiprocExecutor)
        self.model_executor.execute_dummy_batch(self.faults.step_fault)

    def _has_global_unfinished_reqs(self, local_unfinished: bool) -> bool:
        return self.pc.sync_dp_state(self.dp_group, has_unfinished=local_unfinished)
