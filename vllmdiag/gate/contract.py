"""The gate check contract, and where gate checks are found (pure).

A module in ``gate/checks/`` declares its checks (found by folder, as analyzers and probes are:
``registry.discover_modules``; nothing imports a check by name), so a new check is one new file:

- ``GATE_CHECKS``: a tuple of ``GateCheck``, each with its ``name`` (what config, JSON, JUnit and
  --prom call it), its ``scope`` (``node``: on every snapshot; ``url``: only when the gate ran with
  --url; ``fleet``: across the nodes of ``sweep --gate``, ``run`` then gives this node's value to compare
  and ``what`` names it), its ``stage`` (below) and, when a fail must not fail the gate by default,
  ``advisory=True`` (the config's ``advisory`` list overrides it).

Checks run, and are listed, stage by stage in ``STAGES`` order; within a stage by module name, then
in the order the module declares them. A module name starting with ``_`` is a helper of the folder.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Literal

from vllmdiag.registry import discover_modules

if TYPE_CHECKING:
    from vllmdiag.gate.config import GateConfig
    from vllmdiag.model import Snapshot

CHECKS_PACKAGE = "vllmdiag.gate.checks"
Scope = Literal["node", "url", "fleet"]
SCOPES: tuple[Scope, ...] = ("node", "url", "fleet")
# The order the gate reads a node in: each stage a question a rollout asks before the next one.
STAGES = (
    "host",     # is there room, and nothing left of an earlier run (/dev/shm, stale sockets)?
    "limits",   # may vLLM open its files and threads, and may we look into it (ptrace, py-spy)?
    "gpu",      # are the GPUs healthy?
    "network",  # are the ports it binds free?
    "env",      # does its environment hold no known hazard (NCCL/VLLM variables, the RPC base path)?
    "server",   # does the running server answer (--url)?
    "fleet",    # do the nodes agree with each other (sweep --gate)?
)


@dataclass(frozen=True)
class GateCheck:
    name: str
    scope: Scope
    stage: str
    # node/url: the CheckResult; fleet: this node's value (None: not in this snapshot), compared across nodes
    run: Callable[[Snapshot, GateConfig], Any]
    what: str = ""  # fleet: what the value is, in the reasons ("/dev/shm size")
    advisory: bool = False  # default for the config's `advisory` list: a fail is reported, the gate passes

    def __call__(self, snap: Snapshot, cfg: GateConfig) -> Any:
        return self.run(snap, cfg)


@lru_cache(maxsize=4)
def discover(package: str = CHECKS_PACKAGE) -> tuple[GateCheck, ...]:
    """Every gate check of the folder, in evaluation order. A module there that breaks the contract
    (or a name declared twice) is a bug, said at once rather than skipped."""
    found: list[tuple[int, str, int, GateCheck]] = []
    for module in discover_modules(package):
        declared = getattr(module, "GATE_CHECKS", None)
        if not isinstance(declared, tuple) or not declared:
            raise TypeError(f"{module.__name__}: a gate check module needs GATE_CHECKS, a tuple of GateCheck")
        for position, check in enumerate(declared):
            _validate(module.__name__, check)
            found.append((STAGES.index(check.stage), module.__name__, position, check))
    checks = tuple(c for *_, c in sorted(found, key=lambda t: t[:3]))
    seen: set[str] = set()
    for check in checks:
        if check.name in seen:
            raise TypeError(f"{package}: gate check {check.name!r} is declared twice")
        seen.add(check.name)
    return checks


def _validate(module: str, check: Any) -> None:
    if not isinstance(check, GateCheck):
        raise TypeError(f"{module}: GATE_CHECKS holds {check!r}, not a GateCheck")
    if check.scope not in SCOPES or check.stage not in STAGES or not callable(check.run) or not check.name:
        raise TypeError(f"{module}: gate check {check.name!r} needs a name, run(), scope in {SCOPES} "
                        f"and stage in {STAGES}")
    if check.scope == "fleet" and not check.what:
        raise TypeError(f"{module}: fleet check {check.name!r} needs `what` (the value it compares)")


def checks(*scopes: Scope) -> tuple[GateCheck, ...]:
    """The checks of these scopes (all when none), in evaluation order."""
    return tuple(c for c in discover() if not scopes or c.scope in scopes)


def names(*scopes: Scope) -> tuple[str, ...]:
    return tuple(c.name for c in checks(*scopes))


def all_names() -> tuple[str, ...]:
    """What config may name: the node checks (URL ones included) in order, then the fleet checks."""
    return names("node", "url") + names("fleet")


def by_name() -> dict[str, GateCheck]:
    return {c.name: c for c in discover()}


def default_advisory() -> tuple[str, ...]:
    """The config's default `advisory` list: the checks that declare themselves advisory."""
    return tuple(c.name for c in checks("node", "url") + checks("fleet") if c.advisory)
