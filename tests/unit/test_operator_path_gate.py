"""The pure tests of tests/live/test_operator_path_gate_live.py, which says what they check: these start nothing."""

from __future__ import annotations

from vllmdiag.gate.result import CheckResult, NodeGateResult
from vllmdiag.render.nagios_view import plugin_line


def _node(*checks: tuple[str, str, bool]) -> NodeGateResult:
    return NodeGateResult("gpu07", [CheckResult(n, s, f"{n} said {s}", required=r) for n, s, r in checks])


def test_plugin_states_follow_the_nagios_guidelines() -> None:
    assert plugin_line(_node(("shm", "pass", True)))[1] == 0
    assert plugin_line(_node(("shm", "pass", True), ("pyspy", "fail", False)))[1] == 1  # advisory: WARNING
    assert plugin_line(_node(("shm", "warn", True)))[1] == 1
    line, code = plugin_line(_node(("shm", "fail", True), ("gpu", "skip", True), ("env", "warn", True)))
    assert code == 2 and line.startswith("VLLMDIAG GATE CRITICAL - gpu07: required check(s) failed: shm")
    assert plugin_line(_node(("shm", "pass", True), ("gpu", "skip", True)))[1] == 3
    hostile = NodeGateResult("n|1\nx", [CheckResult("a", "fail", "why | pipe\nline", required=True)])
    line, _ = plugin_line(hostile)
    assert "\n" not in line and line.count("|") == 1  # the only | starts the perfdata
