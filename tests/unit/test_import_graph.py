"""The pure tests of tests/live/test_import_graph_live.py, which says what they check: these start nothing."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = "vllmdiag"
# None: `vllmdiag demo`/`sim` come from the simulator's distribution by entry point (vllmdiag/cli/plugins.py).
SIM_ENTRY: set[str] = set()


def is_face(module: str) -> bool:
    """The doors: the ``vllmdiag/cli/`` package (every command) and ``__main__``. A door may import
    anything; nothing else imports a door."""
    return module == "vllmdiag.__main__" or _under(module, "vllmdiag.cli")


FORBIDDEN = {
    # (importer prefix, imported prefixes it must never reach)
    "vllmdiag.probes": ("vllmdiag.analysis", "vllmdiag.render", "vllmdiag.sweep", "vllmdiag.gate", "vllmdiag.cli",
                        "vllmdiag.api", "vllmdiag.runtime.runner"),
    "vllmdiag.render": ("vllmdiag.analysis", "vllmdiag.sweep", "vllmdiag.gate", "vllmdiag.cli", "vllmdiag.api",
                        "vllmdiag.probes", "vllmdiag.runtime.runner"),
    "vllmdiag.model": tuple(f"vllmdiag.{p}" for p in ("analysis", "render", "sweep", "gate", "cli", "api", "probes",
                                                       "runner", "context", "playbook", "registry")),
    "vllmdiag.analysis": ("vllmdiag.render", "vllmdiag.sweep", "vllmdiag.gate", "vllmdiag.cli", "vllmdiag.api",
                          "vllmdiag.probes", "vllmdiag.runtime.runner"),
    # A view is derived data, never a finding: it reads views, the model and the stack rules only.
    "vllmdiag.analysis.views": tuple(f"vllmdiag.analysis.{p}" for p in ("layers", "across_nodes", "bisect", "contract",
                                                                        "report_model", "verdict_writer")),
    "vllmdiag.api": ("vllmdiag.render", "vllmdiag.sweep", "vllmdiag.gate", "vllmdiag.cli"),
    "vllmdiag.sweep": ("vllmdiag.render", "vllmdiag.cli"),
    "vllmdiag.gate": ("vllmdiag.render", "vllmdiag.sweep", "vllmdiag.cli"),
}
# analysis/contract.py finds these by folder: the layer analyzers and the cross-node group checks
ANALYZERS = ("vllmdiag.analysis.layers", "vllmdiag.analysis.across_nodes.checks")
# Cross-node analyzers that are not checks/ (modules there that declare CODES): analyze_nodes calls these
# by name, each for the reason given (docs/ARCHITECTURE.md, "Cross-node analysis"). Any other would be a
# check that skipped the folder.
ENGINE_STEPS = {
    "vllmdiag.analysis.across_nodes.uniform_hang": "runs after the group checks, only on a Ray group where they found "
    "nothing odd, and replaces each node's share's gpu.stall_suspected: a step of the join, not one more check",
    "vllmdiag.analysis.across_nodes.dp_world_joined": "reads every node's deployments at once (DP ranks that are "
    "separate `vllm serve` per node form no rank group) and replaces node-local codes (REPLACED)",
    "vllmdiag.analysis.across_nodes.headless_share": "edits every node's findings of a group spanning nodes "
    "(a headless node's executor is no EngineCore gone, its start-up ends when the engine's node is ready): a step "
    "of the join, not one more check",
    "vllmdiag.analysis.across_nodes.pipeline_stages": "runs only where the engine's node watched nothing move and "
    "replaces its gpu.stall_suspected with the stage held on another node: a step of the join",
}
# Known edges that wait for another change to land, each with the reason. Empty is the goal.
ALLOWED: set[tuple[str, str]] = set()


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(importer: str, is_pkg: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = importer.split(".") if is_pkg else importer.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _type_only(tree: ast.AST) -> set[int]:
    """ids of the import nodes under ``if TYPE_CHECKING:``: annotations only, never run."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            out.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return out


def imports_of(path: Path, known: set[str], type_only: bool = True) -> set[str]:
    """Every module of ours this file imports (``from pkg import mod`` names the module ``pkg.mod``);
    ``type_only=False`` leaves out the imports under ``if TYPE_CHECKING:``."""
    importer = module_name(path)
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    skip = set() if type_only else _type_only(tree)
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(importer, path.name == "__init__.py", node)
            subs = {f"{target}.{alias.name}" for alias in node.names} & known
            out.update(subs or {target})
    ours = {m for m in out if m.split(".")[0] in (PRODUCT, "vllmdiag_sim")}
    # Importing a package's own parent (``vllmdiag.model.report`` runs ``vllmdiag.model``) is not an arrow.
    return {m for m in ours if m != importer and not importer.startswith(m + ".")}


def graph(type_only: bool = True) -> dict[str, set[str]]:
    """module -> the modules of ours it imports. Wrong-way arrows count type-only imports too (a type
    is a dependency); cycles are checked on what runs (``type_only=False``)."""
    files = sorted((ROOT / PRODUCT).rglob("*.py"))
    known = {module_name(f) for f in files}
    out: dict[str, set[str]] = {}
    for f in files:
        if "__pycache__" in f.parts:
            continue
        out[module_name(f)] = imports_of(f, known, type_only)
    return out


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def wrong_way(edges: dict[str, set[str]]) -> list[str]:
    bad = []
    for src, targets in sorted(edges.items()):
        for dst in sorted(targets):
            if (src, dst) in ALLOWED:
                continue
            if is_face(src):
                if dst.split(".")[0] == "vllmdiag_sim" and src not in SIM_ENTRY:
                    bad.append(f"{src} -> {dst} (the product never imports the simulator: its commands come by entry point)")
                continue
            for prefix, forbidden in FORBIDDEN.items():
                if _under(src, prefix) and any(_under(dst, f) for f in forbidden):
                    bad.append(f"{src} -> {dst}")
            if any(_under(dst, a) for a in ANALYZERS):
                bad.append(f"{src} -> {dst} (an analyzer is found by folder, never imported by hand)")
            if dst.split(".")[0] == "vllmdiag_sim":
                bad.append(f"{src} -> {dst} (the product never imports the simulator: its commands come by entry point)")
            if is_face(dst):
                bad.append(f"{src} -> {dst} (a library never imports the command line)")
    return bad


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative enough for ~150 nodes)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if (v, w) in ALLOWED or w not in edges:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_every_module_in_a_layer_folder_is_an_analyzer_and_no_view_is() -> None:
    """``analysis/layers/<layer>/`` holds analyzers only (LAYER = its folder, CODES, analyze); a view
    (``analysis/views/``) declares no codes and emits no finding; every analyzer is discovered."""
    from vllmdiag.analysis.contract import analyzers
    from vllmdiag.model import LAYERS

    layers = ROOT / PRODUCT / "analysis" / "layers"
    assert sorted(p.name for p in layers.iterdir() if p.is_dir() and p.name != "__pycache__") == sorted(LAYERS)
    files = {f"{PRODUCT}.analysis.layers.{f.parent.name}.{f.stem}" for f in layers.glob("*/*.py") if f.stem != "__init__"}
    assert {m.__name__ for m in analyzers()} == files
    for f in (ROOT / PRODUCT / "analysis" / "views").glob("*.py"):
        names = {t.id for n in ast.parse(f.read_text(encoding="utf-8")).body if isinstance(n, ast.Assign)
                 for t in n.targets if isinstance(t, ast.Name)}
        defs = {n.name for n in ast.parse(f.read_text(encoding="utf-8")).body if isinstance(n, ast.FunctionDef)}
        assert not ({"CODES", "LAYER"} & names or "analyze" in defs), f"{f.name} is a view: it makes no finding"


if __name__ == "__main__":
    e = graph()
    print("\n".join(wrong_way(e)) or "no wrong-way imports")
    for c in cycles(graph(type_only=False)):
        print("cycle:", " <-> ".join(c))


def test_cross_node_analyzers_outside_checks_are_exactly_the_named_engine_steps() -> None:
    folder = ROOT / "vllmdiag" / "analysis" / "across_nodes"
    declaring = {module_name(p) for p in folder.glob("*.py") if "CODES" in _top_level_names(p)}
    assert declaring == set(ENGINE_STEPS), "a cross-node analyzer outside checks/: make it a check (CODES, check_group)"
    assert all(len(why) > 40 for why in ENGINE_STEPS.values())


def _top_level_names(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


# What render may never reach (issue 36 item 1): every renderer is a function of the report's sections.
SNAPSHOT_NAMES = {"Snapshot", "ProbeResult"}
SNAPSHOT_ATTRS = {"snapshots", "snapshot", "probes"}  # Report.snapshots, a fleet node's snapshot, its probes
PROBE_CALLS = {"data", "probe"}  # Snapshot.data(name), a probe's result
SNAPSHOT_KEYS = {"snapshot", "snapshots", "probes"}  # the same read from a report's dict


def _key(node: ast.AST) -> str | None:
    """The string a subscript or a ``.get(...)`` call reads (``d["probes"]``, ``d.get("probes")``)."""
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
        return node.slice.value
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" and node.args
            and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
        return node.args[0].value
    return None


def snapshot_reads(path: Path, where: str | None = None) -> list[str]:
    """Where one module reads the snapshot: imports it, reads a report's snapshots or a probe's data."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    where = where or str(path.relative_to(ROOT))
    bad = []
    for node in ast.walk(tree):
        line = f"{where}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = {a.name for a in node.names} | {getattr(node, "module", None) or ""}
            if names & SNAPSHOT_NAMES or any(_under(n, "vllmdiag.model.snapshot") for n in names):
                bad.append(f"{line} imports the snapshot")
        elif isinstance(node, ast.Attribute) and node.attr in SNAPSHOT_ATTRS:
            bad.append(f"{line} reads .{node.attr}")
        elif isinstance(node, ast.Name) and node.id in SNAPSHOT_NAMES:
            bad.append(f"{line} names {node.id}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in PROBE_CALLS:
            bad.append(f"{line} calls .{node.func.attr}() (a probe's data)")
        if _key(node) in SNAPSHOT_KEYS:
            bad.append(f"{line} reads [{_key(node)!r}]")
    return bad


def test_render_never_reads_the_snapshot() -> None:
    """A renderer formats the report (``to_dict``/``render_dict`` and ``Report.sections``); what it shows of
    a node's probes analysis put in the node's section (analysis/sections.py), so a saved report draws the
    same and no second reading of the probes hides in render."""
    files = sorted(p for p in (ROOT / PRODUCT / "render").rglob("*.py") if "__pycache__" not in p.parts)
    assert len(files) > 10
    assert [bad for f in files for bad in snapshot_reads(f)] == []


def test_the_snapshot_rule_sees_reads(tmp_path: Path) -> None:
    """The rule catches each way of reading the snapshot (it must be able to fail)."""
    probe = tmp_path / "render_probe.py"
    probe.write_text("from vllmdiag.model import Snapshot\nfrom vllmdiag.model.snapshot import ProbeResult\n"
                     "def f(report, d, snap):\n    report.snapshots\n    snap.data('rings')\n    d.get('probes')\n"
                     "    d['snapshot']\n    node.probe('nvml')\n")
    found = snapshot_reads(probe, "render_probe.py")
    assert len(found) == 7, found
