"""The budget counted from the process's start, and the last word when time runs out (issue 24).

``--budget`` is a promise for the whole command: from the moment the process started (interpreter
start and imports included, which on a saturated node took seconds) to the verdict printed. The
collector gets what is left of the budget after start-up, less ``AFTER_S`` that analysis and rendering
keep; the hard stop (hardstop.py) ends it there. ``guard`` is the net under analysis and rendering: an
interval timer whose handler raises ``BudgetSpent`` (a BaseException, so no ``except Exception`` in
the analysis swallows it), after which the caller writes an inconclusive verdict from what it has.
It runs on the main thread only (where Python delivers signals); elsewhere it is a no-op.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from vllmdiag.runtime import lastword

AFTER_S = 0.5  # what the collector leaves for analysis and rendering before the budget ends
# What ``collect --confirm`` writes on stderr when its confirm window opens: a sweep gives only a node that
# said this the window on top of --timeout (vllmdiag/sweep/fanout.py); any other node is held to --timeout.
CONFIRMING = "vllmdiag collect: work in flight, nothing moved: confirming"

LAST_WORD_S = lastword.LAST_WORD_S  # the verdict is out by budget + this
MIN_COLLECT_S = 0.2  # a collector shorter than this sees nothing; start-up past the budget still gets it


class BudgetSpent(BaseException):
    """The command's budget ran out: write the verdict from what is there, now."""


def collector_budget(budget_s: float, origin: float, extra_s: float = 0.0) -> float:
    """Seconds the collector may take now so that the command ends within ``budget_s`` of ``origin``
    (``extra_s``: a --rates window that comes on top of the budget)."""
    left = budget_s + extra_s - (time.monotonic() - origin) - AFTER_S
    return round(max(MIN_COLLECT_S, left), 3)


@contextmanager
def guard(at: float | None) -> Iterator[None]:
    """Raise ``BudgetSpent`` in this (main) thread at monotonic time ``at``; None or another thread:
    nothing. Nested guards: the inner one holds while it runs, the outer one is re-armed after."""
    if at is None or threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return
    fired = [False]

    def on_alarm(signum: int, frame: Any) -> None:
        if not fired[0]:
            fired[0] = True
            raise BudgetSpent()

    previous = signal.signal(signal.SIGALRM, on_alarm)
    outer_left = signal.setitimer(signal.ITIMER_REAL, max(0.001, at - time.monotonic()))[0]
    outer_at = time.monotonic() + outer_left
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer_left > 0:
            signal.setitimer(signal.ITIMER_REAL, max(0.001, outer_at - time.monotonic()))
