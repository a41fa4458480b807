"""Mirror of `vllm/v1/worker/gpu_worker.py`: the object `_execute_worker_rpc` dispatches to.

With PP > 1, `execute_model` is where stages meet (vLLM 0.33): a stage after the first receives its
inputs first (`get_pp_group().irecv_tensor_dict`, a blocking metadata recv), and a stage before
the last sends its `IntermediateTensors` on (`isend_tensor_dict`, non-blocking) instead of a result.
"""

from __future__ import annotations

import socket
from typing import Any

from vllmdiag_sim import collective
from vllmdiag_sim.deep_ep.buffer import Buffer
from vllmdiag_sim.torch.distributed.distributed_c10d import StatelessProcessGroup
from vllmdiag_sim.vllm.distributed.device_communicators.all2all import AgRsAll2AllManager
from vllmdiag_sim.vllm.distributed.device_communicators.pynccl import PyNcclCommunicator
from vllmdiag_sim.vllm.distributed.device_communicators.pynccl_wrapper import NCCLLibrary
from vllmdiag_sim.vllm.distributed.parallel_state import GroupCoordinator, init_model_parallel_group, init_pp_group
from vllmdiag_sim.vllm.model_executor.layers.fused_moe.modular_kernel import FusedMoEModularKernel
from vllmdiag_sim.vllm.model_executor.layers.fused_moe.prepare_finalize.deepep_ht import DeepEPHTPrepareAndFinalize
from vllmdiag_sim.vllm.model_executor.layers.fused_moe.prepare_finalize.naive_dp_ep import (
    MoEPrepareAndFinalizeNaiveDPEPModular,
)
from vllmdiag_sim.vllm.model_executor.layers.fused_moe.runner.moe_runner import MoERunner
from vllmdiag_sim.vllm.sequence import IntermediateTensors
from vllmdiag_sim.vllm.v1.worker.gpu_model_runner import GPUModelRunner, forward_pass


class Worker:
    def __init__(self, rank: int, tp_size: int, pp_size: int = 1,
                 pp_links: dict[int, socket.socket] | None = None) -> None:
        self.rank, self.tp_size = rank, tp_size
        self.model_runner = GPUModelRunner(rank)
        self.tp_group: GroupCoordinator | None = None
        self.pp_group = GroupCoordinator(rank // tp_size, pp_size, None, pp_links)
        self.model_runner.pp_rank, self.model_runner.is_last_pp_rank = self.pp_group.rank_in_group, self.pp_group.is_last_rank

    def init_device(self, hub_port: int | None) -> None:
        """Joins the TP group's rendezvous (where a real worker would create NCCL comms)."""
        comm, tp_rank = None, self.rank % self.tp_size
        if self.tp_size > 1 and hub_port is not None:
            comm = PyNcclCommunicator(NCCLLibrary(collective.connect(hub_port, tp_rank), tp_rank))
        self.tp_group = GroupCoordinator(tp_rank, self.tp_size, comm)
        init_model_parallel_group(self.tp_group)
        init_pp_group(self.pp_group)

    def init_dp_group(self, dp_comm: Any, dp_rank: int) -> None:
        self.model_runner.dp_comm, self.model_runner.dp_rank = dp_comm, dp_rank

    def init_ep_group(self, ep_comm: socket.socket, ep_rank: int, ep_size: int) -> None:
        """`--enable-expert-parallel --all2all-backend deepep_high_throughput`: the MoE layer's buffer."""
        buffer = Buffer(ep_comm, ep_rank, ep_size)
        self.model_runner.moe = MoERunner(FusedMoEModularKernel(DeepEPHTPrepareAndFinalize(buffer)))
        self.model_runner.ep_rank = ep_rank

    def init_moe_dp(self, dp_comm: socket.socket, dp_rank: int, dp_size: int) -> None:
        """A MoE model at DP > 1 without expert parallel (vLLM 0.32 on CPU): the MoE layer's naive DP
        prepare/finalize, an all-gather then a reduce-scatter over the DP group (AgRsAll2AllManager)."""
        group = GroupCoordinator(dp_rank, dp_size, None, dp_group=StatelessProcessGroup(dp_comm, dp_rank))
        self.model_runner.moe = MoERunner(FusedMoEModularKernel(MoEPrepareAndFinalizeNaiveDPEPModular(
            AgRsAll2AllManager(group))))

    def execute_dummy_batch(self, sim_fault: dict[str, Any] | None = None) -> None:
        self.model_runner._dummy_run(1, sim_fault)

    def execute_model(self, scheduler_output: dict[str, Any]) -> dict[str, Any] | None:
        intermediate_tensors = None
        if forward_pass(scheduler_output) and not self.pp_group.is_first_rank:
            tensor_dict, _, _ = self.pp_group.irecv_tensor_dict(all_gather_group=self.tp_group)
            intermediate_tensors = IntermediateTensors(tensor_dict or {})
        output = self.model_runner.execute_model(scheduler_output, intermediate_tensors)
        if not isinstance(output, IntermediateTensors):
            return output
        self.pp_group.isend_tensor_dict(output.tensors, all_gather_group=self.tp_group)
        return None

    def sample_tokens(self, grammar_output: dict[str, Any] | None) -> dict[str, Any]:
        return self.model_runner.sample_tokens(grammar_output)

    def check_health(self) -> None:
        return None
