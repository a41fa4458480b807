"""Errors in one place: every error the product raises for the user is a typed VllmdiagError with its
exit code, and only the command line turns one into a message (no matching of class names)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from vllmdiag import errors
from vllmdiag.analysis.views.stack_match import StackRulesError
from vllmdiag.files.infile import InputError
from vllmdiag.files.outfile import OutputError
from vllmdiag.model import SnapshotError
from vllmdiag.playbooks.playbook import PlaybookError
from vllmdiag.registry import RegistryError

ROOT = Path(__file__).resolve().parents[1]


def test_bad_input_kinds_are_one_class_with_exit_2() -> None:
    for cls in (SnapshotError, StackRulesError, PlaybookError, RegistryError, InputError, OutputError):
        assert issubclass(cls, errors.BadInput), cls
        assert cls("x").exit_code == errors.EXIT_USAGE == 2
    assert errors.Unreachable("x").exit_code == errors.EXIT_INCONCLUSIVE == 4


def test_cli_never_matches_errors_by_name() -> None:
    for path in (ROOT / "vllmdiag").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        by_name = [n for n in ast.walk(tree) if isinstance(n, ast.Compare) and isinstance(n.left, ast.Attribute)
                   and n.left.attr == "__name__" and isinstance(n.left.value, ast.Call)]  # type(exc).__name__ == ...
        assert not by_name, f"{path}: an error matched by its class name"


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vllmdiag", *args], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), **(env or {})})


def test_typed_errors_reach_the_user_as_one_line_and_their_code(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text("rules: [{class: broken}]\n")
    for args, env in ((("triage", "--probe", "nope", "--json"), None), (("collect", "--probe", "nope"), None),
                      (("analyze", str(ROOT / "tests/data/vllm-real/snap-b-worker-tp2-stuck.json")),
                       {"VLLMDIAG_STACK_RULES": str(rules)})):
        out = _run(*args, env=env)
        assert out.returncode == 2, (args, out.stdout[-300:], out.stderr)
        assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
