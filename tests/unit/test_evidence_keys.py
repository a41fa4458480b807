"""Evidence keys stay with the analyzer that writes them (issue 36 item 1).

A finding's ``evidence`` is what the JSON shows; a module that reads a key some other module writes depends on
that module's wording without a type saying so. Such reads go through typed ``Finding`` fields
(model/verdict.py: filled from the evidence, so the JSON stays as it was) or through ``analysis/facts.py``.

The check reads the source: a key is *written* by a module when it appears there as a dict-literal key, a
keyword of ``.update(...)``/``dict(...)``, or an ``evidence["key"] = ...`` store; it is *read* by a module
through ``<x>.evidence.get("key")``, ``<x>.evidence["key"]``, ``"key" in <x>.evidence``, or the same on a name
bound to an expression holding ``.evidence`` (``seen = progress.evidence``, ``ev = dict(f.evidence)``).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent / "vllmdiag"
SCANNED = [*sorted((ROOT / "analysis").rglob("*.py")), ROOT / "api.py", *sorted((ROOT / "watch").rglob("*.py"))]
# key -> why a module other than its writer may still read it.
ALLOWED: dict[str, str] = {
    "stack_classes": "gpu.stack_classes's rank table (lists of dicts): sections.py copies it whole into the report's "
                     "stack rows; typing it belongs to the report model, not to Finding",
    "others": "the same table's processes outside the ranks (gpu.stack_classes), copied whole by sections.py",
}


def _holds_evidence(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr == "evidence" for n in ast.walk(node))


def _is_evidence(node: ast.AST, aliases: set[str]) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "evidence") or \
        (isinstance(node, ast.Name) and node.id in aliases)


def _const(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _aliases(tree: ast.AST) -> set[str]:
    return {t.id for n in ast.walk(tree) if isinstance(n, ast.Assign) and _holds_evidence(n.value)
            for t in n.targets if isinstance(t, ast.Name)}


def writes(tree: ast.AST) -> set[str]:
    out: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Dict):
            out.update(k for k in map(_const, n.keys) if k)
        elif isinstance(n, ast.Call) and (isinstance(n.func, ast.Attribute) and n.func.attr == "update"
                                          or isinstance(n.func, ast.Name) and n.func.id == "dict"):
            out.update(k.arg for k in n.keywords if k.arg)
        elif isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Store) and _const(n.slice):
            out.add(str(_const(n.slice)))
    return out


def reads(tree: ast.AST) -> set[str]:
    aliases, out = _aliases(tree), set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "get" \
                and _is_evidence(n.func.value, aliases) and n.args and _const(n.args[0]):
            out.add(str(_const(n.args[0])))
        elif isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Load) and _is_evidence(n.value, aliases) \
                and _const(n.slice):
            out.add(str(_const(n.slice)))
        elif isinstance(n, ast.Compare) and any(isinstance(o, (ast.In, ast.NotIn)) for o in n.ops) \
                and _const(n.left) and any(_is_evidence(c, aliases) for c in n.comparators):
            out.add(str(_const(n.left)))
    return out


def read_outside(paths: list[Path]) -> dict[str, list[str]]:
    """key -> the modules that read it without writing it."""
    trees = {p: ast.parse(p.read_text(), str(p)) for p in paths}
    out: dict[str, list[str]] = {}
    for p, tree in trees.items():
        for key in sorted(reads(tree) - writes(tree)):
            out.setdefault(key, []).append(str(p.relative_to(ROOT.parent)) if p.is_relative_to(ROOT.parent) else p.name)
    return out


def test_no_evidence_key_is_read_outside_its_writer() -> None:
    outside = {k: v for k, v in read_outside(SCANNED).items() if k not in ALLOWED}
    assert outside == {}, f"read through Finding fields or Facts instead: {outside}"


def test_allow_list_is_still_needed() -> None:
    # A reason that no longer applies is dropped rather than kept as a standing exemption.
    assert set(ALLOWED) <= set(read_outside(SCANNED))


def test_the_check_sees_each_way_of_reading(tmp_path: Path) -> None:
    src = tmp_path / "reader.py"
    src.write_text("def f(x, p):\n    seen = p.evidence if p else {}\n    ev = dict(x.evidence)\n"
                   "    return x.evidence.get('a'), x.evidence['b'], 'c' in x.evidence, seen.get('d'), ev['e']\n")
    writer = tmp_path / "writer.py"
    writer.write_text("def g(f):\n    f.evidence['b'] = 1\n    return {'a': f.evidence['b']}\n")
    assert read_outside([src, writer]) == {k: ["reader.py"] for k in "abcde"}  # the writer reads its own 'b'


def test_typed_fields_follow_the_evidence_and_the_json_stays_it() -> None:
    import dataclasses

    from vllmdiag.model.verdict import Finding

    ev = {"needs_confirm": False, "observed": "ranks at all_reduce", "window_s": 12.5,
          "progress": {"moved": True, "blind": ["x"]}, "nodes": ["a", "b"], "ring": None, "readers": [2, 0]}
    f = Finding("gpu.stall_suspected", "gpu", "warning", "a", "m", evidence=dict(ev))
    assert (f.observed, f.window_s, f.moved, f.nodes, f.ring, f.readers) == \
        ("ranks at all_reduce", 12.5, True, ["a", "b"], "None", [2, 0])
    assert f.blind == [] and not f.confirmed_by_resample  # blind: gpu.progress's own key, not its progress's
    assert list(f.to_dict()["evidence"].items()) == list(ev.items())  # same keys, same order, nothing added
    f.add_evidence(window_s=3.0, confirmed_by_resample=True)
    assert (f.window_s, f.confirmed_by_resample, list(f.to_dict()["evidence"])[-1]) == (3.0, True, "confirmed_by_resample")
    g = dataclasses.replace(f, evidence={"moved": False, "starting": True})
    assert (g.moved, g.starting, g.window_s, g.nodes, g.ring) == (False, True, 0.0, [], None)
    assert Finding.from_dict(f.to_dict()) == f  # a report read back types the same
