"""Contract tests over everything discovered: probes, analyzers, playbooks, codes."""

from __future__ import annotations

import importlib
import pkgutil
import re
from importlib import resources
from pathlib import Path
from typing import Any

from vllmdiag.analysis.contract import analyzers, group_checks, layer_analyzers
from vllmdiag.model import LAYERS
from vllmdiag.playbooks.playbook import load_playbooks
from vllmdiag.probe import PROBE_LAYERS
from vllmdiag.registry import discover

EMIT = re.compile(r"""finding\(\s*["']([a-z_]+\.[a-z_]+)["']""")


def _analysis_modules() -> list[Any]:
    """The layer analyzers (found by folder) and the cross-node modules that emit codes."""
    import vllmdiag.analysis.across_nodes as across_pkg

    out: list[Any] = [*analyzers(), *group_checks()]
    for info in pkgutil.iter_modules(across_pkg.__path__):
        module = importlib.import_module(f"{across_pkg.__name__}.{info.name}")
        if hasattr(module, "CODES"):
            out.append(module)
    return out


def test_every_probe_has_a_valid_spec() -> None:
    probes = discover()
    assert {"host", "processes", "sockets", "shm"} <= set(probes)
    for name, probe in probes.items():
        assert probe.spec.name == name
        assert probe.spec.layer in PROBE_LAYERS
        assert probe.spec.description
        assert 0 < probe.spec.timeout_s <= 120


def test_every_analyzer_declares_its_layer_and_codes() -> None:
    modules = _analysis_modules()
    assert modules
    for m in modules:
        assert getattr(m, "LAYER", "process") in LAYERS
        codes = m.CODES
        assert codes and all(c.count(".") == 1 for c in codes)
    assert [layer for layer, _ in layer_analyzers()][0] == "process"


def test_every_emitted_code_is_declared_and_has_a_playbook() -> None:
    books = load_playbooks()
    for m in _analysis_modules():
        declared = set(m.CODES)
        source = Path(m.__file__).read_text()
        emitted = set(EMIT.findall(source))
        assert emitted <= declared, f"{m.__name__} emits undeclared codes {emitted - declared}"
        missing = declared - set(books)
        assert not missing, f"codes without a playbook: {sorted(missing)}"


def test_playbooks_validate_and_confirm_steps_are_read_only() -> None:
    books = load_playbooks()
    assert books
    forbidden = re.compile(r"\b(rm|kill|pkill|unlink|truncate|dd|mkfs|reboot|systemctl (?:stop|restart))\b")
    for code, body in books.items():
        for cmd in body["confirm"]:
            assert not forbidden.search(cmd), f"{code}: confirm step is not read-only: {cmd}"


def test_the_fast_yaml_loader_reads_every_shipped_file_as_the_pure_python_one() -> None:
    """Rules and playbooks load with libyaml's loader when there is one (speed): the same documents."""
    import yaml

    from vllmdiag.playbooks.playbook import SAFE_LOADER

    files = sorted(resources.files("vllmdiag.playbooks").iterdir(), key=lambda e: e.name)
    texts = [f.read_text("utf-8") for f in files if f.name.endswith(".yaml")]
    assert len(texts) >= 2
    for text in texts:
        assert yaml.load(text, Loader=SAFE_LOADER) == yaml.load(text, Loader=yaml.SafeLoader)
