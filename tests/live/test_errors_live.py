"""The live tests of tests/unit/test_errors.py, which says what they check: these start something."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from test_errors import ROOT  # noqa: F401 - shared with the pure half


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
