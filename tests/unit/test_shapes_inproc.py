"""Offline `LLM()` at TP=1 with `VLLM_ENABLE_V1_MULTIPROCESSING=0`: no titled vLLM process at all, the
engine (InprocClient) and the UniProcExecutor's model runner run inside the user's script (issue 14).

What real vLLM 0.33 leaves visible is its compiled kernels in /proc/<pid>/maps (the wheel ships
`vllm/_C_stable_libtorch.abi3.so`, `vllm/_moe_C_stable_libtorch.abi3.so`,
`vllm/vllm_flash_attn/_vllm_fa{2,3}_C.abi3.so`; `vllm/platforms/cuda.py` imports the first at import),
its GPU device fds, NVML's compute-process list and its environment. Snapshots here carry those; the
live tests run real Python processes that map a file of that name.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path
from typing import Any

import pytest
from judged import judged

from vllmdiag.analysis.bisect import analyze
from vllmdiag.analysis.views.deployments import find_deployments
from vllmdiag.model import ProbeResult, Snapshot
from vllmdiag.probes import _inproc
from vllmdiag.probes._procfs import Stat

SITE = "/usr/local/lib/python3.12/dist-packages"
T0 = dt.datetime(2026, 11, 30, 12, 0, 0, tzinfo=dt.timezone.utc)
MAPS = (f"7f1a00000000-7f1a04000000 r-xp 00000000 08:01 11 {SITE}/torch/lib/libtorch_cuda.so\n"
        f"7f1b00000000-7f1b00400000 r--p 00000000 08:01 12 {SITE}/vllm/_C_stable_libtorch.abi3.so\n"
        f"7f1b00400000-7f1b05000000 r-xp 00400000 08:01 12 {SITE}/vllm/_C_stable_libtorch.abi3.so\n")
# The in-process engine's step as vLLM 0.33 runs it (read from the wheel): LLM.generate -> LLM._run_engine ->
# LLMEngine.step -> InprocClient.get_output -> EngineCore.step (its step_fn) -> UniProcExecutor.execute_model
# -> collective_rpc -> run_method -> Worker -> GPUModelRunner (innermost last here).
GENERATE = [("<module>", "run.py"), ("generate", "vllm/entrypoints/llm.py"), ("_run_engine", "vllm/entrypoints/llm.py"),
            ("step", "vllm/v1/engine/llm_engine.py"), ("get_output", "vllm/v1/engine/core_client.py"),
            ("step", "vllm/v1/engine/core.py"), ("execute_model", "vllm/v1/executor/uniproc_executor.py"),
            ("collective_rpc", "vllm/v1/executor/uniproc_executor.py"), ("run_method", "vllm/v1/serial_utils.py"),
            ("execute_model", "vllm/v1/worker/gpu_worker.py"), ("execute_model", "vllm/v1/worker/gpu_model_runner.py")]
WEDGED = [*GENERATE, ("_to_list", "vllm/v1/worker/gpu_model_runner.py"), ("synchronize", "torch/cuda/streams.py")]
USER_CODE = [("<module>", "run.py"), ("main", "run.py"), ("sleep", "time.py")]  # between generate() calls


# ---- probe side: what is read from /proc ---------------------------------------------------------
@pytest.mark.parametrize("path,hit", [
    (f"{SITE}/vllm/_C_stable_libtorch.abi3.so", True),
    (f"{SITE}/vllm/_moe_C_stable_libtorch.abi3.so", True),
    (f"{SITE}/vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so", True),
    ("/src/vllm/vllm/_C.abi3.so", True),  # an editable install of an older tree
    (f"{SITE}/vllm/_C_stable_libtorch.abi3.so (deleted)", True),  # reinstalled under a running script
    (f"{SITE}/torch/lib/libtorch_cuda.so", False),
    ("/home/u/vllm-tools/_helper.so", False),
    ("/usr/lib/libvllm.so", False),
    (f"{SITE}/vllm/__init__.py", False),
])
def test_extension_names_from_the_real_wheel(path: str, hit: bool) -> None:
    line = f"7f00-7f10 r-xp 00000000 08:01 42 {path}\n"
    assert bool(_inproc.extensions_in(line)) is hit


def test_maps_are_read_in_bounded_chunks_and_stop_at_the_first_hit(tmp_path: Path) -> None:
    filler = "".join(f"{i:012x}-{i + 1:012x} r--p 00000000 08:01 9 /usr/lib/libfiller{i}.so\n" for i in range(40000))
    late = tmp_path / "late"
    late.write_text(filler + MAPS)
    assert _inproc.mapped_extensions(late, limit=64 << 10) == ([], "truncated"), "past the bound: no claim, said so"
    assert _inproc.mapped_extensions(late) == ([f"{SITE}/vllm/_C_stable_libtorch.abi3.so"], "read")
    assert _inproc.mapped_extensions(tmp_path / "gone") == ([], "gone")


def test_the_scan_is_bounded_and_says_what_it_did_not_reach(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    maps = tmp_path / "1" / "maps"
    maps.parent.mkdir()
    maps.write_text(MAPS)

    def slow(proc_dir: Path) -> tuple[dict[str, Any] | None, str]:
        time.sleep(0.5 if proc_dir.name == "2" else 0.0)
        return _inproc.mapped_extensions(proc_dir / "maps")[0] and ({"x": 1}, "read") or (None, "gone")

    monkeypatch.setattr(_inproc, "evidence", slow)
    start = time.monotonic()
    got = _inproc.scan([1, 2], lambda pid: tmp_path / str(pid), budget_s=0.2)
    assert time.monotonic() - start < 0.45
    assert got == {1: ({"x": 1}, "read"), 2: (None, "unchecked")}


def test_only_python_interpreters_are_candidates() -> None:
    assert _inproc.is_python(["/usr/bin/python3.12", "run.py"]) and _inproc.is_python(["python", "-m", "x"])
    assert not _inproc.is_python(["/usr/bin/vllm", "serve"]) and not _inproc.is_python(["bash", "python"])
    assert not _inproc.is_python([])


def test_candidates_are_unselected_pythons_big_enough_to_hold_torch() -> None:
    def row(argv: list[str], vsize: int, rss: int = 0) -> dict[str, Any]:
        return {"argv": argv, "stat": Stat(vsize_bytes=vsize, rss_pages=rss)}

    table = {1: row(["python3", "run.py"], 3 << 30, 100), 2: row(["python3", "tool.py"], 30 << 20),
             3: row(["bash"], 5 << 30), 4: row(["/usr/bin/python3.12"], 1 << 30, 900), 5: row(["python3"], 9 << 30)}
    assert _inproc.candidates(table, {5}) == [4, 1]  # largest resident first; 5 is taken, 2 too small


# ---- analysis side: synthetic snapshots built like real vLLM 0.33 shows them ---------------------
def script(pid: int = 500, **extra: Any) -> dict[str, Any]:
    argv = ["/usr/bin/python3", "run.py"]
    out: dict[str, Any] = {"pid": pid, "ppid": 400, "pgid": pid, "role": None, "title": " ".join(argv), "cmdline": argv,
                           "titled": False, "name": None, "ranks": {}, "state": "S", "comm": "python3", "environ": {},
                           "selected_as": "vllm_mapped", "vllm_extensions": [f"{SITE}/vllm/_C_stable_libtorch.abi3.so"],
                           "gpu_fds": []}
    out.update(extra)
    return out


def snapshot(procs: list[dict[str, Any]], chain: list[tuple[str, str]] | None, at_s: float = 0.0,
             nvml: dict[str, Any] | None = None) -> Snapshot:
    dumps = [{"pid": p["pid"], "status": "ok",
              "threads": [{"name": "MainThread", "frames": [[f, file, 10] for f, file in reversed(chain)]}]}
             for p in procs] if chain else []
    probes = {"processes": ProbeResult("ok", 0.0, None, {"processes": procs, "parents": []}),
              "stacks": ProbeResult("ok", 0.1, None, {"dumps": dumps})}
    if nvml is not None:
        probes["nvml"] = ProbeResult("ok", 0.1, None, nvml)
    return Snapshot("n1", (T0 + dt.timedelta(seconds=at_s)).isoformat(), "", 0.5, probes)


@pytest.mark.parametrize("evidence", [
    {"gpu_fds": ["/dev/nvidia-uvm", "/dev/nvidia0", "/dev/nvidiactl"]},
    {"environ": {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}},
    {"nspid": [500, 7]},  # NVML lists the host pid; a containerised script knows itself as 7: both are found
])
def test_an_in_process_engine_is_its_own_deployment(evidence: dict[str, Any]) -> None:
    nvml = {"gpus": [{"index": 3, "processes": [{"pid": 500}]}]} if "nspid" in evidence else None
    s = snapshot([script(**evidence)], USER_CODE, nvml=nvml)
    (dep,) = find_deployments(s)
    assert (dep.kind, dep.root_pid, [p["pid"] for p in dep.engines], dep.workers) == ("offline_inprocess", 500, [500], [])
    rep = judged(s)
    assert rep.verdict.status == "healthy", rep.verdict.summary
    assert "Idle: no work in flight" in rep.verdict.summary  # never "moving": nothing was seen to move
    assert not [f for f in rep.findings if f.severity != "info"], [f.code for f in rep.findings]
    shape = next(f for f in rep.findings if f.code == "process.shape")
    assert "vllm/_C_stable_libtorch.abi3.so" in shape.message and shape.evidence["inprocess"]["extensions"]


def test_a_wedged_in_process_step_names_the_script() -> None:
    procs = [script(gpu_fds=["/dev/nvidia0"])]
    rep = judged(snapshot(procs, WEDGED, 0), snapshot(procs, WEDGED, 2), snapshot(procs, WEDGED, 4))
    v = rep.verdict
    assert (v.status, v.layer) == ("blocked", "gpu"), v.summary
    assert (v.culprits[0].pid, v.culprits[0].role) == (500, "engine_core")
    assert v.culprits[0].title == "run.py"  # what the person typed, not the interpreter's path
    assert "inside the user's script run.py (pid 500" in v.summary
    assert any(f.code == "gpu.engine_step_stuck" and f.pids == [500] for f in rep.findings)


def test_vllm_bench_throughput_in_process_is_found_and_named_as_typed() -> None:
    """`vllm bench throughput` runs LLM() offline: a console script, so argv[0] is the interpreter."""
    argv = ["/usr/bin/python3", "/usr/local/bin/vllm", "bench", "throughput", "--model", "facebook/opt-125m"]
    procs = [script(cmdline=argv, title=" ".join(argv), gpu_fds=["/dev/nvidia0"])]
    rep = judged(snapshot(procs, WEDGED, 0), snapshot(procs, WEDGED, 4))
    assert rep.verdict.culprits[0].title == "vllm bench throughput --model facebook/opt-125m"
    assert rep.verdict.status == "blocked"


def test_a_busy_engine_at_the_same_sync_point_moves_by_its_output() -> None:
    """A busy engine waits in _to_list every step: every look is the same stack. LLM.generate's tqdm bar
    (stderr, /proc/<pid>/io wchar) is what says it moves; a wedged one writes nothing."""
    def at(t: float, wchar: int) -> Snapshot:
        return snapshot([script(gpu_fds=["/dev/nvidia0"], io={"wchar": wchar, "syscw": wchar // 40})], WEDGED, t)

    busy = judged(at(0, 4000), at(2, 4400), at(4, 4800))
    assert busy.verdict.status == "healthy", busy.verdict.summary
    assert "the script (pid 500) wrote 800 bytes" in busy.verdict.summary
    wedged = judged(at(0, 4000), at(2, 4000), at(4, 4000))
    assert (wedged.verdict.status, wedged.verdict.culprits[0].pid) == ("blocked", 500), wedged.verdict.summary


def test_a_step_that_moves_is_not_a_hang() -> None:
    procs = [script(gpu_fds=["/dev/nvidia0"])]
    moving = [*GENERATE, ("_model_forward", "vllm/v1/worker/gpu_model_runner.py")]
    rep = judged(snapshot(procs, WEDGED, 0), snapshot(procs, moving, 4))
    assert rep.verdict.status == "healthy", rep.verdict.summary


def test_a_stopped_in_process_engine_is_blocked_at_the_process_layer() -> None:
    rep = judged(snapshot([script(gpu_fds=["/dev/nvidia0"], state="T")], None))
    v = rep.verdict
    assert (v.status, v.layer, v.culprits[0].pid) == ("blocked", "process", 500), v.summary


@pytest.mark.parametrize("proc", [
    script(),  # imported vLLM's kernels, no GPU, no in-process setting: a tool, a test, a notebook cell
    script(vllm_extensions=[]),  # an old or odd entry without the evidence
    script(selected_as=None, gpu_fds=["/dev/nvidia0"]),  # an unselected untitled Python (pre-issue-14 snapshots)
    script(gpu_fds=["/dev/nvidiactl", "/dev/nvidia-uvm"]),  # control devices only: no GPU of its own
])
def test_a_python_without_engine_evidence_is_never_a_deployment(proc: dict[str, Any]) -> None:
    s = snapshot([proc], USER_CODE)
    assert find_deployments(s) == []
    assert analyze([s]).verdict.status == "no-deployment"


def test_no_deployment_says_which_pythons_could_not_be_checked() -> None:
    s = snapshot([], None)
    s.probes["processes"].data["inprocess_scan"] = {"candidates": 3, "unreadable_pids": [700, 701], "truncated_pids": []}
    v = analyze([s]).verdict
    assert v.status == "no-deployment"
    assert "could not read the memory maps of 2 Python process(es) (pid 700, 701" in v.summary
    assert v.next_steps and "root" in v.next_steps[0]
    s.probes["processes"].data["inprocess_scan"] = {"candidates": 3, "unreadable_pids": [], "unchecked_pids": [702]}
    assert "ran out of time before reading the maps of 1 Python process(es) (pid 702)" in analyze([s]).verdict.summary
    s.probes["processes"].data["inprocess_scan"] = {"candidates": 3, "unreadable_pids": [], "truncated_pids": []}
    assert analyze([s]).verdict.summary == "No vLLM deployment found on n1."


def test_old_real_snapshots_analyze_the_same() -> None:
    """Snapshots from before this evidence existed have no ``vllm_mapped`` entries: same verdicts."""
    for name, status in (("snap-a-healthy.json", "healthy"), ("snap-b-worker-tp2-stuck.json", "blocked")):
        data = json.loads((Path(__file__).parent.parent / "data" / "vllm-real" / name).read_text())
        rep = analyze([Snapshot.from_dict(data)])
        assert rep.verdict.status == status
        assert all(d.kind != "offline_inprocess" for d in find_deployments(Snapshot.from_dict(data)))
