"""The live tests of tests/unit/test_inside_pod.py, which says what they check: these start something."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
FAKE_NVML = Path(__file__).parent.parent / "fake_nvml"

pytestmark = pytest.mark.timeout(90)
in_a_pod = [pytest.mark.root, pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("nsenter"),
                                                 reason="needs root, unshare and nsenter (a PID + mount namespace)")]


def needs_pod(fn: Any) -> Any:
    for mark in in_a_pod:
        fn = mark(fn)
    return fn


@dataclass
class Pod:
    init: int  # host pid of the pod's PID 1
    local: dict[str, int]  # engine, tp0, tp1, decoy: pids inside the pod
    host: dict[str, int]  # the same processes' host pids


# ---- host side -----------------------------------------------------------------------------------
@contextlib.contextmanager
def pod(devices: str) -> Iterator[Pod]:
    """devices: "own" (each worker opens its GPU's node, as with one visible GPU per worker) or "all"
    (each opens both, as CUDA does for every visible GPU)."""
    tmp = Path(tempfile.mkdtemp(prefix="vllmdiag-pod-"))
    argv = ["unshare", "--pid", "--mount", "--fork", "--mount-proc", "--kill-child=SIGKILL",
            sys.executable, str(Path(__file__).resolve()), "pod-init", str(tmp), devices]
    log = open(tmp / "init.log", "wb")  # noqa: SIM115 - handed to the child
    launcher = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    log.close()
    try:
        stage1 = _wait_json(tmp / "stage1", launcher, tmp)
        init = _children(launcher.pid)[0]
        engine = _host_pid(init, stage1["engine"])
        tp0 = _host_pid(engine, stage1["tp0"])
        (tmp / "go1").write_text(str(tp0))  # TP1's pid in the pod will be TP0's host pid
        stage2 = _wait_json(tmp / "stage2", launcher, tmp)
        tp1 = _host_pid(engine, stage2["tp1"])
        (tmp / "go2").write_text(str(tp1))  # the unrelated process's pid will be TP1's host pid
        stage3 = _wait_json(tmp / "stage3", launcher, tmp)
        local = {**stage1, **stage2, **stage3}
        assert local["tp1"] == tp0 and local["decoy"] == tp1, f"ns_last_pid did not take: {local}"
        yield Pod(init, local, {"engine": engine, "tp0": tp0, "tp1": tp1})
    finally:
        with contextlib.suppress(ProcessLookupError):  # a pod that died at start: its temp dir still goes
            os.killpg(launcher.pid, signal.SIGKILL)  # --kill-child takes the whole pod with it
        launcher.wait(timeout=10)
        shutil.rmtree(tmp, ignore_errors=True)


def _wait_json(path: Path, launcher: subprocess.Popen[bytes], tmp: Path, timeout: float = 20.0) -> dict[str, int]:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if launcher.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"pod did not reach {path.name}: {(tmp / 'init.log').read_text(errors='replace')[-800:]}")
        time.sleep(0.02)
    return dict(json.loads(path.read_text()))


def _children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _host_pid(parent: int, local: int) -> int:
    """The host pid of `parent`'s child whose innermost NSpid is `local`."""
    for child in _children(parent):
        status = Path(f"/proc/{child}/status").read_text()
        nspid = next(line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:"))
        if int(nspid[-1]) == local:
            return child
    raise RuntimeError(f"no child of {parent} is pid {local} in the pod")


def triage_inside(p: Pod, gpus: list[dict[str, Any]]) -> dict[str, Any]:
    """`vllmdiag triage --json` run inside the pod's PID + mount namespaces, NVML faked at the import."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "VLLMDIAG_FAKE_NVML": str(FAKE_NVML),
           "FAKE_NVML_CONFIG": json.dumps({"gpus": gpus})}
    argv = ["nsenter", "-t", str(p.init), "-p", "-m", "--", sys.executable, "-m", "vllmdiag", "triage", "--json",
            "--probe", "processes", "--probe", "nvml",
            "--probe", "sockets", "--probe", "shm", "--confirm", "0"]
    out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60, cwd=ROOT)
    assert out.stdout.strip(), out.stderr[-2000:]
    return dict(json.loads(out.stdout))


def gpus_for(p: Pod) -> list[dict[str, Any]]:
    """What the real driver answers: each worker by its HOST pid, with its GPU memory."""
    return [{"pids": [p.host["tp0"]], "minor": 0, "util": 100, "power_mw": 150000},
            {"pids": [p.host["tp1"]], "minor": 1, "util": 0}]


def finding(report: dict[str, Any], code: str) -> dict[str, Any]:
    found = [f for f in report["findings"] if f["code"] == code]
    assert len(found) == 1, [f["code"] for f in report["findings"]]
    return found[0]


def snapshot_of(report: dict[str, Any]) -> Any:
    from vllmdiag.model import Snapshot

    return Snapshot.from_dict(report["snapshot"])


# ---- the tests -----------------------------------------------------------------------------------
@needs_pod
def test_gpu_picture_lands_on_the_workers_not_on_processes_with_the_host_pid_numbers() -> None:
    from vllmdiag.analysis.views.deployment_shapes import gpu_index_by_pid
    from vllmdiag.analysis.views.nvml_pids import INIT_PID_NS, pid_map

    with pod("own") as p:
        report = triage_inside(p, gpus_for(p))
    snap = snapshot_of(report)
    nvml, procs = snap.data("nvml"), snap.data("processes")["processes"]
    tp0, tp1, decoy = p.local["tp0"], p.local["tp1"], p.local["decoy"]
    assert nvml["pid_namespace"]["proc_1"] not in (None, INIT_PID_NS)  # it did run inside
    assert nvml["device_fds"]["holders"] == {str(tp0): [0], str(tp1): [1]}
    # The host pid numbers exist here as other processes: TP1 is pid <TP0's host pid>, the decoy is
    # pid <TP1's host pid>. Read as local pids, GPU0 would be TP1's and GPU1 the decoy's.
    assert gpu_index_by_pid(nvml, procs) == {tp0: 0, tp1: 1}
    m = pid_map(nvml, procs)
    assert m.local_of == {p.host["tp0"]: tp0, p.host["tp1"]: tp1} and decoy not in m.gpu_of
    orphan = finding(report, "process.frontend_missing")
    assert orphan["severity"] == "critical" and orphan["evidence"]["gpus"] == [0, 1]
    note = finding(report, "gpu.nvml_pids_foreign")
    assert note["severity"] == "info" and note["evidence"]["unattributed_nvml_pids"] == []
    assert f"host pid {p.host['tp0']} = pid {tp0}" in note["message"]
    assert note["evidence"]["attributed"][str(p.host["tp1"])] == {"pid": tp1, "gpu": 1, "used_memory_bytes": 1 << 30}


@needs_pod
def test_gpus_held_by_every_worker_are_the_deployments_but_no_ones_alone() -> None:
    from vllmdiag.analysis.views.nvml_pids import pid_map

    with pod("all") as p:
        report = triage_inside(p, gpus_for(p))
    snap = snapshot_of(report)
    nvml, procs = snap.data("nvml"), snap.data("processes")["processes"]
    tp0, tp1, decoy = p.local["tp0"], p.local["tp1"], p.local["decoy"]
    m = pid_map(nvml, procs)
    assert m.gpu_of == {} and m.held_by == {0: [tp0, tp1], 1: [tp0, tp1]}  # CUDA opens every visible GPU
    assert set(m.local_of.values()) == {None}
    assert finding(report, "process.frontend_missing")["evidence"]["gpus"] == [0, 1]  # still the deployment's
    note = finding(report, "gpu.nvml_pids_foreign")
    assert note["severity"] == "info" and "hostPID: true" in note["message"]
    assert sorted(note["evidence"]["unattributed_nvml_pids"]) == sorted([p.host["tp0"], p.host["tp1"]])
    assert not any(decoy in f["pids"] for f in report["findings"])


DEV_BINDS = ("null", "zero", "full", "random", "urandom", "tty")


# ---- the pod's PID 1 (run as a script: `python3 test_inside_pod_live.py pod-init TMP DEVICES`) ----
def pod_init(tmp: Path, devices: str) -> None:
    """PID 1 of the pod: private /dev, the orphaned engine, then the unrelated decoy; reaps forever."""
    _private_dev(tmp)
    engine = os.fork()
    if engine == 0:
        _engine(tmp, devices)
    target = int(_wait_text(tmp / "go2"))
    decoy = _fork_as(target, lambda: _pause("pod-sidecar-decoy"))
    _write(tmp / "stage3", {"decoy": decoy})
    while True:
        try:
            os.wait()
        except ChildProcessError:
            time.sleep(0.2)


def _private_dev(tmp: Path) -> None:
    """A /dev of our own (the mount namespace is private): the host's few nodes a process needs, a
    tmpfs /dev/shm, and plain files named like the NVIDIA nodes (their names are all that is read)."""
    new = tmp / "dev"
    new.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=755", "tmpfs", str(new)], check=True)
    for name in DEV_BINDS:
        (new / name).touch()
        subprocess.run(["mount", "--bind", f"/dev/{name}", str(new / name)], check=True)
    (new / "shm").mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m,mode=1777", "tmpfs", str(new / "shm")], check=True)
    for name in ("nvidiactl", "nvidia-uvm", "nvidia0", "nvidia1"):
        (new / name).touch()
    os.symlink("/proc/self/fd", new / "fd")
    subprocess.run(["mount", "--rbind", str(new), "/dev"], check=True)


def _engine(tmp: Path, devices: str) -> None:
    import setproctitle

    setproctitle.setproctitle("VLLM::EngineCore")
    tp0 = os.fork()
    if tp0 == 0:
        _worker(0, devices)
    _write(tmp / "stage1", {"engine": os.getpid(), "tp0": tp0})
    tp1 = _fork_as(int(_wait_text(tmp / "go1")), lambda: _worker(1, devices))
    _write(tmp / "stage2", {"tp1": tp1})
    _pause(None)


def _worker(rank: int, devices: str) -> None:
    import setproctitle

    setproctitle.setproctitle(f"VLLM::Worker_TP{rank}")
    names = ["nvidiactl", "nvidia-uvm", *([f"nvidia{rank}"] if devices == "own" else ["nvidia0", "nvidia1"])]
    keep = [os.open(f"/dev/{n}", os.O_RDONLY) for n in names]  # held for the process's life, as CUDA does
    _pause(None, keep)


def _fork_as(pid: int, child: Any) -> int:
    """Fork a child that gets `pid` in this namespace (CRIU's way: ns_last_pid, root only)."""
    Path("/proc/sys/kernel/ns_last_pid").write_text(str(pid - 1))
    got = os.fork()
    if got == 0:
        child()
    return got


def _pause(title: str | None, keep: list[int] | None = None) -> None:
    if title:
        import setproctitle

        setproctitle.setproctitle(title)
    while True:
        signal.pause()


def _wait_text(path: Path) -> str:
    while not path.exists():
        time.sleep(0.01)
    return path.read_text()


def _write(path: Path, obj: dict[str, int]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj))
    tmp.rename(path)


if __name__ == "__main__" and sys.argv[1:2] == ["pod-init"]:
    pod_init(Path(sys.argv[2]), sys.argv[3])
