"""Mirror of `vllm/v1/core/sched/scheduler.py`: one token per running request per step."""

from __future__ import annotations

import time
from typing import Any

from vllmdiag_sim import runtime
from vllmdiag_sim.vllm.distributed.kv_transfer.kv_connector.v1.nixl.base_scheduler import NixlBaseConnectorScheduler
from vllmdiag_sim.vllm.v1.structured_output import is_grammar_ready


class Scheduler:
    def __init__(self, kv_transfer_config: dict[str, Any] | None = None, dp_index: int = 0) -> None:
        self.waiting: list[dict[str, Any]] = []
        self.running: dict[str, dict[str, Any]] = {}
        self.stuck = False
        self.step_no = 0
        # P/D: the scheduler-side KV connector (vLLM: KVConnectorFactory.create_connector, role SCHEDULER).
        self.connector: NixlBaseConnectorScheduler | None = None
        if kv_transfer_config and "nixl" in str(kv_transfer_config.get("kv_connector", "")).lower():
            self.connector = NixlBaseConnectorScheduler(str(kv_transfer_config.get("engine_id") or "sim"), dp_index)
        # Requests parked RequestStatus.WAITING_FOR_REMOTE_KVS until the workers report their KV received.
        self.waiting_for_remote_kvs: list[dict[str, Any]] = []
        self.remote_kv_never_arrives = False  # the sim's kv-wait fault: the producer never sends

    def add_request(self, request: dict[str, Any]) -> None:
        self.waiting.append({**request, "generated": 0})

    def finish_requests(self, request_ids: list[str]) -> None:
        for rid in request_ids:
            self.running.pop(rid, None)
        self.waiting = [r for r in self.waiting if r["request_id"] not in request_ids]
        self.waiting_for_remote_kvs = [r for r in self.waiting_for_remote_kvs if r["request_id"] not in request_ids]

    def has_requests(self) -> bool:
        return bool(self.waiting or self.running or self.waiting_for_remote_kvs)

    def kv_fetch_counts(self) -> dict[str, int]:
        """SchedulerStats.num_kv_fetch_reqs_by_stage (vLLM 0.33 KV_FETCH_STAGES)."""
        return {"waiting_to_start": 0, "in_progress": len(self.waiting_for_remote_kvs), "completed_waiting": 0}

    def schedule(self) -> dict[str, Any]:
        if self.stuck and self.has_requests():
            self._update_waiting_for_remote_kv()
        if self.connector is not None and self.remote_kv_never_arrives and self.waiting:
            # load_kv_async: the request waits WAITING_FOR_REMOTE_KVS with 0 tokens scheduled
            self.waiting_for_remote_kvs += self.waiting
            self.waiting = []
            runtime.ack("kv-wait")
        # vLLM's _handle_blocked_waiting_request: a request whose grammar is still compiling stays
        # WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR; the step goes on without it (an empty batch if alone).
        ready = [is_grammar_ready(req) for req in self.waiting]
        for req, ok in zip(self.waiting, ready, strict=True):
            if ok:
                self.running[req["request_id"]] = req
        self.waiting = [req for req, ok in zip(self.waiting, ready, strict=True) if not ok]
        self.step_no += 1
        out: dict[str, Any] = {"req_ids": list(self.running), "step": self.step_no}
        if self.connector is not None:
            out["kv_connector_metadata"] = {"reqs_to_recv": [r["request_id"] for r in self.waiting_for_remote_kvs]}
        return out

    def _update_waiting_for_remote_kv(self) -> None:
        # engine-stuck: the busy loop never leaves the scheduler while requests are pending.
        runtime.ack("engine-stuck")
        while True:
            time.sleep(0.05)

    def update_from_output(self, scheduler_output: dict[str, Any]) -> list[dict[str, Any]]:
        outputs = []
        for rid in scheduler_output["req_ids"]:
            req = self.running.get(rid)
            if req is None:
                continue
            req["generated"] += 1
            finished = req["generated"] >= req["max_tokens"]
            outputs.append({"request_id": rid, "text": f" tok{req['generated']}", "finished": finished})
            if finished:
                del self.running[rid]
        return outputs
