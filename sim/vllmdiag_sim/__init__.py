"""A faithful stand-in for a vLLM 0.33 deployment: real processes, shm rings, ZMQ and HTTP.

`Deployment.up(...)` starts one (optionally with a fault from `FAULTS`); `vllmdiag_sim.cli.app`
is the `vllmdiag sim` command group; `vllmdiag_sim.demo.demo` backs `vllmdiag demo`.
"""

from vllmdiag_sim.deployment import Deployment, SimError, state_root
from vllmdiag_sim.faults import FAULTS, FaultError

__all__ = ["FAULTS", "Deployment", "FaultError", "SimError", "state_root"]
