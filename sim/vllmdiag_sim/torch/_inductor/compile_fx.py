"""Mirror of `torch/_inductor/compile_fx.py`: a cold compile that takes minutes (vLLM PR #53282)."""

from __future__ import annotations

import time

from vllmdiag_sim import runtime


def compile_fx(model_name: str, ack: str) -> None:
    runtime.ack(ack)
    while True:  # a cold inductor compile: minutes without a log line
        time.sleep(0.05)
