"""`vllmdiag demo`: a simulated hung vLLM deployment, started, triaged and torn down."""

from __future__ import annotations

import signal
import sys
from types import FrameType

from vllmdiag_sim.deployment import Deployment


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def demo(fault: str = "straggler", tp: int = 4) -> int:
    """Start a deployment with `fault` in place, triage it, tear it down; the triage exit code."""
    from vllmdiag import api

    previous = signal.signal(signal.SIGTERM, _interrupt)  # teardown on kill as on Ctrl-C
    try:
        print(f"vllmdiag demo: starting a simulated vLLM 0.33 deployment (TP={tp}, fault={fault}) ...",
              file=sys.stderr)
        with Deployment.up(tp=tp, fault=fault) as dep:
            print(f"deployment {dep.id} is up (API server pid {dep.root_pid}); triaging ...", file=sys.stderr)
            result = api.triage(pids=[dep.root_pid])
            result.render()
            return int(result.exit_code)
    finally:
        signal.signal(signal.SIGTERM, previous)
