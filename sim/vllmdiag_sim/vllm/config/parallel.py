"""Mirror of `vllm/config/parallel.py`: the few parallel settings the sim honours."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vllmdiag_sim.torch.distributed import distributed_c10d


@dataclass
class ParallelConfig:
    tensor_parallel_size: int = 1
    data_parallel_size: int = 1
    nnodes: int = 1
    node_rank: int = 0
    master_port: int = 0
    distributed_executor_backend: str = "mp"  # mp | ray
    frontend: bool = True  # False: an offline LLM() script, no HTTP client to start steps
    dp_hub_ports: tuple[int, ...] = ()  # DP > 1: one DP-group rendezvous per TP rank (the DP sync)
    pipeline_parallel_size: int = 1
    enable_expert_parallel: bool = False
    ep_hub_port: int = 0  # EP: the MoE all2all rendezvous of the EP group (every DP x TP rank)
    data_parallel_rank: int | None = None  # external DP LB: this `vllm serve` runs this one DP rank
    data_parallel_rpc_port: int = 29550
    dp_engine_hub_port: int = 0  # MoE DP: the EngineCores' DP group (DPEngineCoreProc's unfinished-requests sync)
    dp_moe_hub_ports: tuple[int, ...] = ()  # MoE DP without EP: per TP rank, the DP group of the MoE dispatch
    all2all_backend: str = "allgather_reducescatter"
    # --kv-transfer-config (vLLM keeps it in VllmConfig.kv_transfer_config): P/D disaggregation
    kv_transfer_config: dict[str, Any] | None = None
    # The model is a MoE (vLLM reads it from the model's config; the sim from its name, see is_moe_model).
    # Dense DP ranks are independent engines (`reconfigure_for_independent_dp_rank`: DP size 1 inside
    # each, workers titled without _DPn); MoE DP ranks step together and their workers say their DP rank.
    moe: bool = False
    api_server_count: int = 1  # --api-server-count (vLLM's default: the DP size); > 1: a manager `vllm serve`

    @property
    def world_size(self) -> int:
        # Ranks of one DP replica: PP x TP, TP fastest (rank = pp_rank * TP + tp_rank).
        return self.tensor_parallel_size * self.pipeline_parallel_size

    @property
    def external_dp(self) -> bool:
        return self.data_parallel_rank is not None and self.data_parallel_size > 1

    @property
    def local_world_size(self) -> int:
        return self.world_size // self.nnodes

    @property
    def first_local_rank(self) -> int:
        return self.node_rank * self.local_world_size

    @property
    def synchronized_dp(self) -> bool:
        """DP ranks that meet every step: a MoE model's (the DP sync, the MoE dispatch)."""
        return self.data_parallel_size > 1 and (self.moe or self.enable_expert_parallel)

    @property
    def steps_in_waves(self) -> bool:
        """A MoE model's DP ranks behind one front end (vLLM 0.32 DPEngineCoreProc): request waves, dummy
        batches, the per-step DP sync and the MoE dispatch across DP ranks. The sim's external DP ranks (one
        front end each, no coordinator relaying waves) step alone and meet only in the fault's DP sync."""
        return self.synchronized_dp and not self.external_dp

    @property
    def is_leader(self) -> bool:
        return self.node_rank == 0

    @property
    def uses_multiproc_executor(self) -> bool:
        # vLLM runs TP=1 in-process (UniProcExecutor) unless DP needs a worker per engine.
        return (self.world_size > 1 or self.data_parallel_size > 1 or self.nnodes > 1
                or self.distributed_executor_backend == "ray")

    def worker_suffix(self, dp_rank: int, rank: int) -> str:
        # WorkerProc.setup_proc_title_and_log_prefix: DP, PP, TP (each when its size > 1), then EP
        # (when expert parallel is on; EP rank = dp_rank * TP + tp_rank, the EP group spans DP x TP).
        tp = self.tensor_parallel_size
        parts = []
        if self.synchronized_dp:  # a dense DP rank runs with DP size 1 inside its engine
            parts.append(f"DP{dp_rank}")
        if self.pipeline_parallel_size > 1:
            parts.append(f"PP{rank // tp}")
        if tp > 1:
            parts.append(f"TP{rank % tp}")
        if self.enable_expert_parallel:
            parts.append(f"EP{dp_rank * tp + rank % tp}")
        return "_".join(parts)

    def engine_name(self, dp_rank: int) -> str:
        return f"EngineCore_DP{dp_rank}" if self.data_parallel_size > 1 else "EngineCore"

    @staticmethod
    def is_moe_model(model: str) -> bool:
        """A model name the sim treats as a MoE (vLLM would read num_experts from its config)."""
        name = model.lower()
        return any(k in name for k in ("mixtral", "moe", "deepseek-v", "-a3b", "-a22b"))

    @staticmethod
    def sync_dp_state(dp_group: Any, has_unfinished: bool) -> bool:
        """Whether any DP rank still has requests: an all-reduce over the EngineCores' DP group."""
        tensor = [int(has_unfinished)]
        distributed_c10d.all_reduce(tensor, group=dp_group)
        return bool(tensor[0])
