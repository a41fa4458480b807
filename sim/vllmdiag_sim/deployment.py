"""`Deployment`: start, inspect, fault and tear down one simulated vLLM 0.33 deployment.

State lives in `$VLLMDIAG_SIM_STATE/<id>/` (default `/tmp/vllmdiag-sim`): `state.json` for the
launcher, plus what the simulated processes append while they run (segment names, ipc paths,
acks). Teardown trusts only those records, so it removes what this deployment made and
nothing else.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from vllmdiag_sim import faults, procs, runtime, shapes

STATE_ENV = "VLLMDIAG_SIM_STATE"
BIN_VLLM = Path(__file__).parent / "bin" / "vllm"
REPO_ROOT = Path(__file__).resolve().parents[1]  # where vllmdiag_sim is importable from
DEFAULT_MODEL = "facebook/opt-125m"
READY_TIMEOUT_S = 30.0


class SimError(RuntimeError):
    """A simulated deployment failed; the message's first line names the launcher's own error.

    The CLI prints only an error's first line, so "did not start:" with the log tail after it read as
    "did not start:" and nothing else."""

    def __init__(self, what: str, log_tail: str | None = None) -> None:
        if log_tail is None:
            super().__init__(what)
        else:
            super().__init__(f"{what}: {_first_error_line(log_tail)}\n{log_tail}".rstrip())


def _first_error_line(log_tail: str) -> str:
    """The root cause in a launcher's last lines: the first `SomeError: ...` line (later ones are
    consequences, e.g. "Engine core initialization failed. See root cause above")."""
    lines = [ln.strip() for ln in log_tail.splitlines() if ln.strip()]
    for line in lines:
        if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b", line):
            return line[:300]
    return lines[-1][:300] if lines else "no output from the launcher"


def state_root() -> Path:
    return Path(os.environ.get(STATE_ENV, "/tmp/vllmdiag-sim"))


@dataclass
class Deployment:
    id: str
    dir: str
    tp: int = 2
    dp: int = 1
    nnodes: int = 1
    node_rank: int = 0
    master_port: int = 0
    namespace: bool = False
    shm_size: str | None = None
    fault: str = "healthy"
    rank: int | None = None
    launcher_pid: int = 0
    root_pid: int = 0
    http_port: int | None = None
    processes: list[dict[str, Any]] = field(default_factory=list)
    leaked: list[str] = field(default_factory=list)
    fault_seq: int = 0
    shape: str = "serve"  # see vllmdiag_sim.shapes
    extra_tops: list[int] = field(default_factory=list)  # processes outside the launcher's tree (raylet)
    api_servers: int | None = None  # --api-server-count (None: vLLM's default, the DP size)

    # ---- views -------------------------------------------------------------------------
    @property
    def path(self) -> Path:
        return Path(self.dir)

    @property
    def pids_by_role(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for p in self.processes:
            out.setdefault(p["role"], []).append(p["pid"])
        return out

    @property
    def segments(self) -> list[str]:
        return runtime.read_records(self.path, "segments")

    @property
    def ipc_paths(self) -> list[str]:
        return runtime.read_records(self.path, "ipc")

    def pid_of(self, role: str, rank: int | None = None, dp_rank: int = 0) -> int:
        deadline = time.monotonic() + 2.0
        while True:
            for p in self.processes:
                if p["role"] == role and (rank is None or p["rank"] == rank) and p["dp_rank"] in (dp_rank, None):
                    return int(p["pid"])
            if time.monotonic() > deadline:
                raise SimError(f"no {role} rank={rank} dp={dp_rank} in deployment {self.id}")
            time.sleep(0.05)  # a title read mid-rewrite may have hidden it: look again
            self.refresh()

    def worker_pid(self, rank: int, dp_rank: int = 0) -> int:
        return self.pid_of("worker", rank, dp_rank)

    def engine_pid(self, dp_rank: int = 0) -> int:
        return self.pid_of("engine_core", None, dp_rank)

    def summary(self) -> dict[str, Any]:
        return {"id": self.id, "root_pid": self.root_pid, "http_port": self.http_port, "tp": self.tp,
                "dp": self.dp, "fault": self.fault, "rank": self.rank, "namespace": self.namespace,
                "nnodes": self.nnodes, "node_rank": self.node_rank, "pids_by_role": self.pids_by_role,
                "segments": self.segments, "leaked_segments": self.leaked, "state_dir": self.dir}

    # ---- persistence -------------------------------------------------------------------
    def save(self) -> None:
        runtime.write_json(self.path / "state.json", asdict(self))

    @classmethod
    def load(cls, dep_id: str) -> Deployment:
        data = runtime.read_json(state_root() / dep_id / "state.json")
        if not isinstance(data, dict):
            raise SimError(f"no simulated deployment {dep_id!r} under {state_root()}")
        return cls(**data)

    @classmethod
    def list_all(cls) -> list[Deployment]:
        root = state_root()
        ids = sorted(p.parent.name for p in root.glob("*/state.json")) if root.is_dir() else []
        return [cls.load(i) for i in ids]

    def refresh(self) -> None:
        """Re-read the process tree; keep earlier records (orphans leave the tree)."""
        known = {p["pid"]: p for p in self.processes if procs.still_ours(p) is not None}
        tops = [self.launcher_pid, *self.extra_tops, *[p["pid"] for p in self.processes if p["role"] == "client"]]
        # What is seen now wins over what was recorded (a worker retitles itself from "VLLM::Worker"
        # to "VLLM::Worker_TP1" during startup); records of processes no longer in the tree stay.
        found = procs.discover(tops)
        shapes.annotate(self, found)
        for p in found:
            known[p["pid"]] = {**known.get(p["pid"], {}), **p}
        self.processes = sorted(known.values(), key=lambda p: p["pid"])
        roots = [p["pid"] for p in self.processes if p["role"] in ("api_server", "headless", "llm_client")
                 and procs.still_ours(p) is not None]
        self.root_pid = roots[0] if roots else self.root_pid
        self.save()

    # ---- lifecycle ---------------------------------------------------------------------
    @classmethod
    def up(cls, tp: int = 2, dp: int = 1, fault: str = "healthy", rank: int | None = None,
           namespace: bool = False, shm_size: str | None = None, port: int = 0, nnodes: int = 1,
           node_rank: int = 0, master_port: int | None = None, model: str = DEFAULT_MODEL,
           shape: str = "serve", api_servers: int | None = None) -> Deployment:
        faults.validate_start(fault, tp=tp, dp=dp, nnodes=nnodes, master_port=master_port, shape=shape)
        shapes.validate(shape, fault, tp, dp, nnodes)
        if fault == "shm-small":
            namespace, shm_size = True, shm_size or "256m"
        dep_id = uuid.uuid4().hex[:8]
        base = state_root() / dep_id
        base.mkdir(parents=True)
        dep = cls(dep_id, str(base), tp, dp, nnodes, node_rank, master_port or 0, namespace,
                  shm_size or ("4g" if namespace else None), fault="healthy", rank=rank, shape=shape,
                  api_servers=api_servers)
        dep.save()
        try:
            if fault == "init-odd-rank":
                dep._launch(model, port, {runtime.ENV_INIT_HANG: str(tp - 1 if rank is None else rank)})
                dep._wait_init_hang(tp - 1 if rank is None else rank)
                return dep
            dep._launch(model, port)
            dep._wait_ready()
            if fault == "shm-small":  # already in place: the node's tmpfs is small
                dep.fault = fault
                dep.save()
            elif fault != "healthy":
                dep.inject(fault, rank)
        except BaseException:
            dep.down()
            raise
        return dep

    def _wait_init_hang(self, rank: int) -> None:
        """Started with one rank stuck in NCCL init: settled once it acked and its peers retitled."""
        self.fault, self.rank = "init-odd-rank", rank
        deadline = time.monotonic() + READY_TIMEOUT_S
        others = self.tp - 1
        while time.monotonic() < deadline:
            self.refresh()
            titled = [p for p in self.processes if p["role"] == "worker" and p.get("rank") is not None]
            if (self.path / "acks" / f"init-odd-rank-{rank}").exists() and len(titled) >= others:
                time.sleep(faults.SETTLE_S)
                self.refresh()
                return
            if self._popen.poll() is not None:
                break
            time.sleep(0.05)
        raise SimError(f"simulated deployment {self.id} did not reach the init hang", self.log_tail())

    def _launch(self, model: str, port: int, extra_env: dict[str, str] | None = None) -> None:
        argv = [sys.executable, str(BIN_VLLM), "serve", model, "--tensor-parallel-size", str(self.tp)]
        if self.dp > 1:
            argv += ["--data-parallel-size", str(self.dp)]
        if self.api_servers is not None:
            argv += ["--api-server-count", str(self.api_servers)]
        # Always a definite --port, as real deployments have (vLLM's default is 8000): the tool GETs
        # only the configured HTTP port, never the API server's other listeners.
        argv += ["--port", str(port or runtime.free_port())]
        if self.nnodes > 1 and self.shape != "ray":  # Ray places ranks on its nodes itself
            argv += ["--nnodes", str(self.nnodes), "--node-rank", str(self.node_rank),
                     "--master-port", str(self.master_port)]
            argv += ["--headless"] if self.node_rank > 0 else []
        argv, shape_env = shapes.launch_argv(self, argv)
        if self.namespace:
            argv = namespace_argv(str(self.shm_size)) + argv
        env = {**os.environ, **(extra_env or {}), **shape_env, runtime.ENV_DIR: self.dir,
               "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
        with open(self.path / "log.txt", "ab") as log:
            self._popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                           env=env, start_new_session=True)
        self.launcher_pid = self._popen.pid
        self.processes = procs.discover([self.launcher_pid])
        self.save()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        # A Ray worker node runs only a raylet until the driver places actors there.
        ready = "raylet-ready" if self.shape == "ray" and self.node_rank > 0 else "api-ready"
        while not (self.path / "acks" / ready).exists():
            self.processes = procs.discover([self.launcher_pid]) or self.processes
            self.save()
            if self._popen.poll() is not None or time.monotonic() > deadline:
                raise SimError(f"simulated deployment {self.id} did not start", self.log_tail())
            time.sleep(0.05)
        api = runtime.read_json(self.path / "api.json") or {}
        self.http_port = api.get("http_port")
        self.refresh()
        # A fork-started worker carries its parent's "VLLM::EngineCore" title until it retitles
        # itself: ready means every worker has its own title (else a fault aimed at rank K misses it).
        while self._unretitled() and time.monotonic() < deadline:
            time.sleep(0.05)
            self.refresh()

    def _unretitled(self) -> bool:
        engines = {p["pid"] for p in self.processes if p["role"] == "engine_core"}
        if any(procs.parent_pid(pid) in engines for pid in engines):
            return True
        if any(p["role"] == "worker" and p.get("rank") is None for p in self.processes):
            return True  # still "VLLM::Worker": inside init_device
        if self.shape == "ray" and any(p["role"] == "worker" and not str(p.get("title")).endswith(".run")
                                       for p in self.processes):
            return True  # a Ray actor still in initialize_worker
        # A read of cmdline while setproctitle rewrites it can come back empty: count the workers too.
        world = shapes.world_size(self)
        expected = world * self.dp if self.nnodes == 1 and (world > 1 or self.dp > 1) else 0
        return sum(1 for p in self.processes if p["role"] == "worker") < expected

    def log_tail(self, n: int = 30) -> str:
        with contextlib.suppress(FileNotFoundError):
            return "\n".join((self.path / "log.txt").read_text(errors="replace").splitlines()[-n:])
        return ""

    def inject(self, fault: str, rank: int | None = None) -> None:
        faults.inject(self, fault, rank)
        self.fault, self.rank = fault, rank if rank is not None else self.rank
        self.refresh()

    def down(self, keep_leak: bool = False) -> None:
        """Kill every process this deployment recorded; remove its segments, sockets and state."""
        with contextlib.suppress(Exception):
            self.refresh()
        procs.kill_all(self.processes)
        for popen in (getattr(self, "_popen", None), getattr(self, "_raylet", None), *getattr(self, "_extra_popens", [])):
            if popen is not None:
                popen.wait(timeout=10)
        # A namespaced node's /dev/shm is a private tmpfs that vanished with its last process.
        names = [] if self.namespace else self.segments + ([] if keep_leak else self.leaked)
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"/dev/shm/{name}")
        for path in self.ipc_paths:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        for child in sorted(self.path.rglob("*"), reverse=True):
            child.rmdir() if child.is_dir() else child.unlink()
        with contextlib.suppress(OSError):
            self.path.rmdir()

    def __enter__(self) -> Deployment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()


def namespace_argv(shm_size: str) -> list[str]:
    """A private PID + mount namespace ("node") with its own /proc and a tmpfs /dev/shm."""
    if os.geteuid() != 0:
        raise SimError("--namespace needs root (unshare of PID and mount namespaces)")
    return ["unshare", "--pid", "--mount", "--fork", "--mount-proc", "--kill-child",
            sys.executable, "-m", "vllmdiag_sim.nsinit", "--shm-size", shm_size, "--"]
