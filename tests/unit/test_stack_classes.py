"""Stack classes are named constants (issue 16): `vllmdiag/vocab/stack_classes.py` declares every class the
rules may produce, and no module of the product compares a stack class against a bare string literal
(a renamed class would otherwise be a rule that silently stops matching)."""

from __future__ import annotations

import ast
from pathlib import Path

import yaml

from vllmdiag.analysis.views.stack_match import parse_rules
from vllmdiag.vocab import stack_classes

ROOT = Path(__file__).resolve().parents[2]
RULES_PATH = ROOT / "vllmdiag" / "playbooks" / "stack_rules.yaml"  # the shipped rules, not $VLLMDIAG_STACK_RULES
# What makes an expression "a stack class": StackClass.name, Rule.cls, StackClass.label ("collective:op"),
# a report's {"class": ...}, or a variable named like one. Anything else named "idle"/"handshake" (a
# watch state, a layer) is not a class and may stay a string.
CLASS_ATTRS = {"name", "cls", "label"}


def _is_class_expr(node: ast.expr) -> bool:
    if isinstance(node, ast.Attribute):
        return node.attr in CLASS_ATTRS
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "class"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
        return bool(node.args) and isinstance(node.args[0], ast.Constant) and node.args[0].value == "class"
    return isinstance(node, ast.Name) and node.id.lower().endswith(("class", "cls", "klass"))


def _class_literals(node: ast.expr) -> list[str]:
    """String literals among ``node`` (or its tuple/list/set elements) that name a class ("x:op" too)."""
    elts = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return [e.value for e in elts if isinstance(e, ast.Constant) and isinstance(e.value, str)
            and e.value.split(":", 1)[0] in stack_classes.ALL]


def bare_class_literals(source: str, where: str) -> list[str]:
    """`where:line: code` for each comparison/`in` test of a class-like expression against a literal class
    name, and each module-level collection made only of literal class names (a class list by hand)."""
    out = []
    tree = ast.parse(source, where)
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_is_class_expr(s) for s in sides) and any(_class_literals(s) for s in sides):
                out.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
    for stmt in tree.body:
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
            v = stmt.value
            elts = v.keys if isinstance(v, ast.Dict) else getattr(v, "elts", None)
            known = [e for e in elts or [] if e is not None]  # a dict's `**other` has the key None
            if elts and len(known) == len(elts) and len(_class_literals(ast.Tuple(elts=known))) == len(elts):
                out.append(f"{where}:{stmt.lineno}: {ast.unparse(stmt)[:100]}")
    return out


def test_every_class_the_rules_produce_is_a_constant() -> None:
    raw = yaml.safe_load(RULES_PATH.read_text(encoding="utf-8"))
    rules = parse_rules(raw, str(RULES_PATH))
    produced = {r.cls for r in rules.rules} | set(rules.precedence)
    assert produced - stack_classes.ALL == set(), "declare these in vllmdiag/vocab/stack_classes.py"
    assert stack_classes.ALL - produced == {stack_classes.UNKNOWN}, "no rule produces these any more"
    declared = {v for k, v in vars(stack_classes).items() if k.isupper() and isinstance(v, str)}
    assert declared == stack_classes.ALL  # ALL lists every constant


def test_the_scan_sees_a_bare_class_and_nothing_else() -> None:
    bad = ('def f(c, p, cls):\n    return (c.name == "idle", c.label != "collective:all_reduce",\n'
           '            p["class"] in ("executing", X), cls == "compiling", p.get("class") == "warmup")\n'
           'STEP = ("collective", "sync_point")\n')
    assert [s.split(":")[1] for s in bare_class_literals(bad, "x.py")] == ["2", "2", "3", "3", "3", "4"]
    fine = ('from vllmdiag.vocab.stack_classes import IDLE\nLAYER = "handshake"\nSTATES = ("idle", "running")\n'
            'def f(c, t):\n    return c.name == IDLE, t.state == "idle", c.op != "send"\n')
    assert bare_class_literals(fine, "y.py") == []


def test_no_module_compares_a_stack_class_with_a_bare_string() -> None:
    found = []
    for path in sorted((ROOT / "vllmdiag").rglob("*.py")):
        if path.name == "stack_classes.py":
            continue
        found += bare_class_literals(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    assert found == [], "use the constants of vllmdiag/vocab/stack_classes.py:\n" + "\n".join(found)
