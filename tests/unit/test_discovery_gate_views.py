"""Gate checks and the report's views are found by folder (issue 36: one discover() at every extension
point): the discovered sets are today's names in today's order, a view draws its layer in the terminal,
HTML and Markdown, and a new check or view is one new file, proved on a copy of the folder in tmp_path
(nothing is written into the installed package)."""

from __future__ import annotations

import importlib
import io
import re
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import vllmdiag.gate.checks as gate_checks_folder
import vllmdiag.render as render_folder
from vllmdiag import api
from vllmdiag.gate import contract
from vllmdiag.gate.config import ConfigError, GateConfig, default_yaml, parse_config
from vllmdiag.gate.junit import to_junit
from vllmdiag.gate.prom import to_prom
from vllmdiag.gate.result import NodeGateResult
from vllmdiag.gate.run import evaluate
from vllmdiag.model import LAYERS, ProbeResult, Snapshot
from vllmdiag.render import files, md_report, screen, text, views

ROOT = Path(__file__).resolve().parents[2]
CHECKS_DIR = Path(gate_checks_folder.__file__).parent
RENDER_DIR = Path(render_folder.__file__).parent
# What the hand-kept lists said before discovery (gate/config.py NODE_CHECKS, FLEET_CHECKS; text.py VIEWS).
NODE_CHECKS = ("shm_capacity", "shm_leaks", "stale_sockets", "nofile_limit", "pids_limit", "ptrace", "pyspy",
               "gpu_health", "ports", "env", "rpc_base", "url_health", "url_metrics", "url_completion")
FLEET_CHECKS = ("fleet_versions", "fleet_libnccl", "fleet_env", "fleet_shm_size")
OLD_VIEWS = ("process", "handshake", "queue", "gpu", "client", "fleet")  # process: HTML and Markdown only

DOC = ROOT / "docs" / "extending-gate-and-views.md"


def doc_file(path: str) -> str:
    """The exact file the doc's worked example shows (its code block starting ``# <path>``)."""
    for block in re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S):
        first, _, body = block.partition("\n")
        if first == f"# {path}":
            return body
    raise AssertionError(f"{DOC.name} shows no {path}")


NEW_CHECK = doc_file("vllmdiag/gate/checks/memory.py")
NEW_VIEW = doc_file("vllmdiag/render/codes_view.py")


def snap(**probes: Any) -> Snapshot:
    results = {k: ProbeResult("ok", 0.0, None, v) for k, v in probes.items()}
    return Snapshot(node="n1", collected_at="", vllmdiag_version="t", duration_s=0.1, probes=results, options={})


@pytest.fixture()
def make_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[dict[str, str], Path | None, str], str]]:
    """make(files, copy_from, keep) -> the name of a fresh importable package under tmp_path: the modules of
    ``copy_from`` matching ``keep``, then ``files`` (name -> text). Its modules leave sys.modules after."""
    monkeypatch.syspath_prepend(str(tmp_path))
    made: list[str] = []

    def make(files: dict[str, str], copy_from: Path | None = None, keep: str = "*.py") -> str:
        name = f"discovery_{tmp_path.name.replace('-', '_')}_{len(made)}"
        folder = tmp_path / name
        folder.mkdir()
        for f in copy_from.glob(keep) if copy_from else ():
            shutil.copy(f, folder / f.name)
        (folder / "__init__.py").write_text("")
        for file, body in files.items():
            (folder / file).write_text(body)
        importlib.invalidate_caches()
        made.append(name)
        return name

    yield make
    for mod in [m for m in sys.modules if any(m == n or m.startswith(n + ".") for n in made)]:
        del sys.modules[mod]


# ---- gate checks -----------------------------------------------------------------------------------------
def test_discovered_gate_checks_are_todays_names_scopes_and_order() -> None:
    assert contract.names("node", "url") == NODE_CHECKS
    assert contract.names("url") == ("url_health", "url_metrics", "url_completion")
    assert contract.names("fleet") == FLEET_CHECKS
    assert contract.all_names() == NODE_CHECKS + FLEET_CHECKS
    assert contract.default_advisory() == ("stale_sockets", "ptrace", "pyspy") == GateConfig().advisory
    assert "advisory: [stale_sockets, ptrace, pyspy]   # reported, but a fail does not fail the gate\n" in default_yaml()
    with pytest.raises(ConfigError, match=r"unknown check 'nope' \(known: shm_capacity, shm_leaks, .*, "
                                          r"url_completion, fleet_versions, fleet_libnccl, fleet_env, fleet_shm_size\)"):
        parse_config({"skip": ["nope"]})


def test_each_check_reports_under_its_declared_name() -> None:
    """A declaration and the CheckResult its run() makes say the same name (evaluate trusts the declaration
    only for a malformed-data skip): on an empty snapshot every node check skips under its own name."""
    for check in contract.checks("node", "url"):
        assert check(snap(), GateConfig()).name == check.name
    assert all(c.what for c in contract.checks("fleet"))


def test_no_module_imports_a_gate_check_by_hand() -> None:
    """Found by folder, never by name: no product module names a module of gate/checks/."""
    for path in (ROOT / "vllmdiag").rglob("*.py"):
        if CHECKS_DIR in path.parents:
            continue
        text = path.read_text(encoding="utf-8")
        assert "gate.checks." not in text and "gate.checks import" not in text, path


def test_a_new_gate_check_is_one_file(make_package: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    name = make_package({"memory.py": NEW_CHECK}, CHECKS_DIR)  # today's folder plus the doc's one file
    found = [c.name for c in contract.discover(name)]
    assert found == ["host_memory", *NODE_CHECKS, *FLEET_CHECKS]  # stage host, module `memory` before `shm`
    real = contract.discover
    monkeypatch.setattr(contract, "discover", lambda package=name: real(package))  # the gate reads that folder
    results = evaluate(snap(host={"mem_total_bytes": 100 << 30, "mem_available_bytes": 5 << 30}), GateConfig())
    mine = results[0]
    assert (mine.name, mine.status, mine.required) == ("host_memory", "warn", False)  # advisory by its declaration
    assert [r.name for r in results[1:4]] == ["shm_capacity", "shm_leaks", "stale_sockets"]
    assert GateConfig().advisory == ("host_memory", "stale_sockets", "ptrace", "pyspy")
    assert "advisory: [host_memory, stale_sockets, ptrace, pyspy]   # reported" in default_yaml()
    assert parse_config({"skip": ["host_memory"]}).skip == ("host_memory",)  # the config knows the name
    node = NodeGateResult("n1", results)  # --json, JUnit and --prom carry it with nothing more said
    assert node.to_dict()["checks"][0]["name"] == "host_memory" and node.passed
    assert '<testcase name="host_memory"' in to_junit([node]) and 'check="host_memory"' in to_prom([node], 0.0)


def test_a_broken_gate_check_module_is_said_at_once(make_package: Any) -> None:
    assert not contract.discover(make_package({"_helper.py": "X = 1\n"}))  # private to its folder: no check
    with pytest.raises(TypeError, match="needs GATE_CHECKS"):
        contract.discover(make_package({"plain.py": "X = 1\n"}))
    with pytest.raises(TypeError, match="stage in"):
        contract.discover(make_package({"memory.py": NEW_CHECK.replace('"node", "host"', '"node", "later"')}))
    with pytest.raises(TypeError, match="declared twice"):
        contract.discover(make_package({"memory.py": NEW_CHECK, "again.py": NEW_CHECK}))


# ---- render views ----------------------------------------------------------------------------------------
def test_discovered_views_are_todays_in_todays_order() -> None:
    names = [n for n, _ in views.discover()]
    assert names == [v for v in OLD_VIEWS if (RENDER_DIR / f"{v}_view.py").exists()]
    assert names == ["process", "handshake", "queue", "gpu", "client", "fleet"]  # gate/nagios/playbook draw no report
    # the terminal's -v views as before; each layer's view draws its HTML and Markdown section, in bisection order
    assert [n for n, _ in views.drawing("render")] == ["handshake", "queue", "gpu", "client", "fleet"]
    assert tuple(n for n, _ in views.drawing("html")) == LAYERS == tuple(n for n, _ in views.drawing("markdown"))
    with pytest.raises(ValueError, match="no view format 'pdf'"):
        views.drawing("pdf")


def test_the_report_files_keep_no_per_layer_drawing() -> None:
    """html_layers.py and md_report.py draw the section around a view's drawing, never a layer's own."""
    for name in ("html_layers.py", "md_report.py"):
        said = (RENDER_DIR / name).read_text(encoding="utf-8")
        assert not re.search(r"rd\.(rings|endpoints|stack_classes|gpus|http_servers)\(", said), name
        assert not re.search(r"\b(process|handshake|queue|gpu|client)_view\b", said), name  # by folder


def test_a_new_view_is_one_file(make_package: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    name = make_package({"codes_view.py": NEW_VIEW}, RENDER_DIR, "*_view.py")  # today's views plus the doc's file
    # a layer's view in the layers' order (process first), the others after them by name
    assert [n for n, _ in views.discover(name)] == ["process", "handshake", "queue", "gpu", "client", "codes", "fleet"]
    real = views.discover
    monkeypatch.setattr(views, "discover", lambda package=name: real(name))  # every format draws that folder's views
    monkeypatch.setattr(text, "VERBOSE", True)
    # a recorded snapshot analyzed now: the report carries the sections the views draw (a stored old report
    # read back with Report.from_dict has none, so its layer views would draw nothing)
    report = api.analyze_files([ROOT / "tests/data/vllm-real/snap-d-worker-tp1-sigstop.json"]).report
    codes = "codes: " + ", ".join(sorted({f.code for f in report.findings}))
    out = io.StringIO()
    screen.render_report(report, text.make_console(out))
    said = out.getvalue()
    # drawn in its place: after the layers' views (gpu: stack classes, client: HTTP), before the findings
    assert said.index("stack classes") < said.index("HTTP 127.0.0.1") < said.index(codes)
    page = files.to_html(report)  # its section after the client's, drawn by its html()
    assert page.index("data-layer='client'") < page.index(f"data-layer='codes'><h3>codes</h3><p>{codes}</p></section>")
    md = files.to_markdown(report)  # and in the Markdown report, by its markdown() (`_` escaped there)
    assert md.index("### client\n") < md.index(f"### codes\n\n{md_report.md(codes)}\n")
