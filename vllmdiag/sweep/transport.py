"""The argv that reaches one node: ssh (default) or an exec template (kubectl/srun/docker), never a shell.

ssh joins its trailing arguments into one string for the remote shell, so the remote part is built
with ``shlex.join`` from names that ``nodes.check_name`` already restricted to a safe alphabet.
"""

from __future__ import annotations

import functools
import re
import shlex
from dataclasses import dataclass

from vllmdiag.errors import BadInput
from vllmdiag.sweep.inventory import STRICT_VALUES, Inventory, NodeConn, cli_ssh_option
from vllmdiag.sweep.nodes import NODE_NAME
from vllmdiag.sweep.ship import SHIP_ARGV0, SHIP_PYTHON, SHIP_SNIPPET


@dataclass(frozen=True)
class Transport:
    exec_template: str | None = None
    remote_cmd: str = "vllmdiag"
    ship: bool = False
    ship_py_spy: bool = True  # with --ship: bundle this machine's py-spy (used where the node has none)
    ship_python: str | None = None  # with --ship: the interpreter to run (else the snippet picks a trusted one)
    connect_timeout_s: float = 5.0
    strict_host_key_checking: str | None = None
    ssh_path: str = "ssh"
    probes: tuple[str, ...] = ()  # passed on as `collect --probe NAME`
    enable: tuple[str, ...] = ()  # opt-in probes, passed on as `collect --enable NAME`
    # `collect --confirm S`: a node whose quick pass sees work in flight and nothing moving looks again for up to
    # S seconds itself (triage's confirm window), so suspicious nodes confirm in parallel; 0 = off.
    confirm_s: float = 0.0
    user: str | None = None  # sweep -l: the ssh login user (wins over the inventory's)
    ssh_options: tuple[str, ...] = ()  # sweep -o: checked -oKey=Value strings (inventory.cli_ssh_option)

    def __post_init__(self) -> None:
        bad = [p for p in (*self.probes, *self.enable) if not re.fullmatch(r"[a-z][a-z0-9_]{0,63}", p)]
        if bad:
            raise BadInput(f"invalid probe name {bad[0]!r}")
        if self.exec_template is not None:
            tokens = _split(self.exec_template, "--exec")
            if not tokens or not any("%h" in t for t in tokens):
                raise BadInput("--exec template must contain %h (the node name), e.g. 'kubectl exec %h --'")
        if not _split(self.remote_cmd, "--remote-cmd"):
            raise BadInput("--remote-cmd must not be empty")
        if self.ship_python is not None and not re.fullmatch(SHIP_PYTHON, self.ship_python):
            raise BadInput(f"--ship-python {self.ship_python!r}: give an absolute path of plain characters")
        if self.user is not None and not NODE_NAME.fullmatch(self.user):
            raise BadInput(f"-l {self.user[:80]!r}: not a valid user name")
        object.__setattr__(self, "ssh_options", tuple(cli_ssh_option(o) for o in self.ssh_options))
        if self.strict_host_key_checking not in (None, *STRICT_VALUES):
            raise BadInput(f"--strict-host-key-checking must be one of {', '.join(STRICT_VALUES)}")

    @property
    def kind(self) -> str:
        return "exec" if self.exec_template else "ssh"


def remote_argv(transport: Transport, node: str, budget_s: float, conn: NodeConn | None = None) -> list[str]:
    args = ["--json", "--node", node, "--budget", f"{budget_s:.1f}"]
    for probe in transport.probes:
        args += ["--probe", probe]
    for probe in transport.enable:
        args += ["--enable", probe]
    if transport.confirm_s > 0:  # only then: a node with an older collect still answers a --confirm 0 sweep
        args += ["--confirm", f"{transport.confirm_s:.1f}"]
    if transport.ship:
        # The command line's choice wins over the inventory's; "" lets the snippet pick a trusted one.
        python = transport.ship_python or (conn.ship_python if conn else None) or ""
        return ["sh", "-c", SHIP_SNIPPET, SHIP_ARGV0, python, *args]
    return [*_split(transport.remote_cmd, "--remote-cmd"), "collect", *args]


def node_argv(transport: Transport, node: str, inventory: Inventory | None, budget_s: float) -> list[str]:
    conn = inventory.conn(node) if inventory else NodeConn()
    remote = remote_argv(transport, node, budget_s, conn)
    if transport.exec_template:
        return [t.replace("%h", node) for t in _split(transport.exec_template, "--exec")] + remote
    return ssh_argv(transport, node, conn) + [shlex.join(remote)]


def ssh_argv(transport: Transport, node: str, conn: NodeConn) -> list[str]:
    return [*_split(transport.ssh_path, "ssh path"), *ssh_options(transport, conn), "--", conn.address or node]


def ssh_options(transport: Transport, conn: NodeConn) -> list[str]:
    """Every ssh option for ``conn`` (no program, no host): also what ClusterShell's gateways use."""
    # ssh keeps the first value it sees for an option: ours that keep a sweep from hanging come first.
    # Every hardening option precedes the inventory's ssh_options (issue 15 item 14), which are allow-listed
    # in inventory.py anyway: an inventory cannot turn agent forwarding or keep-alives back on.
    argv = ["-oBatchMode=yes", f"-oConnectTimeout={max(1, round(transport.connect_timeout_s))}",
            "-oForwardAgent=no", "-oForwardX11=no", "-oClearAllForwardings=yes", "-oLogLevel=ERROR",
            "-oServerAliveInterval=5", "-oServerAliveCountMax=2", "-oPermitLocalCommand=no"]
    strict = transport.strict_host_key_checking or conn.strict_host_key_checking
    if strict:
        argv.append(f"-oStrictHostKeyChecking={strict}")
    argv += [*transport.ssh_options, *conn.ssh_options]  # the command line's -o before the inventory's: it wins
    if conn.known_hosts_file:
        argv.append(f"-oUserKnownHostsFile={conn.known_hosts_file}")
    if conn.identity_file:
        argv += ["-i", conn.identity_file, "-oIdentitiesOnly=yes"]
    if conn.port:
        argv += ["-p", str(conn.port)]
    user = transport.user or conn.user
    if user:
        argv += ["-l", user]
    if conn.ssh_config:
        argv += ["-F", conn.ssh_config]
    return argv


def _split(text: str, what: str) -> list[str]:
    return list(_split_once(text, what))


@functools.lru_cache(maxsize=16)
def _split_once(text: str, what: str) -> tuple[str, ...]:
    # Once per sweep, not once per node: shlex costs ~0.1 ms a call, seconds at 100,000 nodes.
    try:
        return tuple(shlex.split(text))
    except ValueError as exc:
        raise BadInput(f"{what}: cannot parse {text!r} ({exc})") from None
