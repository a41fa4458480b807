"""Worked example: a new finding with a second-look hook is one new analyzer module (plus its playbook
entry in ``vllmdiag/playbooks/<layer>.yaml``, and a stack rule in ``stack_rules.yaml`` only if it needs a
new picture): at most 3 product files. Nothing else names it -- the engine (``analysis/bisect.py``),
the second look and the confirm window (``analysis/contract.py``, ``api.py``) find it by folder.

The module is written to a private temp dir added to the gpu layer's package path, so the test proves
discovery on a real import without writing into the product tree."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import vllmdiag.analysis.layers.gpu as gpu_layer
from vllmdiag.analysis import contract
from vllmdiag.analysis.bisect import analyze
from vllmdiag.model import Snapshot

SNAP = Path(__file__).parent.parent / "data" / "vllm-real" / "snap-g-output-rank-stuck.json"
NAME = "widget_stuck_example"
MODULE = '''
"""A worked example analyzer: every EngineCore is a suspect worth a second look."""

from __future__ import annotations

from vllmdiag.analysis.facts import Facts
from vllmdiag.analysis.findings import finding
from vllmdiag.model import Finding

LAYER = "gpu"
CODES = ("gpu.widget_stuck",)


def analyze(facts: Facts) -> list[Finding]:
    return [finding("gpu.widget_stuck", LAYER, "info", facts.snapshot, d, "widget seen", [], {}, [])
            for d in facts.deployments]


def second_look_pids(facts: Facts) -> list[int]:
    return [e["pid"] for d in facts.deployments for e in d.engines]


def keeps_window_open(facts: Facts, deployment_ids: set[str]) -> bool:
    return bool(deployment_ids)
'''


@pytest.fixture
def new_analyzer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    (tmp_path / f"{NAME}.py").write_text(MODULE, encoding="utf-8")
    monkeypatch.setattr(gpu_layer, "__path__", [*gpu_layer.__path__, str(tmp_path)])
    contract.analyzers.cache_clear()
    yield f"{gpu_layer.__name__}.{NAME}"
    contract.analyzers.cache_clear()
    sys.modules.pop(f"{gpu_layer.__name__}.{NAME}", None)


def test_a_new_analyzer_with_hooks_is_found_by_folder(new_analyzer: str) -> None:
    snap = Snapshot.from_dict(json.loads(SNAP.read_text()))
    assert new_analyzer in {m.__name__ for m in contract.analyzers()}
    assert "gpu.widget_stuck" in {f.code for f in analyze([snap]).findings}
    engines = {p["pid"] for p in snap.data("processes")["processes"] if p.get("role") == "engine_core"}
    assert engines and engines <= set(contract.second_look_pids(snap))
    assert contract.keeps_window_open(snap, {"any"}) and not contract.keeps_window_open(snap, set())


def test_the_hook_is_what_adds_them() -> None:
    """Without the new module the engines are not asked for (so the test above proves its hook)."""
    contract.analyzers.cache_clear()
    snap = Snapshot.from_dict(json.loads(SNAP.read_text()))
    engines = {p["pid"] for p in snap.data("processes")["processes"] if p.get("role") == "engine_core"}
    assert engines and not engines & set(contract.second_look_pids(snap))
    assert not contract.keeps_window_open(snap, {"any"})


def test_without_it_nothing_is_left_behind() -> None:
    contract.analyzers.cache_clear()
    assert not any(m.__name__.endswith(NAME) for m in contract.analyzers())
