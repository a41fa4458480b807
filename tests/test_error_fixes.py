"""Every typed error says what to do (its ``fix``), and the CLI's one error line carries it: no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import vllmdiag.analysis.views.stack_match
import vllmdiag.files.infile
import vllmdiag.files.outfile
import vllmdiag.gate.config
import vllmdiag.model
import vllmdiag.playbooks.playbook
import vllmdiag.registry  # noqa: F401  (each module defines one error class)
from vllmdiag.errors import BadInput, VllmdiagError, one_line

ROOT = Path(__file__).resolve().parents[1]


def _classes(cls: type) -> list[type]:
    subs: list[type] = cls.__subclasses__()  # typeshed gives a bare `type` list[type[Never]]
    return [cls] + [c for sub in subs for c in _classes(sub)]


def test_every_error_class_carries_its_own_one_line_fix() -> None:
    classes = _classes(VllmdiagError)
    assert len(classes) >= 10  # the base, BadInput, Unreachable and the seven BadInputs of the libraries
    for cls in classes:
        fix = cls.__dict__.get("fix")
        assert isinstance(fix, str) and fix and "\n" not in fix and len(fix) < 130, cls


def test_the_error_line_ends_with_the_fix_unless_the_message_gives_one() -> None:
    assert one_line(BadInput("bad --budget 'x'\nmore")) == f"bad --budget 'x' (fix: {BadInput.fix})"
    assert one_line(BadInput("no such node; fix: add it to the inventory")) == "no such node; fix: add it to the inventory"


def test_the_cli_prints_the_fix_on_its_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "snap.json"
    bad.write_text("{not json")
    out = subprocess.run([sys.executable, "-m", "vllmdiag", "analyze", str(bad)], capture_output=True, text=True,
                         timeout=120, cwd=ROOT)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].endswith(")") and "(fix: " in lines[0], out.stderr
