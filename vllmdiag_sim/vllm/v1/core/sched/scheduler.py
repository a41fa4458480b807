"""Mirror of `vllm/v1/core/sched/scheduler.py`: one token per running request per step."""

from __future__ import annotations

import time
from typing import Any

from vllmdiag_sim import runtime
from vllmdiag_sim.vllm.v1.structured_output import is_grammar_ready


class Scheduler:
    def __init__(self) -> None:
        self.waiting: list[dict[str, Any]] = []
        self.running: dict[str, dict[str, Any]] = {}
        self.stuck = False
        self.step_no = 0

    def add_request(self, request: dict[str, Any]) -> None:
        self.waiting.append({**request, "generated": 0})

    def finish_requests(self, request_ids: list[str]) -> None:
        for rid in request_ids:
            self.running.pop(rid, None)
        self.waiting = [r for r in self.waiting if r["request_id"] not in request_ids]

    def has_requests(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> dict[str, Any]:
        if self.stuck and self.has_requests():
            self._update_waiting_for_remote_kv()
        # vLLM's _handle_blocked_waiting_request: a request whose grammar is still compiling stays
        # WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR; the step goes on without it (an empty batch if alone).
        ready = [is_grammar_ready(req) for req in self.waiting]
        for req, ok in zip(self.waiting, ready, strict=True):
            if ok:
                self.running[req["request_id"]] = req
        self.waiting = [req for req, ok in zip(self.waiting, ready, strict=True) if not ok]
        self.step_no += 1
        return {"req_ids": list(self.running), "step": self.step_no}

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
