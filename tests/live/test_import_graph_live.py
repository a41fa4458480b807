"""The house has its doors in the right walls (docs/ARCHITECTURE.md): data flows probes -> Snapshot ->
analysis -> Report -> render, read from every ``import`` statement of the product (module level and
inside functions: a lazy import is still a door).

Rules by folder: fails on an arrow from the probes to analysis/render/sweep/gate/the CLI, from render to
analysis/sweep/gate/the CLI, from the model to anything but itself, from a derived view
(``analysis/views/``) to an analyzer or the engines, from anything to an analyzer
(``analysis/layers/<layer>/``: found by folder, never imported by hand), from anything to the simulator
(its commands come by entry point), from a library to the CLI, and on any import cycle between modules.
"""

from __future__ import annotations

from test_import_graph import cycles, graph, wrong_way  # noqa: F401 - shared with the pure half


def test_graph_sees_the_imports() -> None:
    edges = graph()
    assert "vllmdiag.model" in edges["vllmdiag.analysis.bisect"]  # module level
    assert "vllmdiag.cli.collect" in edges["vllmdiag.cli.app"]  # inside a function
    assert len(edges) > 100


def test_no_wrong_way_imports() -> None:
    assert wrong_way(graph()) == []


def test_no_import_cycles() -> None:
    assert cycles(graph(type_only=False)) == []


def test_the_checks_can_fail() -> None:
    assert wrong_way({"vllmdiag.probes.stacks": {"vllmdiag.analysis.views.progress"}}) == [
        "vllmdiag.probes.stacks -> vllmdiag.analysis.views.progress"]
    assert wrong_way({"vllmdiag.analysis.views.progress": {"vllmdiag.analysis.bisect"}}) == [
        "vllmdiag.analysis.views.progress -> vllmdiag.analysis.bisect"]
    assert wrong_way({"vllmdiag.analysis.across_nodes.analyze_nodes": {"vllmdiag.analysis.across_nodes.checks.rank_missing"}})
    hand = "vllmdiag.analysis.layers.queue.grammar"
    assert wrong_way({"vllmdiag.api": {hand}, "vllmdiag.analysis.layers.client.requests": {hand}}) == [
        f"vllmdiag.analysis.layers.client.requests -> {hand} (an analyzer is found by folder, never imported by hand)",
        f"vllmdiag.api -> {hand} (an analyzer is found by folder, never imported by hand)"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_ship_bundle_holds_the_collect_path_only() -> None:
    """What ``sweep --ship`` copies to a node: no simulator, no front end (render, sweep, gate, CLI)."""
    import io
    import zipfile

    from vllmdiag.sweep.ship import build_zipapp

    data = build_zipapp()
    names = zipfile.ZipFile(io.BytesIO(data[data.index(b"PK"):])).namelist()
    assert "vllmdiag/cli/collect.py" in names and "vllmdiag/model/report.py" in names
    assert not [n for n in names if n.startswith(("vllmdiag_sim", "vllmdiag/render/", "vllmdiag/sweep/", "vllmdiag/gate/"))]
    doors = {n for n in names if n.startswith("vllmdiag/cli/")}
    assert doors == {"vllmdiag/cli/__init__.py", "vllmdiag/cli/collect.py", "vllmdiag/cli/options.py"}, doors


if __name__ == "__main__":
    e = graph()
    print("\n".join(wrong_way(e)) or "no wrong-way imports")
    for c in cycles(graph(type_only=False)):
        print("cycle:", " <-> ".join(c))
