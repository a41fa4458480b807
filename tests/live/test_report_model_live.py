"""The live tests of tests/unit/test_report_model.py, which says what they check: these start something."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from test_report_model import REAL, _bad, _good_report  # noqa: F401 - shared with the pure half


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vllmdiag", *args], capture_output=True, text=True, timeout=120,
                          env={"COLUMNS": "200", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(__file__).parents[2])})


def test_saved_report_is_drawn_again(tmp_path: Path) -> None:
    first = _cli("analyze", str(REAL / "snap-b-worker-tp2-stuck.json"), "--json")
    assert first.returncode == 1, first.stderr
    saved = tmp_path / "report.json"
    saved.write_text(first.stdout)
    again = _cli("analyze", str(saved), "--json")
    assert (again.returncode, again.stdout) == (1, first.stdout)
    view = _cli("analyze", str(saved), "-v")
    assert view.returncode == 1 and "BLOCKED" in view.stdout and "TP2 10/10" in view.stdout


def test_bad_report_cli_one_line_exit_2(tmp_path: Path) -> None:
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(_bad(_good_report(), ["verdict", "culprits"], [{"pid": "x"}])))
    out = _cli("analyze", str(f))
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr


def test_report_section_render_cannot_draw_keeps_the_verdict(tmp_path: Path) -> None:
    """Drawn as written, a report's probe data is not checked by analysis: a section render cannot
    draw says so in one line; the verdict and the exit code stay."""
    raw = _good_report()
    for f in raw["findings"]:
        if f["code"] == "gpu.stack_classes":
            f["evidence"] = {"stack_classes": [1]}
    raw["snapshot"]["probes"]["rings"]["data"] = {"rings": [{"name": raw["deployments"][0]["rings"][0]["name"],
                                                            "geometry": "x"}]}
    f = tmp_path / "evil.json"
    f.write_text(json.dumps(raw))
    out = _cli("analyze", str(f), "-v")
    assert out.returncode == 1 and "BLOCKED" in out.stdout and "Traceback" not in out.stderr + out.stdout
    assert "queue view not shown" in out.stdout and "gpu view not shown" in out.stdout
