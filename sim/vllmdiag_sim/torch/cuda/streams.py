"""Mirror of `torch/cuda/streams.py`: `Event.synchronize`, where a host thread waits for its GPU.

A wedged GPU never completes the recorded work, so the host thread stays in `synchronize`
(`cuEventSynchronize` underneath, real-hang-patterns row 4). The wait is inline so this function
stays the innermost Python frame, as in a real hang.
"""

from __future__ import annotations

import time

from vllmdiag_sim import runtime


class Event:
    def __init__(self) -> None:
        self.wedged: str | None = None  # the ack to write when the wait starts; None = completes

    def synchronize(self) -> None:
        if self.wedged is None:
            return
        runtime.ack(self.wedged)
        while True:
            time.sleep(0.05)
