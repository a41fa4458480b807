"""The EngineCore's side of the sim's fault catalog (not part of vLLM).

Faults that change what ranks do in a step travel inside the scheduler output, so every rank
sees the same fault in the same step; faults about the rings are driven from here, through the
same `collective_rpc` path a real EngineCore uses, so its stack shows vLLM's frames.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import zmq

from vllmdiag_sim import runtime
from vllmdiag_sim.vllm.v1.executor.multiproc_executor import MultiprocExecutor

if TYPE_CHECKING:
    from vllmdiag_sim.vllm.v1.engine.core import EngineCoreProc

STEP_FAULTS = ("straggler", "collective-mismatch", "uniform-collective", "uniform-sync", "long-step", "healthy-slow",
               "compiling", "pp-stage-stuck", "dp-rank-held")
RING_FAULTS = ("rpc-ring-full", "response-ring-full")


class EngineFaults:
    def __init__(self, engine: EngineCoreProc) -> None:
        self.engine = engine
        self.step_fault: dict[str, Any] | None = None
        self.kick_socket: zmq.Socket | None = None

    def apply(self, spec: dict[str, Any]) -> None:
        engine = self.engine
        if spec["fault"] == "dp-out-of-step":
            # Every DP rank but the named one runs a (dummy) step and waits in the DP sync for it.
            if engine.dp_rank != spec.get("rank"):
                engine.pending_steps.append(("DP_STEP", None))
                runtime.ack(f"fault-{spec['seq']}")
            return
        if spec["fault"] == "ep-rank-odd":  # every DP rank's steps carry it: the EP rank may be on any
            self.step_fault = spec
            runtime.ack(f"fault-{spec['seq']}")
            return
        if spec.get("dp", 0) != engine.dp_rank:
            return
        name = spec["fault"]
        self.step_fault = spec if name in STEP_FAULTS else None
        engine.scheduler.stuck = name == "engine-stuck"
        engine.scheduler.remote_kv_never_arrives = name == "kv-wait"
        if isinstance(engine.model_executor, MultiprocExecutor):
            engine.model_executor.reap_dead_workers = name == "worker-gone"
        if name in RING_FAULTS:
            engine.pending_steps.append((name, spec))
        if name in STEP_FAULTS and not engine.pc.is_leader:
            self._kick_leader()
        elif name in STEP_FAULTS and not engine.pc.frontend:
            engine.pending_steps.append(("KICK", None))  # offline: no HTTP client starts a step
        runtime.ack(f"fault-{spec['seq']}")

    def _kick_leader(self) -> None:
        # A headless node cannot start a step; it asks the leader's EngineCore for one.
        if self.kick_socket is None:
            self.kick_socket = zmq.Context().socket(zmq.PUSH)
            self.kick_socket.connect(f"tcp://127.0.0.1:{self.engine.pc.master_port + 2}")
        self.kick_socket.send(b"KICK")

    def run_pending(self, kind: str, payload: Any) -> None:
        executor = self.engine.model_executor
        if kind == "DP_STEP":
            executor.execute_model({"req_ids": [], "step": 0, "dp_sync": True, "sim_dp_step": True})
        elif kind == "KICK":
            # A headless node's EngineCore asked for a step (its fault needs the whole TP group in one):
            # a step with scheduled work, so every rank runs the forward pass and its collectives.
            executor.execute_model({"req_ids": [], "step": 0, "sim_fault": self.step_fault, "kick": True})
        elif kind == "RELAY":
            self._relay(payload)
        elif kind == "rpc-ring-full":
            self._fill_rpc_ring(payload)
        elif kind == "response-ring-full":
            self._stop_reading_responses(payload)

    def _relay(self, rpc: tuple[str, tuple[Any, ...], dict[str, Any], int | None]) -> None:
        method, args, kwargs, output_rank = rpc
        if method == "execute_model" and args and isinstance(args[0], dict):
            args = ({**args[0], "sim_fault": self.step_fault},)
        self.engine.model_executor.collective_rpc(method, None, args, kwargs, non_block=True,
                                                  unique_reply_rank=output_rank)

    def _fill_rpc_ring(self, spec: dict[str, Any]) -> None:
        """Rank K stalls outside any collective; the others keep replying until the ring is full."""
        executor = self.engine.model_executor
        assert isinstance(executor, MultiprocExecutor)
        first = executor.pc.first_local_rank
        reply = next(r for r in range(first, first + len(executor.workers)) if r != spec["rank"])
        while True:
            executor.collective_rpc("sample_tokens", None, ({"sim_fault": spec},), unique_reply_rank=reply)

    def _stop_reading_responses(self, spec: dict[str, Any]) -> None:
        """Ask rank K for more replies than its response ring holds, then never read them."""
        executor = self.engine.model_executor
        assert isinstance(executor, MultiprocExecutor)
        for _ in range(executor.response_mqs[0].buffer.max_chunks + 1):
            executor.collective_rpc("sample_tokens", None, ({"step": "async"},), non_block=True,
                                    unique_reply_rank=spec["rank"])
