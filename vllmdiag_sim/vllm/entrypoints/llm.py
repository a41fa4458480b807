"""Mirror of `vllm/entrypoints/llm.py`: `LLM(...)` in a user's script (offline inference).

With multiprocessing (vLLM's default) the script is the engine's client: it binds the input
ROUTER and output PULL and forks `VLLM::EngineCore`, like the API server does. With
`VLLM_ENABLE_V1_MULTIPROCESSING=0` (`InprocClient`) the engine runs inside the script and the
workers are the script's own children. Nothing is retitled in the script itself.
"""

from __future__ import annotations

import os
import time

import zmq

from vllmdiag_sim import collective, runtime
from vllmdiag_sim.vllm.config.parallel import ParallelConfig
from vllmdiag_sim.vllm.utils.network_utils import get_open_zmq_ipc_path, make_zmq_socket


class LLM:
    def __init__(self, model: str, tensor_parallel_size: int = 1) -> None:
        self.model = model
        self.pc = ParallelConfig(tensor_parallel_size, frontend=False)
        if os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1") == "0":
            self._start_inproc()
        else:
            self._start_mp()

    def _start_mp(self) -> None:
        from vllmdiag_sim.vllm.entrypoints.openai.api_server import launch_core_engines, wait_for_engine_startup

        ctx = zmq.Context()
        input_addr, output_addr = get_open_zmq_ipc_path(), get_open_zmq_ipc_path()
        self.input_socket = make_zmq_socket(ctx, input_addr, zmq.ROUTER, bind=True)
        self.output_socket = make_zmq_socket(ctx, output_addr, zmq.PULL, bind=True)
        self.engines = launch_core_engines(self.pc, input_addr, output_addr)
        wait_for_engine_startup(self.input_socket, self.engines)

    def _start_inproc(self) -> None:
        from vllmdiag_sim.vllm.v1.engine.core import EngineCoreProc

        hub = collective.listen(0) if self.pc.tensor_parallel_size > 1 else None
        self.engine_core = EngineCoreProc(self.pc, 0, None, None, hub)

    def serve_forever(self) -> None:
        """The sim's stand-in for a script calling generate() again and again: in-process, the
        engine steps on the script's main thread (InprocClient), so a hung step shows there."""
        if hasattr(self, "engine_core"):
            self.engine_core.run_busy_loop()
        while True:
            time.sleep(1.0)


def main() -> None:
    """The user's script: build the LLM, then sit in user code (a notebook waiting for input)."""
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--tp", type=int, default=1)
    args = parser.parse_args()
    llm = LLM("facebook/opt-125m", tensor_parallel_size=args.tp)
    runtime.ack("api-ready")
    llm.serve_forever()


if __name__ == "__main__":
    main()
