"""Mirror of `vllm/entrypoints/llm.py`: `LLM(...)` in a user's script (offline inference).

With multiprocessing (vLLM's default) the script is the engine's client: it binds the input
ROUTER and output PULL and forks `VLLM::EngineCore`, like the API server does. With
`VLLM_ENABLE_V1_MULTIPROCESSING=0` (`InprocClient`) the engine runs inside the script and the
workers are the script's own children; at TP=1 (`UniProcExecutor`) there is no child at all and
the model runs in the script. Nothing is retitled in the script itself; like real vLLM, it maps
vLLM's compiled kernels (`vllm.platforms.cuda`), which is how a diagnosis finds it.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import zmq

from vllmdiag_sim import collective, runtime
from vllmdiag_sim.vllm.config.parallel import ParallelConfig
from vllmdiag_sim.vllm.platforms.cuda import import_kernels
from vllmdiag_sim.vllm.utils.network_utils import get_open_zmq_ipc_path, make_zmq_socket


class LLM:
    def __init__(self, model: str, tensor_parallel_size: int = 1) -> None:
        self.model = model
        self.pc = ParallelConfig(tensor_parallel_size, frontend=False)
        import_kernels()
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
        from vllmdiag_sim.vllm.v1.engine.core_client import InprocClient
        from vllmdiag_sim.vllm.v1.engine.llm_engine import LLMEngine

        hub = collective.listen(0) if self.pc.tensor_parallel_size > 1 else None
        self.llm_engine = LLMEngine(InprocClient(self.pc, hub))

    def generate(self) -> list[dict[str, Any]]:
        return self._run_engine()

    def _run_engine(self) -> list[dict[str, Any]]:
        outputs: list[dict[str, Any]] = []
        shown = 0.0
        while self.llm_engine.has_unfinished_requests():
            step_outputs = self.llm_engine.step()  # in-process: the engine step runs right here
            outputs += [o for o in step_outputs if o.get("finished")]
            if outputs and time.monotonic() - shown >= 0.1:  # tqdm's mininterval
                # vLLM's _run_engine updates a tqdm bar ("Processed prompts") on stderr as requests finish.
                sys.stderr.write(f"\rProcessed prompts: {len(outputs)}")
                sys.stderr.flush()
                shown = time.monotonic()
        return outputs

    def serve_forever(self) -> None:
        """The sim's stand-in for a script calling generate() again and again. In-process, each
        step runs on the script's main thread (InprocClient), so a hung step shows there; between
        batches the script is in its own code, as a real one is (no vLLM frame at all)."""
        if not hasattr(self, "llm_engine"):
            while True:
                time.sleep(1.0)
        while True:
            self._wait_for_prompts()
            self.generate()

    def _wait_for_prompts(self) -> None:
        client = self.llm_engine.engine_core
        while True:
            client.sim_take_inputs()  # the sim's faults arrive as work
            if client.has_work():
                return
            time.sleep(0.05)


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
