"""What a probe is: a module in ``probes/`` with a ``SPEC`` and a ``collect(ctx) -> dict`` function.

Probes collect raw facts and never decide. They reach the OS only through the context
(``ctx.proc_root``, ``ctx.dev_shm``, ``ctx.run``) so tests can point them elsewhere and the
runner owns every deadline.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

PROBE_LAYERS = ("host", "process", "handshake", "queue", "gpu", "client")


@dataclass(frozen=True)
class ProbeSpec:
    name: str  # == module name == JSON key == --probe value
    layer: str
    description: str
    requires: tuple[str, ...] = ()  # probes whose results must be ready first (ctx.result(name))
    timeout_s: float = 5.0
    default: bool = True  # False: opt-in only (--probe NAME or an option that enables it)
    # A sampler keeps sampling until every non-sampler probe has finished (ctx.wait_others), so
    # "sampled over time" costs no extra wall time: it overlaps the slow probes (stacks).
    sampler: bool = False
    # The probe whose first sample opens the movement window (http: /metrics), and the probes that
    # start only once it has opened (ctx.wait_window, at most runner.DEFER_MAX_S): their work is on no
    # path to that sample, and on a 2-core node their CPU (the kernel log, every process's maps)
    # delayed it, and with it the whole window.
    opens_window: bool = False
    deferred: bool = False


class Skip(Exception):
    """Raised by a probe that cannot or need not run here; the reason says what would fix it."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class Partial:
    """Returned by a probe that collected something but not everything."""

    data: dict[str, Any]
    reason: str
