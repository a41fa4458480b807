"""Mirror of `vllm/v1/engine/coordinator.py`: `DPCoordinator`, started by the API server when DP > 1.

It binds its front-end stats XPUB and the engines' PULL (ipc, local-only) and waits; the sim's
engines do not talk to it (vLLM's waves are not simulated), which is enough for its process and
endpoints to look like vLLM's.
"""

from __future__ import annotations

import zmq

from vllmdiag_sim import runtime
from vllmdiag_sim.vllm.utils.network_utils import get_open_zmq_ipc_path, make_zmq_socket
from vllmdiag_sim.vllm.utils.system_utils import set_process_title


class DPCoordinatorProc:
    @staticmethod
    def run_coordinator() -> None:
        set_process_title("DPCoordinator")
        ctx = zmq.Context()
        socks = [make_zmq_socket(ctx, get_open_zmq_ipc_path(), zmq.XPUB, bind=True),
                 make_zmq_socket(ctx, get_open_zmq_ipc_path(), zmq.PULL, bind=True)]
        poller = zmq.Poller()
        for s in socks:
            poller.register(s, zmq.POLLIN)
        runtime.ack("dp-coordinator-ready")
        while True:
            poller.poll(1000)
