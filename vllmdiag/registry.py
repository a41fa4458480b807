"""Discovers probes: every module in ``vllmdiag.probes`` with a ``SPEC`` and a ``collect``.

Nothing else imports a probe by name, so adding a probe is adding one file. ``discover_modules`` is the
one way every extension point finds its modules by folder: probes here, analyzers and cross-node
checks (``analysis/contract.py``), gate checks (``gate/contract.py``), terminal views (``render/screen.py``).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from vllmdiag.errors import BadInput
from vllmdiag.probe import PROBE_LAYERS, ProbeSpec


@dataclass(frozen=True)
class Probe:
    spec: ProbeSpec
    collect: Callable[[Any], Any]


class RegistryError(BadInput, RuntimeError):
    """An unknown probe asked for (or a probe module without a valid SPEC): exit 2."""

    fix = "use a probe name that `vllmdiag triage --help` lists (--probe, --enable)"


def discover_modules(package: str, suffix: str = "") -> list[ModuleType]:
    """Every module of ``package``'s folder whose name ends in ``suffix``, imported, in name order. A
    name starting with ``_`` is private to its folder (a helper), never an extension. What a module
    must declare, and the order its extensions run in, is each extension point's own contract."""
    folder = importlib.import_module(package)
    names = sorted(info.name for info in pkgutil.iter_modules(folder.__path__)
                   if not info.name.startswith("_") and info.name.endswith(suffix))
    return [importlib.import_module(f"{package}.{name}") for name in names]


def discover() -> dict[str, Probe]:
    found: dict[str, Probe] = {}
    for module in discover_modules("vllmdiag.probes"):
        name = module.__name__.rsplit(".", 1)[1]
        spec = getattr(module, "SPEC", None)
        collect = getattr(module, "collect", None)
        if spec is None and collect is None:
            continue  # a helper module, not a probe
        validate(name, spec, collect)
        found[name] = Probe(spec=spec, collect=collect)  # type: ignore[arg-type]
    for probe in found.values():
        for dep in probe.spec.requires:
            if dep not in found:
                raise RegistryError(f"probe {probe.spec.name} requires unknown probe {dep}")
    return found


def validate(module_name: str, spec: Any, collect: Any) -> None:
    if not isinstance(spec, ProbeSpec):
        raise RegistryError(f"probe module {module_name}: SPEC must be a ProbeSpec")
    if not callable(collect):
        raise RegistryError(f"probe module {module_name}: collect(ctx) is missing")
    if spec.name != module_name:
        raise RegistryError(f"probe module {module_name}: SPEC.name is {spec.name!r}")
    if spec.layer not in PROBE_LAYERS:
        raise RegistryError(f"probe {spec.name}: unknown layer {spec.layer!r}")
    if not 0 < spec.timeout_s <= 120:
        raise RegistryError(f"probe {spec.name}: timeout_s must be in (0, 120]")


def select(probes: dict[str, Probe], wanted: list[str] | None, enabled: set[str]) -> dict[str, Probe]:
    """Default probes plus opt-ins, closed over requirements. ``wanted`` restricts to those names."""
    if wanted:
        unknown = [w for w in wanted if w not in probes]
        if unknown:
            raise RegistryError(f"unknown probe {unknown[0]!r}; known: {', '.join(sorted(probes))}")
        names = set(wanted)
    else:
        names = {n for n, p in probes.items() if p.spec.default or n in enabled}
    todo = list(names)
    while todo:
        for dep in probes[todo.pop()].spec.requires:
            if dep not in names:
                names.add(dep)
                todo.append(dep)
    return {n: probes[n] for n in sorted(names)}


def opt_in(names: list[str] | tuple[str, ...]) -> dict[str, bool]:
    """``--enable NAME``: the options that turn these opt-in probes on. A probe declares that it is
    opt-in once, in its SPEC (``default=False``); triage, collect and sweep all take its name."""
    if not names:
        return {}
    probes = discover()
    optional = sorted(n for n, p in probes.items() if not p.spec.default)
    bad = [n for n in names if n not in optional]
    if bad:
        raise RegistryError(f"--enable {bad[0]!r}: not an opt-in probe; opt-in probes: {', '.join(optional)}")
    return dict.fromkeys(names, True)
