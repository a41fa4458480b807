"""Mirror of `vllm/v1/engine/core_client.py`'s `InprocClient` (`VLLM_ENABLE_V1_MULTIPROCESSING=0`):
the EngineCore lives in the caller's process and `get_output()` runs one engine step right there,
on the caller's thread (vllm-internals 5.4: the model frames appear under `step`)."""

from __future__ import annotations

import queue
import socket
from typing import Any

from vllmdiag_sim.vllm.config.parallel import ParallelConfig
from vllmdiag_sim.vllm.v1.engine.core import EngineCoreProc


class InprocClient:
    def __init__(self, pc: ParallelConfig, hub_sock: socket.socket | None) -> None:
        # The sim's EngineCoreProc also starts its input thread, which only watches fault.json here.
        self.engine_core = EngineCoreProc(pc, 0, None, None, hub_sock)

    def get_output(self) -> list[dict[str, Any]]:
        return self.engine_core.step()

    def has_work(self) -> bool:
        return self.engine_core.scheduler.has_requests() or bool(self.engine_core.pending_steps)

    def sim_take_inputs(self) -> None:
        """Not in vLLM: hand the sim's fault notices (queued by the input thread) to the engine."""
        while True:
            try:
                kind, payload = self.engine_core.input_queue.get_nowait()
            except queue.Empty:
                return
            self.engine_core._handle_client_request(kind, payload)
