"""What a collection did (its budget, CPU priority, second look, start-up, confirm window), typed.

The snapshot carries it in its ``options`` JSON, beside the options it was given, under the keys it
always had (``budget_s``, ``priority``, ``resample``, ``command_budget_s``, ``startup_s``, ``confirm``,
``collected``): a saved snapshot reads the same to every version. Writers call ``note`` with typed
keywords (each fact is appended as it happens, so the JSON's key order is the order things were done);
readers call ``Collected.read``, which tolerates a snapshot written before a fact existed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vllmdiag.model import Snapshot

FACTS = ("budget_s", "priority", "resample", "command_budget_s", "startup_s", "confirm", "collected")


@dataclass(frozen=True)
class ConfirmWindow:
    """The confirm window that opened: asked for, how long it lasted, passes taken, why it ended (window, moved).
    On disk its length keeps the key it always had, ``watched_s`` (a saved snapshot is read back by every
    version); "watch" now means the resident watcher only (issue 36 item 4)."""

    requested_s: float
    window_s: float
    passes: int
    stopped: str

    def to_dict(self) -> dict[str, Any]:
        return {"requested_s": self.requested_s, "watched_s": self.window_s, "passes": self.passes,
                "stopped": self.stopped}


@dataclass(frozen=True)
class Collected:
    budget_s: float | None = None  # what the collector was allowed (the incident header says it)
    priority: dict[str, Any] | None = None  # the CPU priority it ran at (priority.state())
    resample: str | None = None  # "skipped: why" when the second look could not be taken
    command_budget_s: float | None = None  # the whole command's budget (triage, collect)
    startup_s: float | None = None  # what the interpreter's start took of it
    confirm: ConfirmWindow | str | None = None  # the window that opened, or "skipped: why"
    collected: str | None = None  # "nothing: ..." when the budget was spent before the collection

    @classmethod
    def read(cls, snap: Snapshot) -> Collected:
        """The facts a snapshot carries; one missing or of another shape (an older writer) is None."""
        o = snap.options
        confirm = o.get("confirm")
        if isinstance(confirm, dict):
            try:
                confirm = ConfirmWindow(float(confirm["requested_s"]), float(confirm["watched_s"]),
                                        int(confirm["passes"]), str(confirm["stopped"]))
            except (KeyError, TypeError, ValueError):
                confirm = None
        return cls(budget_s=_number(o.get("budget_s")), priority=_dict(o.get("priority")),
                   resample=_text(o.get("resample")), command_budget_s=_number(o.get("command_budget_s")),
                   startup_s=_number(o.get("startup_s")), confirm=confirm if isinstance(confirm, (ConfirmWindow, str))
                   else None, collected=_text(o.get("collected")))


def note(snap: Snapshot, *, budget_s: float | None = None, priority: dict[str, Any] | None = None,
         resample: str | None = None, command_budget_s: float | None = None, startup_s: float | None = None,
         confirm: ConfirmWindow | str | None = None, collected: str | None = None) -> None:
    """Write the facts given (None: not this time) into the snapshot, in the order of ``FACTS``."""
    for key, value in (("budget_s", budget_s), ("priority", priority), ("resample", resample),
                       ("command_budget_s", command_budget_s), ("startup_s", startup_s), ("confirm", confirm),
                       ("collected", collected)):
        if value is not None:
            snap.options[key] = value.to_dict() if isinstance(value, ConfirmWindow) else value


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _text(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _dict(v: Any) -> dict[str, Any] | None:
    return v if isinstance(v, dict) else None
