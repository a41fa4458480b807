"""The report's views, found by folder as every extension is (``registry.discover_modules``).

A module ``render/<name>_view.py`` is a view when it draws in at least one of the report's formats:
``render(report, console)`` the terminal (``-v``), ``html(node) -> str`` the body of its section of each
node in the HTML report, ``markdown(node) -> list[str]`` the lines of that section in the Markdown report
(``node``: a ``report_data.NodeData``). So a new view, in every format, is one file; nothing names it.
``<name>`` is a layer (``vllmdiag.model.LAYERS``: that layer's picture) or not (``fleet``: the whole
sweep). They draw in bisection order, the layers' order, then the others by name. A ``*_view`` module
with none of the three draws something else (gate results, playbooks) for its own command, and is no
view of a report.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from types import ModuleType
from typing import Any

from vllmdiag.model import LAYERS
from vllmdiag.registry import discover_modules

VIEWS_PACKAGE = "vllmdiag.render"
SUFFIX = "_view"
FORMATS = ("render", "html", "markdown")  # terminal, HTML section body, Markdown section lines


@lru_cache(maxsize=4)
def discover(package: str = VIEWS_PACKAGE) -> tuple[tuple[str, ModuleType], ...]:
    """(name, module) of every view, in drawing order."""
    found: list[tuple[int, str, ModuleType]] = []
    for module in discover_modules(package, suffix=SUFFIX):
        if not any(callable(getattr(module, f, None)) for f in FORMATS):
            continue
        name = module.__name__.rsplit(".", 1)[1].removesuffix(SUFFIX)
        found.append((LAYERS.index(name) if name in LAYERS else len(LAYERS), name, module))
    return tuple((name, module) for _, name, module in sorted(found, key=lambda t: t[:2]))


def drawing(fmt: str, package: str = VIEWS_PACKAGE) -> tuple[tuple[str, Callable[..., Any]], ...]:
    """(name, function) of every view that draws in ``fmt`` (one of FORMATS), in drawing order."""
    if fmt not in FORMATS:
        raise ValueError(f"no view format {fmt!r} (known: {', '.join(FORMATS)})")
    return tuple((name, getattr(module, fmt)) for name, module in discover(package)
                 if callable(getattr(module, fmt, None)))
