"""Errors in one place: every error the product raises for the user is a typed VllmdiagError with its
exit code, and only the command line turns one into a message (no matching of class names)."""

from __future__ import annotations

import ast
from pathlib import Path

from vllmdiag import errors
from vllmdiag.analysis.views.stack_match import StackRulesError
from vllmdiag.files.infile import InputError
from vllmdiag.files.outfile import OutputError
from vllmdiag.model import SnapshotError
from vllmdiag.playbooks.playbook import PlaybookError
from vllmdiag.registry import RegistryError

ROOT = Path(__file__).resolve().parents[2]


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
