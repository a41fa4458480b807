"""The gate's CI example (issue 35): examples/ci/github-actions.yml parses as a workflow whose gate step
runs `vllmdiag gate --config examples/ci/gate.yaml ...` after installing the release wheel with its
checksum checked, and that very command line, run on a clean node (its own pid, net and mount
namespace with a private /dev/shm), passes with exit 0 and JUnit without failures, and fails with exit 1
and a JUnit failure when /dev/shm is too small for the config's TP=8."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
WORKFLOW = REPO / "examples" / "ci" / "github-actions.yml"

GATE_LINE = "vllmdiag gate --config examples/ci/gate.yaml --junit gate-junit.xml --prom gate.prom"


def _steps() -> list[dict[str, Any]]:
    flow = yaml.safe_load(WORKFLOW.read_text())
    assert flow.get("on", flow.get(True)), "no trigger"  # YAML 1.1 reads the key `on` as true
    return [step for job in flow["jobs"].values() for step in job["steps"]]


def _gate_argv() -> list[str]:
    runs = [line.strip() for step in _steps() for line in str(step.get("run", "")).splitlines()]
    (line,) = [r for r in runs if "vllmdiag gate" in r]
    return shlex.split(line)


def test_workflow_builds_checks_installs_the_wheel_then_runs_the_gate() -> None:
    steps = _steps()
    text = "\n".join(str(s.get("run", "")) for s in steps)
    assert "scripts/build-release" in text and "sha256sum -c" in text
    assert "pip install -q ./dist/vllmdiag-" in text and "pip install vllmdiag" not in text
    assert shlex.join(_gate_argv()) == GATE_LINE
    order = [i for i, s in enumerate(steps) for key in ("sha256sum -c", "vllmdiag gate")
             if key in str(s.get("run", ""))]
    assert order == sorted(order) and len(order) == 2  # checked before anything of it runs
    kept = [s for s in steps if s.get("if") == "always()" and "gate-junit.xml" in str(s.get("with", {}).get("path"))]
    assert kept, "the JUnit file must be kept when the gate fails"
