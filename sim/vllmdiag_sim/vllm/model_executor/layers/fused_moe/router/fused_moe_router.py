"""Mirror of vLLM 0.33 `fused_moe/router/fused_moe_router.py`: `FusedMoERouter.select_experts`.

The sim's fault ep-rank-odd stops one EP rank here, after the step's DP sync and before its MoE
dispatch, so its EP peers wait in `dispatch` for it. The loop is inline so this function stays the
innermost Python frame, as in a real hang.
"""

from __future__ import annotations

import time

from vllmdiag_sim import runtime


class FusedMoERouter:
    def select_experts(self, hidden_states: float, stuck_ack: str | None = None) -> tuple[float, int]:
        if stuck_ack is not None:
            runtime.ack(stuck_ack)
            while True:
                time.sleep(0.05)
        return 1.0, 0
