"""The simulator's commands come by entry point (issue 36 item 3): the product imports nothing of
``vllmdiag_sim``; `demo` and `sim` are found in the ``vllmdiag.commands`` group of the installed
``vllmdiag-sim`` distribution; a broken or greedy plugin is one line and never hides the product's commands."""

from __future__ import annotations

import ast
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import pytest

from vllmdiag.cli import plugins
from vllmdiag.cli.app import OWN_COMMANDS, build_app

ROOT = Path(__file__).resolve().parents[2]
SIM = "vllmdiag_sim"
LOADERS = {"import_module", "__import__", "find_spec", "import_from_string"}


def sim_imports(source: str) -> list[int]:
    """Line numbers where ``source`` imports the simulator: statements, and loaders given its name."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""] if not node.level else []
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in LOADERS:
            names = [a.value for a in node.args[:1] if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        else:
            continue
        if any(n == SIM or n.startswith(SIM + ".") for n in names):
            lines.append(node.lineno)
    return lines


def test_the_product_imports_nothing_of_the_simulator() -> None:
    found = [f"{path.relative_to(ROOT)}:{line}" for path in sorted((ROOT / "vllmdiag").rglob("*.py"))
             for line in sim_imports(path.read_text(encoding="utf-8"))]
    assert not found, f"the product imports the simulator (its commands come by entry point): {found}"


def test_the_simulator_offers_demo_and_sim_by_entry_point() -> None:
    pytest.importorskip(SIM)
    from importlib.metadata import entry_points

    import typer

    eps = {ep.name: ep for ep in entry_points(group=plugins.GROUP)}
    assert {"demo", "sim"} <= set(eps), f"run `python3 -m pip install -e ./sim` again: {sorted(eps)}"
    assert all((dist := eps[n].dist) is not None and dist.name == "vllmdiag-sim" for n in ("demo", "sim"))
    assert callable(eps["demo"].load()) and isinstance(eps["sim"].load(), typer.Typer)


def _fake(name: str, value: str) -> EntryPoint:
    return EntryPoint(name=name, value=value, group=plugins.GROUP)


def test_a_broken_or_greedy_plugin_is_one_line_and_hides_nothing(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    broken = _fake("boom", "vllmdiag_no_such_module:thing")
    greedy = _fake("triage", "vllmdiag.cli.app:main")  # would take the product's own name
    odd = _fake("odd", "vllmdiag.cli.plugins:GROUP")  # a string: neither a command nor a group
    monkeypatch.setattr(plugins, "offered", lambda: (broken, greedy, odd))
    app = build_app(["-h"])
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3 and all(line.startswith("vllmdiag: the `") for line in err), err
    assert "`boom`" in err[0] and "ModuleNotFoundError" in err[0] and "vllmdiag has its own" in err[1], err
    assert "neither a command function nor a typer app" in err[2], err
    names = [c.name for c in app.registered_commands] + [g.name for g in app.registered_groups]
    assert set(OWN_COMMANDS) <= set(names) and not {"boom", "odd"} & set(names)
    assert names.count("triage") == 1


def test_a_product_command_reads_no_entry_point(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse() -> tuple[Any, ...]:
        raise AssertionError("looked up plugins for one of the product's own commands")

    monkeypatch.setattr(plugins, "offered", refuse)
    for command in OWN_COMMANDS:
        build_app([command, "-h"])
    with pytest.raises(AssertionError):
        build_app(["demo"])


def test_the_lookup_is_bounded_and_first_of_a_name_wins(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    many = [_fake(f"c{i}", "x:y") for i in range(plugins.MAX_COMMANDS + 8)]
    import importlib.metadata

    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [_fake("c0", "first:one"), *many])
    plugins.offered.cache_clear()
    try:
        got = plugins.offered()
    finally:
        plugins.offered.cache_clear()
    assert len(got) == plugins.MAX_COMMANDS - 1 and got[0].value == "first:one"
    assert capsys.readouterr().err.count("\n") == 1
