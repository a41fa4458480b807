"""One answer per question (issue 16): the gate judges the py-spy triage runs, a JUnit suite says
failures only for what fails the gate."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from vllmdiag.context import Context
from vllmdiag.gate.junit import to_junit
from vllmdiag.gate.result import CheckResult, NodeGateResult
from vllmdiag.probes import preflight, stacks
from vllmdiag.sweep.ship import local_py_spy


def test_gate_ship_and_triage_find_the_same_py_spy(monkeypatch: pytest.MonkeyPatch) -> None:
    found = stacks.find_py_spy()
    if found is None:
        pytest.skip("no py-spy on this machine")
    # The case that disagreed: py-spy next to our Python, not on PATH (a venv run by its full path).
    monkeypatch.setenv("PATH", "/nonexistent")
    here = stacks.find_py_spy()
    info = preflight._pyspy(Context())
    assert info["path"] == here
    assert local_py_spy() == (Path(here) if here else None)
    if Path(found).parent == Path(sys.executable).parent:  # the case that disagreed before
        assert here == found and info["version"], info


def test_junit_failures_are_the_required_fails_only() -> None:
    node = NodeGateResult("n1", [CheckResult("ptrace", "pass", "ok"), CheckResult("pyspy", "fail", "missing", required=False),
                                 CheckResult("shm", "warn", "low")])
    assert node.exit_code == 0
    root = ET.fromstring(to_junit([node]))
    suite = root.find("testsuite")
    assert suite is not None and suite.get("failures") == "0" and root.get("failures") == "0"
    assert not suite.findall(".//failure")
    node.checks.append(CheckResult("shm_capacity", "fail", "too small"))
    root = ET.fromstring(to_junit([node]))
    assert root.find("testsuite").get("failures") == "1" == root.get("failures")  # type: ignore[union-attr]
    assert node.exit_code == 1
