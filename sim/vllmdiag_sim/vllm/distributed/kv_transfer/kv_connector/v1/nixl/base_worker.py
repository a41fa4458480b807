"""Mirror of vLLM 0.33 `vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_worker.py`: the worker-side
connector each step polls for finished transfers (`get_finished` -> `get_transfer_results`)."""

from __future__ import annotations

import time


class NixlBaseConnectorWorker:
    def __init__(self) -> None:
        self.polls = 0

    def get_finished(self) -> tuple[set[str], set[str]]:
        done_sending, done_recving = self.get_transfer_results()
        return done_sending, done_recving

    def get_transfer_results(self) -> tuple[set[str], set[str]]:
        # The sim's producer never sends: nothing ever finishes (kv-wait). Checking NIXL's transfer
        # handles and notifications takes a moment of host time.
        self.polls += 1
        time.sleep(0.002)
        return set(), set()
