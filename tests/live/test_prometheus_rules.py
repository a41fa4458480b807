"""The alert rules shipped in examples/prometheus/ (issue 34): Debian's promtool checks and tests them.

`promtool test rules` runs examples/prometheus/vllmdiag-rules.test.yml (a stall pages at once and
clears, blind for 10 minutes, the watcher down, stuck or its textfile stale, a failed gate); a copy
with the stall rule broken must fail it, so the test of the rules can fail.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

RULES = Path(__file__).resolve().parent.parent.parent / "examples" / "prometheus"
promtool = shutil.which("promtool")
pytestmark = pytest.mark.skipif(promtool is None, reason="promtool not installed (apt-get install prometheus)")


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(promtool), *args], cwd=cwd, capture_output=True, text=True, timeout=60)


def test_promtool_checks_the_rules() -> None:
    out = _run("check", "rules", "vllmdiag-rules.yml", cwd=RULES)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS: 6 rules found" in out.stdout


def test_promtool_unit_tests_pass_and_a_broken_rule_fails_them(tmp_path: Path) -> None:
    out = _run("test", "rules", "vllmdiag-rules.test.yml", cwd=RULES)
    assert out.returncode == 0, out.stdout + out.stderr
    for name in ("vllmdiag-rules.yml", "vllmdiag-rules.test.yml"):
        shutil.copy(RULES / name, tmp_path / name)
    rules = tmp_path / "vllmdiag-rules.yml"
    text = rules.read_text()
    assert text.count("(vllmdiag_deployment_stalled) == 1") == 1
    rules.write_text(text.replace("(vllmdiag_deployment_stalled) == 1", "(vllmdiag_deployment_stalled) == 2"))
    broken = _run("test", "rules", "vllmdiag-rules.test.yml", cwd=tmp_path)
    assert broken.returncode != 0 and "VllmdiagDeploymentStalled" in broken.stdout + broken.stderr


def test_the_scrape_example_is_a_valid_prometheus_config(tmp_path: Path) -> None:
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text((RULES / "scrape.yml").read_text() + "rule_files: [vllmdiag-rules.yml]\n")
    shutil.copy(RULES / "vllmdiag-rules.yml", tmp_path / "vllmdiag-rules.yml")
    out = _run("check", "config", str(cfg), cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
