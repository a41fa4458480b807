"""The analyzer contract, and where analyzers are found (pure).

A module in ``analysis/layers/<layer>/`` *is* an analyzer (as sos finds its plugins: by folder, never
by name; ``registry.discover_modules``, as every extension point). It has:

- ``LAYER``: its layer, the folder's name; ``CODES``: every finding code it may emit (each with a
  playbook); ``analyze(facts) -> list[Finding]``, ``facts`` the snapshot's ``Facts``
  (``analysis/facts.py``: deployments, stack classes and the second look, rings, progress, each derived
  once per snapshot and shared by every analyzer);
- optionally the hooks the orchestrator (``vllmdiag/api.py``, ``vllmdiag/runtime/second_look.py``) walks:
  ``second_look_pids(facts)``: the processes whose first stack picture would be a hang if it held,
  so they are dumped again a moment later; and
  ``keeps_window_open(facts, deployment_ids)``: its suspicion holds in this snapshot and its
  confirm passes although the rings move (a held grammar compile steps empty batches).

``analyze`` reads ``Facts`` and derived views from ``analysis/views/``, never another analyzer's internals.
Cross-node group checks are found the same way: every module in ``analysis/across_nodes/checks/`` has
``CODES`` and ``check_group(group, facts, failed) -> list[Finding]`` (``GroupCheck``, ``group_checks``), ``facts``
each analysed node's ``Facts`` by node name (the ones its own analyzers read: nothing derived twice);
``analysis/across_nodes/analyze_nodes.py`` runs them on each group spanning nodes.

Where an analyzer runs within its layer is named here, once for the layer (``PRECEDENCE``; the cross-node
checks' in ``GROUP_CHECK_PRECEDENCE``): the first findings lead a verdict. A module the list does not name
runs after the named ones, by name, so a new analyzer edits nothing here unless its findings must lead.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable
from functools import lru_cache
from types import ModuleType
from typing import Protocol

from vllmdiag.analysis.across_nodes.rank_groups import RankGroup
from vllmdiag.analysis.facts import Facts
from vllmdiag.model import LAYERS, Finding, Snapshot
from vllmdiag.registry import discover_modules

LAYERS_PACKAGE = "vllmdiag.analysis.layers"
GROUP_CHECKS_PACKAGE = "vllmdiag.analysis.across_nodes.checks"
# Each layer's analyzers, by module name, in the order they run (the order they have always run in:
# bisect writes a verdict from the first findings, so this order is part of every verdict's wording).
PRECEDENCE: dict[str, tuple[str, ...]] = {
    "process": ("paused", "liveness"),
    "handshake": ("starting",  # a held start-up explains a front end that never listens: said first
                  "startup"),
    "queue": ("ring_flow", "engine_loop", "grammar", "kv_connector", "ring_rates"),
    "gpu": ("ranks", "dp_world", "parallel_groups", "kernel_errors", "lone_rank", "foreign_pids", "stall"),
    "client": ("requests", "token_rates"),
}
GROUP_CHECK_PRECEDENCE = ("rank_missing",  # a rank gone before the stack comparison, as the engine always ran them
                          "collective_odd")


class Analyzer(Protocol):
    """What a module in ``analysis/layers/<layer>/`` provides (hooks: see the module docstring)."""

    LAYER: str
    CODES: tuple[str, ...]

    def analyze(self, facts: Facts) -> list[Finding]: ...


class GroupCheck(Protocol):
    """What a module in ``analysis/across_nodes/checks/`` provides. ``failed``: the nodes that did not answer
    (or whose snapshot could not be analysed), each with why; they have no ``facts``."""

    CODES: tuple[str, ...]

    def check_group(self, group: RankGroup, facts: dict[str, Facts], failed: dict[str, str]) -> list[Finding]: ...


class SecondLookHook(Protocol):
    def __call__(self, facts: Facts) -> Iterable[int]: ...


class WindowHook(Protocol):
    def __call__(self, facts: Facts, deployment_ids: set[str]) -> bool: ...


@lru_cache(maxsize=1)
def analyzers() -> tuple[ModuleType, ...]:
    """Every analyzer module, in bisection order (layer, then ``PRECEDENCE``, then name). A module in a
    layer's folder that breaks the contract is a bug, said at once rather than skipped."""
    unplaced = sorted(set(layer_folders()) - set(LAYERS))
    if unplaced:  # a layer's place in the flow is a design decision: bisect walks LAYERS in order
        raise TypeError(f"{LAYERS_PACKAGE}.{unplaced[0]}: a layer folder needs its place in vllmdiag.model.LAYERS "
                        "(the order bisect walks the flow in)")
    out: list[ModuleType] = []
    for layer in LAYERS:
        found = discover_modules(f"{LAYERS_PACKAGE}.{layer}")
        for module in found:
            if getattr(module, "LAYER", None) != layer or not callable(getattr(module, "analyze", None)) \
                    or not getattr(module, "CODES", None):
                raise TypeError(f"{module.__name__}: an analyzer needs LAYER = {layer!r}, CODES and analyze()")
        out += in_precedence(found, PRECEDENCE.get(layer, ()))
    return tuple(out)


def layer_folders() -> list[str]:
    """The layer packages under ``analysis/layers/``, found on disk (not from LAYERS)."""
    package = importlib.import_module(LAYERS_PACKAGE)
    return [m.name for m in pkgutil.iter_modules(package.__path__) if m.ispkg]


@lru_cache(maxsize=1)
def group_checks() -> tuple[ModuleType, ...]:
    """Every cross-node group check, in ``GROUP_CHECK_PRECEDENCE`` then name (a module there that breaks the
    contract is a bug)."""
    found = discover_modules(GROUP_CHECKS_PACKAGE)
    for module in found:
        if not callable(getattr(module, "check_group", None)) or not getattr(module, "CODES", None):
            raise TypeError(f"{module.__name__}: a cross-node check needs CODES and check_group()")
    return tuple(in_precedence(found, GROUP_CHECK_PRECEDENCE))


def in_precedence(modules: Iterable[ModuleType], named: tuple[str, ...]) -> list[ModuleType]:
    """``modules`` in the order ``named`` gives their short names; the others after them, by full name. A
    name with no module is a stale list (a module renamed or removed): a bug, said at once."""
    by_name = {m.__name__.rsplit(".", 1)[-1]: m for m in modules}
    stale = [n for n in named if n not in by_name]
    if stale:
        raise TypeError(f"analysis/contract.py names analyzers that are not there: {stale}")
    rest = sorted((m for n, m in by_name.items() if n not in named), key=lambda m: m.__name__)
    return [by_name[n] for n in named] + rest


def layer_analyzers() -> list[tuple[str, Analyzer]]:
    """(layer, analyzer module) in bisection order."""
    return [(m.LAYER, m) for m in analyzers()]


def second_look_pids(snapshot: Snapshot) -> list[int]:
    """For the orchestrator's second stack look (vllmdiag/runtime/second_look.py): what every analyzer's
    ``second_look_pids`` hook asks for, within the deployments asked about (``--pid``)."""
    facts = Facts.of(snapshot)
    wanted = set(snapshot.options.get("pids") or [])
    mine = set().union(*(d.pids for d in facts.deployments if not wanted or d.pids & wanted))
    pids: set[int] = set()
    for module in analyzers():
        hook: SecondLookHook | None = getattr(module, "second_look_pids", None)
        if hook is not None:
            pids.update(p for p in hook(facts) if p in mine)
    return sorted(pids)


def keeps_window_open(snapshot: Snapshot, deployment_ids: set[str]) -> bool:
    """True if an analyzer's ``keeps_window_open`` hook says its suspicion still holds."""
    facts = Facts.of(snapshot)
    for module in analyzers():
        hook: WindowHook | None = getattr(module, "keeps_window_open", None)
        if hook is not None and hook(facts, deployment_ids):
            return True
    return False
