"""The pure tests of tests/live/test_demo_live.py, which says what they check: these start nothing."""

from __future__ import annotations

from typing import Any

from vllmdiag_sim.demo import Injected, grade
from vllmdiag_sim.faults import EXPECTED, FAULTS


def test_every_catalog_fault_has_an_expectation() -> None:
    assert set(EXPECTED) == set(FAULTS)


def test_grading_says_missed_when_the_culprit_is_another_rank() -> None:
    inj = Injected("straggler", 3, 42, "VLLM::Worker_TP3", EXPECTED["straggler"], [], 1)
    verdict: dict[str, Any] = {"status": "blocked", "layer": "gpu",
                               "culprits": [{"role": "worker", "rank": 2, "pid": 41, "title": "VLLM::Worker_TP2"}]}
    found, why = grade(verdict, inj)
    assert not found and "TP2" in why
    verdict["culprits"][0].update(rank=3, pid=42, title="VLLM::Worker_TP3")
    assert grade(verdict, inj)[0]
    assert not grade({**verdict, "layer": "queue"}, inj)[0]
