"""The order analyzers run in (analysis/contract.py, PRECEDENCE): bisect writes a verdict from the first
findings, so this order is part of every verdict's wording. Pinned to the order they ran in when it was a
number per module (ORDER = n), so naming it changed nothing."""

from __future__ import annotations

import types

import pytest

from vllmdiag.analysis import contract
from vllmdiag.model import LAYERS

BEFORE = [  # (layer, module) as ORDER = n, then name, ran them
    ("process", "paused"), ("process", "liveness"),
    ("handshake", "starting"), ("handshake", "startup"),
    ("queue", "ring_flow"), ("queue", "engine_loop"), ("queue", "grammar"), ("queue", "kv_connector"),
    ("queue", "ring_rates"),
    ("gpu", "ranks"), ("gpu", "dp_world"), ("gpu", "parallel_groups"), ("gpu", "kernel_errors"), ("gpu", "lone_rank"),
    ("gpu", "foreign_pids"), ("gpu", "stall"),
    ("client", "requests"), ("client", "token_rates"),
]


def test_the_analyzers_run_in_the_order_they_always_ran() -> None:
    contract.analyzers.cache_clear()
    assert [tuple(m.__name__.rsplit(".", 2)[-2:]) for m in contract.analyzers()] == BEFORE
    assert [m.__name__.rsplit(".", 1)[-1] for m in contract.group_checks()] == ["rank_missing", "collective_odd"]


def test_no_module_keeps_a_number_for_its_place() -> None:
    for module in (*contract.analyzers(), *contract.group_checks()):
        assert not hasattr(module, "ORDER"), f"{module.__name__}: its place is named in contract.PRECEDENCE"


def _mod(name: str) -> types.ModuleType:
    return types.ModuleType(f"vllmdiag.analysis.layers.queue.{name}")


def test_an_unnamed_module_runs_after_the_named_ones_by_name_and_a_stale_name_is_a_bug() -> None:
    zed, alpha, first, second = _mod("zed"), _mod("alpha"), _mod("first"), _mod("second")
    assert contract.in_precedence([zed, second, alpha, first], ("first", "second")) == [first, second, alpha, zed]
    with pytest.raises(TypeError, match="gone"):
        contract.in_precedence([first], ("first", "gone"))


def test_a_layer_folder_without_a_place_in_the_flow_is_a_bug(monkeypatch: pytest.MonkeyPatch) -> None:
    """A new layer is a folder under analysis/layers/ plus its place in model.LAYERS (bisect walks them in
    order); a folder whose place was never given is said at once, not silently never run."""
    assert sorted(contract.layer_folders()) == sorted(LAYERS)
    monkeypatch.setattr(contract, "layer_folders", lambda: [*LAYERS, "network"])
    contract.analyzers.cache_clear()
    try:
        with pytest.raises(TypeError, match=r"layers\.network: a layer folder needs its place in vllmdiag\.model\.LAYERS"):
            contract.analyzers()
    finally:
        monkeypatch.undo()
        contract.analyzers.cache_clear()
    assert len(contract.analyzers()) >= 18
