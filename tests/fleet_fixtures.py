"""A test fleet on one machine: each node a PID+mount namespace with its own /proc and /dev/shm,
a fake vLLM tree inside (tests/data/bin/vllm), and its own real sshd on a 127.0.0.x address.

The sshd runs *inside* the namespace, so every ssh session (and the collect it runs) sees that
node's /proc. Keys and configs are generated per fleet in a temp dir that is removed afterwards.
`unshare --kill-child` ties each namespace to its launcher: killing the launcher kills the node's
PID 1, and the kernel then kills everything else in that namespace.

Run as a script (`python fleet_fixtures.py node-init SPEC.json`) it is the PID 1 of one node.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ports import free_port

HERE = Path(__file__).resolve().parent
FAKE_VLLM = HERE / "data" / "bin" / "vllm"
SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
SSHD_DIR = Path("/run/sshd")  # sshd's privilege-separation directory must exist


def skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root (PID/mount namespaces, sshd)"
    for tool in (SSHD, "ssh", "ssh-keygen", "unshare"):
        if not shutil.which(tool) and not Path(tool).exists():
            return f"{tool} not installed (apt-get install openssh-server openssh-client util-linux)"
    return None


@dataclass
class NodeSpec:
    name: str
    address: str
    tree: list[str] | None = None  # args after `vllm serve`, or None for a node without vLLM
    stop_ranks: list[int] = field(default_factory=list)
    ns_pid: int | None = None  # join this running namespace (a simulator node) instead of making one


@dataclass
class Fleet:
    tmp: Path
    inventory: Path
    nodes: dict[str, NodeSpec]
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def remote_cmd(self) -> str:
        return f"{sys.executable} -m vllmdiag"



@contextlib.contextmanager
def fleet(specs: list[NodeSpec], extra_inventory: dict[str, dict[str, object]] | None = None) -> Iterator[Fleet]:
    """Start every node (in parallel), yield the fleet with an inventory YAML, tear it all down."""
    created_sshd_dir = not SSHD_DIR.exists()
    SSHD_DIR.mkdir(mode=0o755, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="vllmdiag-fleet-"))
    fl = Fleet(tmp, tmp / "fleet.yaml", {s.name: s for s in specs})
    try:
        _keys(tmp)
        inv: dict[str, dict[str, object]] = {}
        for spec in specs:
            port = free_port(spec.address)
            fl.procs[spec.name] = _launch(tmp, spec, port)
            inv[spec.name] = {"address": spec.address, "port": port}
        for name in sorted(fl.procs):
            _wait_ready(tmp / name, fl.procs[name], name)
        inv.update(extra_inventory or {})
        fl.inventory.write_text(json.dumps({  # YAML is a superset of JSON
            "defaults": {"user": "root", "identity_file": str(tmp / "client_key"),
                         "known_hosts_file": str(tmp / "known_hosts"), "strict_host_key_checking": "accept-new"},
            "nodes": inv}))
        yield fl
    finally:
        for proc in fl.procs.values():
            for child in _children(proc.pid):  # nsenter forks into the PID namespace; its child holds sshd
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        for proc in fl.procs.values():
            proc.wait(timeout=10)
        shutil.rmtree(tmp, ignore_errors=True)
        if created_sshd_dir:
            with contextlib.suppress(OSError):
                SSHD_DIR.rmdir()


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except (OSError, ValueError):
        return []


def ns_init_pid(launcher_pid: int) -> int:
    """PID (host view) of the namespace's PID 1 under an `unshare --fork` launcher."""
    kids = _children(launcher_pid)
    if not kids:
        raise RuntimeError(f"no namespace init under pid {launcher_pid}")
    return kids[0]


def _keys(tmp: Path) -> None:
    for name in ("host_key", "client_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"vllmdiag-test-{name}", "-f",
                        str(tmp / name)], check=True, stdin=subprocess.DEVNULL)
    (tmp / "authorized_keys").write_text((tmp / "client_key.pub").read_text())
    os.chmod(tmp, 0o755)


def _launch(tmp: Path, spec: NodeSpec, port: int) -> subprocess.Popen[bytes]:
    node_dir = tmp / spec.name
    node_dir.mkdir()
    config = node_dir / "sshd_config"
    config.write_text("\n".join([
        f"ListenAddress {spec.address}:{port}", f"HostKey {tmp / 'host_key'}",
        f"AuthorizedKeysFile {tmp / 'authorized_keys'}", "PermitRootLogin prohibit-password",
        "PasswordAuthentication no", "KbdInteractiveAuthentication no", "UsePAM no", "StrictModes no",
        "PidFile none", "LogLevel ERROR", "PrintMotd no", "UseDNS no", "MaxStartups 100:30:200",
        # Sessions run the user's shell, and bash sources ~/.bashrc for ssh commands: root's may run slow
        # or lock-waiting tools (pyenv rehash). Tests want the node, not this machine's dotfiles.
        f"SetEnv HOME={node_dir}", ""]))
    (node_dir / "spec.json").write_text(json.dumps({"dir": str(node_dir), "config": str(config),
                                                    "tree": spec.tree, "stop_ranks": spec.stop_ranks}))
    argv = ["unshare", "--pid", "--mount", "--fork", "--mount-proc", "--kill-child=SIGKILL",
            sys.executable, str(Path(__file__).resolve()), "node-init", str(node_dir / "spec.json")]
    if spec.ns_pid is not None:
        # sshd inside an existing node's PID+mount namespaces: its sessions see that node's /proc.
        argv = ["nsenter", "-t", str(spec.ns_pid), "-p", "-m", "--", sys.executable, str(Path(__file__).resolve()),
                "node-sshd", str(node_dir / "spec.json")]
    log = open(node_dir / "init.log", "wb")  # noqa: SIM115 - handed to the child, closed with it
    try:
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    finally:
        log.close()


def _wait_ready(node_dir: Path, proc: subprocess.Popen[bytes], name: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not (node_dir / "ready").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            log = (node_dir / "init.log").read_text(errors="replace") if (node_dir / "init.log").exists() else ""
            raise RuntimeError(f"test node {name} did not start: {log[-800:]}")
        time.sleep(0.02)


# ---- inside the namespace: the node's PID 1 --------------------------------------------------------
def node_init(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    node_dir = Path(spec["dir"])
    # Own /dev/shm like a real node (the mount namespace is private, so the host's stays untouched).
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m,mode=1777", "tmpfs", "/dev/shm"], check=True)
    if spec["tree"] is not None:
        state = node_dir / "tree.json"
        subprocess.Popen([sys.executable, str(FAKE_VLLM), "serve", *spec["tree"]], stdin=subprocess.DEVNULL,
                         env={**os.environ, "FAKE_TREE_STATE": str(state)})
        while not state.exists():
            time.sleep(0.01)
        workers = json.loads(state.read_text())["workers"]
        for rank in spec["stop_ranks"]:
            os.kill(int(workers[str(rank)]), signal.SIGSTOP)  # a rank that stopped running: state T
    subprocess.Popen([SSHD, "-D", "-e", "-f", spec["config"]], stdin=subprocess.DEVNULL)
    _wait_listening(spec["config"])
    (node_dir / "ready").write_text("1")
    while True:  # PID 1 reaps every orphan of the namespace
        try:
            os.wait()
        except ChildProcessError:
            time.sleep(0.2)


def node_sshd(spec_path: str) -> None:
    """In a joined namespace: run sshd until the fixture kills us (PDEATHSIG takes sshd along)."""
    import ctypes

    spec = json.loads(Path(spec_path).read_text())
    sshd = subprocess.Popen([SSHD, "-D", "-e", "-f", spec["config"]], stdin=subprocess.DEVNULL,
                            preexec_fn=lambda: ctypes.CDLL(None).prctl(1, signal.SIGKILL))  # PR_SET_PDEATHSIG
    _wait_listening(spec["config"])
    (Path(spec["dir"]) / "ready").write_text("1")
    sshd.wait()


def _wait_listening(config: str) -> None:
    listen = next(line.split()[1] for line in Path(config).read_text().splitlines() if line.startswith("ListenAddress"))
    host, port = listen.rsplit(":", 1)
    for _ in range(500):
        with contextlib.suppress(OSError), socket.create_connection((host, int(port)), timeout=0.2):
            return
        time.sleep(0.01)


@contextlib.contextmanager
def silent_listener(address: str = "127.0.0.9") -> Iterator[int]:
    """A TCP port that accepts connections and never says a word (a wedged sshd, a black-hole proxy)."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((address, 0))
    srv.listen(64)  # the kernel completes handshakes into the backlog; nobody ever reads or writes
    try:
        yield int(srv.getsockname()[1])
    finally:
        srv.close()


if __name__ == "__main__" and sys.argv[1:2] == ["node-init"]:
    node_init(sys.argv[2])
elif __name__ == "__main__" and sys.argv[1:2] == ["node-sshd"]:
    node_sshd(sys.argv[2])
