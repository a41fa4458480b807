"""One command's time, built once by its door: when it began, what it promised, and every deadline that
follows from those two (issue 24: ``--budget`` counts from the process's start, interpreter included).

The stages of a triage (api.py) ask this object whether they fit and until when they may run; the
arithmetic lives here and nowhere else. Two kinds of run:
- ``guarded`` (a door gave ``origin``, the process's start): analysis past the budget is cut
  (deadline.guard) and a start that took the whole budget is answered at once;
- unguarded (a library caller, the resident watcher: ``origin`` None): the budget counts from now and
  analysis is never cut.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from vllmdiag.runtime import deadline, lastword, priority

LATE_COLLECT_S = 1.0  # the collector's cap after a start that ran past the budget (boosted)
RENDER_S = 0.3  # of the last second: what drawing the verdict keeps after analysis


@dataclass
class Run:
    budget_s: float  # the whole command's, --rates window included
    confirm_s: float = 0.0  # the confirm window (0 = off); it counts from ``started`` too
    origin: float | None = None  # the process's start (monotonic); None: a library call, from now
    started: float = field(init=False)  # what the budget counts from (moved once by a late start)
    startup_s: float = field(init=False, default=0.0)  # what came before the work began (begin)

    def __post_init__(self) -> None:
        self.started = time.monotonic() if self.origin is None else self.origin

    def begin(self) -> float:
        """The work begins: what the start took (interpreter, imports, the door) is measured here, where
        the API's own code starts, not where the door built the run."""
        self.startup_s = time.monotonic() - self.started
        return self.startup_s

    @classmethod
    def of_command(cls, budget_s: float, confirm_s: float = 0.0) -> Run:
        """The door's run: the budget counts from this process's start."""
        return cls(budget_s=budget_s, confirm_s=confirm_s, origin=lastword.process_start())

    @property
    def guarded(self) -> bool:
        return self.origin is not None

    # ---- the stages ask -------------------------------------------------------------------------
    def start_took_it_all(self) -> bool:
        """The start before our code ran took the whole budget (guarded runs only)."""
        return self.guarded and self.startup_s >= self.budget_s

    def start_late(self) -> None:
        """Boosted after a start past the budget, what follows runs at full speed: a quick pass
        (LATE_COLLECT_S: a healthy one takes 0.2-0.4 s, the cap binds only on a slow probe) and the last
        word after it, not deadlines already gone. A true verdict a little late beats an inconclusive one."""
        self.started = time.monotonic() - max(0.0, self.budget_s - LATE_COLLECT_S - deadline.AFTER_S)

    def collector_budget(self) -> float:
        """What the quick pass's collector may take now (what analysis keeps is left out)."""
        return deadline.collector_budget(self.budget_s, self.started)

    def collect_until(self) -> float:
        """The quick pass and its second look end by then."""
        return self.started + self.budget_s - deadline.AFTER_S

    def analysis_cut(self) -> float | None:
        """When the analysis of the quick pass is cut (None: never, an unguarded run)."""
        return self.started + self.budget_s + deadline.LAST_WORD_S - RENDER_S if self.guarded else None

    def window_end(self) -> float:
        """The confirm window's end, or the budget's if later: when the verdict is due after a window."""
        return self.started + max(self.budget_s, self.confirm_s)

    def window_analysis_cut(self) -> float | None:
        """When the analysis after the confirm window is cut (None: never)."""
        return self.window_end() + deadline.LAST_WORD_S - RENDER_S if self.guarded else None

    def window_opened(self) -> None:
        """The confirm window opened: the last word (a starved command's timer) waits for its end."""
        lastword.postpone(self.window_end())

    # ---- what it records ------------------------------------------------------------------------
    def priority(self) -> dict[str, Any]:
        return priority.state()

    def realtime(self) -> bool:
        return priority.realtime()
