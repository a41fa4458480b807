"""The report's terminal views (``-v``), found by folder as every extension is (``registry.discover_modules``).

A module ``render/<name>_view.py`` with ``render(report, console)`` is a view, so a new view is one
file; nothing names it. ``<name>`` is a layer (``vllmdiag.model.LAYERS``: that layer's picture) or not
(``fleet``: the whole sweep). They draw in bisection order, the layers' order, then the others by name.
A ``*_view`` module without ``render`` draws something else (gate results, playbooks) for its own
command, and is no view of a report.
"""

from __future__ import annotations

from functools import lru_cache
from types import ModuleType

from vllmdiag.model import LAYERS
from vllmdiag.registry import discover_modules

VIEWS_PACKAGE = "vllmdiag.render"
SUFFIX = "_view"


@lru_cache(maxsize=4)
def discover(package: str = VIEWS_PACKAGE) -> tuple[tuple[str, ModuleType], ...]:
    """(name, module) of every view, in drawing order."""
    found: list[tuple[int, str, ModuleType]] = []
    for module in discover_modules(package, suffix=SUFFIX):
        if not callable(getattr(module, "render", None)):
            continue
        name = module.__name__.rsplit(".", 1)[1].removesuffix(SUFFIX)
        found.append((LAYERS.index(name) if name in LAYERS else len(LAYERS), name, module))
    return tuple((name, module) for _, name, module in sorted(found, key=lambda t: t[:2]))
