"""Mirror of vLLM 0.33 `vllm/v1/worker/kv_connector_model_runner_mixin.py`: a step with no token to compute
still polls the KV connector (`kv_connector_no_forward`), so finished receives reach the scheduler."""

from __future__ import annotations

from typing import Any

from vllmdiag_sim.vllm.distributed.kv_transfer.kv_connector.v1.nixl.base_worker import NixlBaseConnectorWorker

_WORKER: NixlBaseConnectorWorker | None = None


def get_kv_transfer_group() -> NixlBaseConnectorWorker:
    global _WORKER
    if _WORKER is None:
        _WORKER = NixlBaseConnectorWorker()
    return _WORKER


class KVConnectorModelRunnerMixin:
    @staticmethod
    def kv_connector_no_forward(scheduler_output: dict[str, Any]) -> dict[str, Any]:
        return KVConnectorModelRunnerMixin._get_kv_connector_output(scheduler_output)

    @staticmethod
    def _get_kv_connector_output(scheduler_output: dict[str, Any]) -> dict[str, Any]:
        done_sending, done_recving = get_kv_transfer_group().get_finished()
        return {"req_ids": [], "step": scheduler_output.get("step"), "finished_sending": sorted(done_sending),
                "finished_recving": sorted(done_recving)}
