"""Mirror of `vllm/distributed/utils.py`: the yield every busy wait in shm_broadcast ends in."""

from __future__ import annotations

import os
import time

from vllmdiag_sim import runtime


def sched_yield() -> None:
    os.sched_yield()
    # The short sleep is the sim's only departure from vLLM here: same frame, far less CPU.
    time.sleep(runtime.YIELD_SLEEP_S)
