"""The argv that reaches one node: ssh (default) or an exec template (kubectl/srun/docker), never a shell.

ssh joins its trailing arguments into one string for the remote shell, so the remote part is built
with ``shlex.join`` from names that ``nodes.check_name`` already restricted to a safe alphabet.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from vllmdiag.cli_errors import UsageError
from vllmdiag.fleet.inventory import STRICT_VALUES, Inventory, NodeConn

SHIP_ARGV0 = "vllmdiag-ship"
# Runs the shipped collector (read from stdin) with the Python of a running vLLM process, so nothing
# must be installed on the node. Fixed text: node names and options only ever arrive as "$@".
SHIP_SNIPPET = r"""d=$(mktemp -d "${TMPDIR:-/tmp}/vllmdiag.XXXXXX") || exit 97
trap 'rm -rf "$d"' EXIT
cat > "$d/collect.pyz" || exit 97
py=""
for f in /proc/[0-9]*/cmdline; do
  case "$(head -c 6 "$f" 2>/dev/null | tr -d '\000')" in
    VLLM::) p=$(readlink "${f%/cmdline}/exe" 2>/dev/null) && [ -x "$p" ] && { py=$p; break; } ;;
  esac
done
[ -n "$py" ] || py=python3
VLLMDIAG_SHIPPED=1 "$py" "$d/collect.pyz" "$@"
"""


@dataclass(frozen=True)
class Transport:
    exec_template: str | None = None
    remote_cmd: str = "vllmdiag"
    ship: bool = False
    ship_py_spy: bool = True  # with --ship: bundle this machine's py-spy (used where the node has none)
    connect_timeout_s: float = 5.0
    strict_host_key_checking: str | None = None
    ssh_path: str = "ssh"
    probes: tuple[str, ...] = ()  # passed on as `collect --probe NAME`

    def __post_init__(self) -> None:
        bad = [p for p in self.probes if not re.fullmatch(r"[a-z][a-z0-9_]{0,63}", p)]
        if bad:
            raise UsageError(f"invalid probe name {bad[0]!r}")
        if self.exec_template is not None:
            tokens = _split(self.exec_template, "--exec")
            if not tokens or not any("%h" in t for t in tokens):
                raise UsageError("--exec template must contain %h (the node name), e.g. 'kubectl exec %h --'")
        if not _split(self.remote_cmd, "--remote-cmd"):
            raise UsageError("--remote-cmd must not be empty")
        if self.strict_host_key_checking not in (None, *STRICT_VALUES):
            raise UsageError(f"--strict-host-key-checking must be one of {', '.join(STRICT_VALUES)}")

    @property
    def kind(self) -> str:
        return "exec" if self.exec_template else "ssh"


def remote_argv(transport: Transport, node: str, budget_s: float) -> list[str]:
    args = ["--json", "--node", node, "--budget", f"{budget_s:.1f}"]
    for probe in transport.probes:
        args += ["--probe", probe]
    if transport.ship:
        return ["sh", "-c", SHIP_SNIPPET, SHIP_ARGV0, *args]
    return [*_split(transport.remote_cmd, "--remote-cmd"), "collect", *args]


def node_argv(transport: Transport, node: str, inventory: Inventory | None, budget_s: float) -> list[str]:
    remote = remote_argv(transport, node, budget_s)
    if transport.exec_template:
        return [t.replace("%h", node) for t in _split(transport.exec_template, "--exec")] + remote
    conn = inventory.conn(node) if inventory else NodeConn()
    return ssh_argv(transport, node, conn) + [shlex.join(remote)]


def ssh_argv(transport: Transport, node: str, conn: NodeConn) -> list[str]:
    # ssh keeps the first value it sees for an option: ours that keep a sweep from hanging come first.
    argv = [*_split(transport.ssh_path, "ssh path"), "-oBatchMode=yes",
            f"-oConnectTimeout={max(1, round(transport.connect_timeout_s))}"]
    strict = transport.strict_host_key_checking or conn.strict_host_key_checking
    if strict:
        argv.append(f"-oStrictHostKeyChecking={strict}")
    argv += list(conn.ssh_options)
    argv += ["-oForwardAgent=no", "-oForwardX11=no", "-oClearAllForwardings=yes", "-oLogLevel=ERROR",
             "-oServerAliveInterval=5", "-oServerAliveCountMax=2"]
    if conn.known_hosts_file:
        argv.append(f"-oUserKnownHostsFile={conn.known_hosts_file}")
    if conn.identity_file:
        argv += ["-i", conn.identity_file, "-oIdentitiesOnly=yes"]
    if conn.port:
        argv += ["-p", str(conn.port)]
    if conn.user:
        argv += ["-l", conn.user]
    return argv + ["--", conn.address or node]


def _split(text: str, what: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError as exc:
        raise UsageError(f"{what}: cannot parse {text!r} ({exc})") from None
