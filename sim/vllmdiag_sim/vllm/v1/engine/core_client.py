"""Mirror of `vllm/v1/engine/core_client.py`'s `InprocClient` (`VLLM_ENABLE_V1_MULTIPROCESSING=0`):
the EngineCore lives in the caller's process and `get_output()` runs one engine step right there,
on the caller's thread (vllm-internals 5.4: the model frames appear under `step`)."""

from __future__ import annotations

import queue
import socket
from typing import Any

from vllmdiag_sim import runtime
from vllmdiag_sim.vllm.config.parallel import ParallelConfig
from vllmdiag_sim.vllm.v1.engine.core import EngineCoreProc


class InprocClient:
    def __init__(self, pc: ParallelConfig, hub_sock: socket.socket | None) -> None:
        # The sim's EngineCoreProc also starts its input thread, which only watches fault.json here.
        self.engine_core = EngineCoreProc(pc, 0, [], [], hub_sock)
        self.dataset, self.prompts = False, 0  # the sim's offline healthy-load

    def get_output(self) -> list[dict[str, Any]]:
        return self.engine_core.step()

    def has_work(self) -> bool:
        return self.engine_core.scheduler.has_requests() or bool(self.engine_core.pending_steps)

    def sim_take_inputs(self) -> None:
        """Not in vLLM: hand the sim's fault notices (queued by the input thread) to the engine. An
        offline ``healthy-load`` is the script working through a dataset: 8 prompts per generate()."""
        while True:
            try:
                kind, payload = self.engine_core.input_queue.get_nowait()
            except queue.Empty:
                break
            if kind == "SIM_FAULT":
                self.dataset = payload.get("fault") == "healthy-load" and payload.get("dp", 0) == 0
            self.engine_core._handle_client_request(kind, payload)
        if self.dataset and not self.has_work():
            for _ in range(8):
                self.engine_core.scheduler.add_request({"request_id": f"prompt-{self.prompts}", "max_tokens": 16})
                self.prompts += 1
            runtime.ack("offline-load")
