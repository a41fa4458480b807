"""Mirror of `vllm/v1/worker/gpu_model_runner.py`: a forward pass that meets its TP peers.

`sim_fault` in the scheduler output is the sim's only addition: the EngineCore puts the fault
there so every rank sees it in the same step.
"""

from __future__ import annotations

import time
from typing import Any

from vllmdiag_sim import runtime
from vllmdiag_sim.torch._inductor.compile_fx import compile_fx
from vllmdiag_sim.torch.cuda.streams import Event
from vllmdiag_sim.vllm.distributed.device_communicators import pynccl_wrapper
from vllmdiag_sim.vllm.model_executor.layers.fused_moe.runner.moe_runner import MoERunner
from vllmdiag_sim.vllm.model_executor.layers.linear import ColumnParallelLinear, RowParallelLinear
from vllmdiag_sim.vllm.sequence import IntermediateTensors
from vllmdiag_sim.vllm.v1.worker.kv_connector_model_runner_mixin import KVConnectorModelRunnerMixin

# Step faults that change how long a step takes (every rank), instead of hanging it.
STEP_SECONDS = {"long-step": 2.0, "healthy-slow": 0.4}


def forward_pass(scheduler_output: dict[str, Any]) -> bool:
    """vLLM 0.33 Worker.execute_model: ``total_num_scheduled_tokens > 0``. The busy loop also steps when every
    request waits (a grammar still compiling, WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR): the rpc ring carries
    that empty step, the worker skips the PP recv and the runner returns EMPTY_MODEL_RUNNER_OUTPUT. The sim's
    fault steps (``sim_fault``), the MoE DP sync (``dp_sync``) and a step a headless node's fault asked
    the leader for (``kick``) stand for scheduled work."""
    return bool(scheduler_output.get("req_ids")) or scheduler_output.get("sim_fault") is not None \
        or bool(scheduler_output.get("dp_sync")) or bool(scheduler_output.get("kick"))


def targets_me(fault: dict[str, Any] | None, name: str, rank: int) -> bool:
    return bool(fault) and fault.get("fault") == name and fault.get("rank") == rank  # type: ignore[union-attr]


class GPUModelRunner(KVConnectorModelRunnerMixin):
    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.o_proj = RowParallelLinear()
        self.lm_head = ColumnParallelLinear()
        self.transfer_event = Event()
        self.dp_comm: Any = None  # DP > 1: the socket of this TP rank's DP group
        self.dp_rank, self.dp_seq = 0, 0
        self.pp_rank, self.is_last_pp_rank = 0, True  # set by the Worker (PP > 1)
        self.moe: MoERunner | None = None  # expert parallel: the MoE layer's all2all over the EP group
        self.ep_rank = 0

    def execute_model(self, scheduler_output: dict[str, Any], intermediate_tensors: IntermediateTensors | None = None
                      ) -> dict[str, Any] | IntermediateTensors:
        if not scheduler_output.get("req_ids") and "kv_connector_metadata" in scheduler_output:
            # vLLM 0.33: no token scheduled but a KV connector: poll it (KV send/recv even with no work)
            return self.kv_connector_no_forward(scheduler_output)
        if not forward_pass(scheduler_output):
            return {"req_ids": [], "step": scheduler_output.get("step"), "sampled_token_ids": []}
        fault = scheduler_output.get("sim_fault")
        name = (fault or {}).get("fault")
        if name == "pp-stage-stuck" and (fault or {}).get("rank") == self.pp_rank:
            # every TP rank of this stage: the next all_reduce never completes (a wedged NCCL kernel)
            pynccl_wrapper.wedge(f"pp-stage-stuck-{self.rank}")
        if scheduler_output.get("dp_sync") and self.dp_comm is not None:
            self._dp_sync(len(scheduler_output.get("req_ids", [])), bool(scheduler_output.get("sim_dp_step")))
        num_tokens = self._prepare_inputs(scheduler_output, targets_me(fault, "straggler", self.rank))
        if name == "dp-rank-held":  # only the held DP rank's EngineCore puts it in its steps: every rank of it
            self._held_in_forward(f"dp-rank-held-{self.dp_rank}-{self.rank}")
        if targets_me(fault, "compiling", self.rank):
            compile_fx("model", f"compiling-{self.rank}")  # a cold compile on this rank; peers wait in all_reduce
        if name == "uniform-collective":
            pynccl_wrapper.wedge(f"uniform-collective-{self.rank}")  # every rank's next all_reduce never completes
        gather = targets_me(fault, "collective-mismatch", self.rank)
        hidden = self._model_forward(float(num_tokens), gather, STEP_SECONDS.get(str(name), runtime.STEP_INTERVAL_S),
                                     f"{name}-{self.rank}" if name in STEP_SECONDS else None)
        if self.moe is not None:
            hidden = self._moe_forward(hidden, fault)
        if not self.is_last_pp_rank:  # this stage's output is the next stage's input
            return IntermediateTensors({"hidden_states": hidden, "residual": num_tokens})
        if name == "uniform-sync":
            self.transfer_event.wedged = f"uniform-sync-{self.rank}"  # the GPU never completes the step
        return {"req_ids": list(scheduler_output.get("req_ids", [])), "step": scheduler_output.get("step"),
                "sampled_token_ids": self._to_list([num_tokens])}

    def _moe_forward(self, hidden: Any, fault: dict[str, Any] | None) -> Any:
        assert self.moe is not None
        stuck = f"ep-rank-odd-{self.ep_rank}" if targets_me(fault, "ep-rank-odd", self.ep_rank) else None
        return self.moe.forward(hidden if isinstance(hidden, float) else 1.0, stuck)

    def _dummy_run(self, num_tokens: int, sim_fault: dict[str, Any] | None = None) -> None:
        """A DP rank without requests runs the model on a dummy batch so its peers' collectives (the DP
        sync, the MoE all2all) find it (DPEngineCoreProc.execute_dummy_batch)."""
        self.execute_model({"req_ids": [], "step": 0, "dp_sync": True, "sim_fault": sim_fault})

    def _dp_sync(self, num_tokens: int, fault_step: bool) -> None:
        from vllmdiag_sim.vllm.v1.worker.dp_utils import coordinate_batch_across_dp

        self.dp_seq += 1
        if fault_step:  # dp-out-of-step's step (every step syncs in waves: no file per step)
            runtime.ack(f"dp-sync-{self.dp_rank}-{self.rank}")
        coordinate_batch_across_dp(self.dp_comm, self.dp_rank, self.dp_seq, num_tokens)

    def _to_list(self, sampled_token_ids: list[int]) -> list[int]:
        # vLLM copies sampled ids to the host and waits on an event (sync point, vllm-internals 5.3).
        self.transfer_event.synchronize()
        return list(sampled_token_ids)

    def _prepare_inputs(self, scheduler_output: dict[str, Any], stuck: bool) -> int:
        if stuck:
            # This rank never reaches the collective its peers are already waiting in. The loop is
            # inline so this function stays the innermost Python frame, as in a real hang.
            runtime.ack(f"straggler-{self.rank}")
            while True:
                time.sleep(0.05)
        return len(scheduler_output.get("req_ids", [])) + 1

    def _model_forward(self, hidden: float, gather: bool, step_s: float, ack: str | None) -> Any:
        if ack:
            runtime.ack(ack)
        time.sleep(step_s)  # stands in for the GPU time of one step
        if gather:
            runtime.ack(f"collective-mismatch-{self.rank}")
            return self.lm_head.forward(hidden)
        return self.o_proj.forward(hidden)

    def _held_in_forward(self, ack: str) -> None:
        # The model's forward never returns (the real-vLLM test plugin's _held_in_forward): a polling sleep
        # inline, so this function is the innermost Python frame, with no collective below it.
        runtime.ack(ack)
        while True:
            time.sleep(0.05)

    def sample_tokens(self, grammar_output: dict[str, Any] | None) -> dict[str, Any]:
        if targets_me((grammar_output or {}).get("sim_fault"), "rpc-ring-full", self.rank):
            self._sample_stalled()
        return {"sampled": True}

    def _sample_stalled(self) -> None:
        # Outside any collective: the other ranks keep consuming the rpc ring, this one stops.
        runtime.ack(f"rpc-ring-full-{self.rank}")
        while True:
            time.sleep(0.05)
