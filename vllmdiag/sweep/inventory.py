"""The inventory YAML: groups and per-node ssh options (user, port, identity file, address) (pure parsing).

Every value that reaches an ssh argv is checked here: host and user names against the node-name
alphabet, ports as integers, paths that cannot pass for options, ``ssh_options`` as ``-oKey=Value``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from vllmdiag.errors import BadInput
from vllmdiag.sweep.nodes import MAX_NODES, NODE_NAME, check_name, estimate_size

_OPTION = re.compile(r"-o([A-Za-z]+)=([^\s]{1,512})")
# ssh options an inventory may set (issue 15 item 14): how to reach and authenticate, never something
# that runs a command or loads code on this machine (ProxyCommand, LocalCommand, PermitLocalCommand,
# KnownHostsCommand, PKCS11Provider, SecurityKeyProvider), pulls in other config (Include, Match) or
# forwards anything. Compared case-insensitively, as ssh does.
SSH_OPTIONS_ALLOWED = frozenset(k.lower() for k in (
    "Port", "User", "IdentityFile", "IdentitiesOnly", "CertificateFile", "ConnectTimeout", "ConnectionAttempts",
    "StrictHostKeyChecking", "UserKnownHostsFile", "GlobalKnownHostsFile", "HostKeyAlias", "HostKeyAlgorithms",
    "PubkeyAcceptedAlgorithms", "PubkeyAcceptedKeyTypes", "KexAlgorithms", "Ciphers", "MACs", "Compression",
    "AddressFamily", "BindAddress", "BindInterface", "CheckHostIP", "HashKnownHosts", "UpdateHostKeys",
    "VerifyHostKeyDNS", "PreferredAuthentications", "PubkeyAuthentication", "HostbasedAuthentication",
    "GSSAPIAuthentication", "ServerAliveInterval", "ServerAliveCountMax", "TCPKeepAlive", "IPQoS", "RekeyLimit",
    "ProxyJump", "LogLevel"))
_CONN_KEYS = ("address", "user", "port", "identity_file", "known_hosts_file", "strict_host_key_checking", "ssh_options",
              "ship_python", "ssh_config")
STRICT_VALUES = ("yes", "no", "accept-new")


@dataclass(frozen=True)
class NodeConn:
    """How to reach one node over ssh; every field optional (ssh's own config decides the rest)."""

    address: str | None = None
    user: str | None = None
    port: int | None = None
    identity_file: str | None = None
    known_hosts_file: str | None = None
    strict_host_key_checking: str | None = None
    ssh_options: tuple[str, ...] = ()
    ship_python: str | None = None  # sweep --ship: the interpreter to run the collector with on this node
    # An ssh client config file (ssh -F): per-host HostName/Port/keys in ssh's own syntax. Through
    # gateways (sweep --gateway) it is the way per-node settings travel: it must exist on the gateways too.
    ssh_config: str | None = None


@dataclass
class Inventory:
    groups: dict[str, str] = field(default_factory=dict)
    defaults: NodeConn = field(default_factory=NodeConn)
    nodes: dict[str, NodeConn] = field(default_factory=dict)  # per node (patterns already expanded)

    def conn(self, node: str) -> NodeConn:
        return self.nodes.get(node, self.defaults)


def load_inventory(path: Path) -> Inventory:
    from vllmdiag.files.infile import InputError, read_yaml

    try:
        raw = read_yaml(path, "inventory") or {}  # regular file, size cap, no YAML aliases (issue 15)
    except InputError as exc:
        raise BadInput(f"--inventory {exc}") from None
    return parse_inventory(raw, str(path))


def parse_inventory(raw: Any, where: str) -> Inventory:
    """``{defaults: {...}, groups: {name: nodeset}, nodes: {nodeset: {...}}}``; unknown keys are errors."""
    from ClusterShell.NodeSet import NodeSet, NodeSetException

    obj = _mapping(raw, where)
    _no_extra(obj, ("defaults", "groups", "nodes"), where)
    defaults = _conn(_mapping(obj.get("defaults") or {}, f"{where}: defaults"), NodeConn(), f"{where}: defaults")
    groups = {}
    for name, nodes in _mapping(obj.get("groups") or {}, f"{where}: groups").items():
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", str(name)) or not isinstance(nodes, str):
            raise BadInput(f"{where}: group {name!r} must be a name mapped to a node set string")
        if estimate_size(nodes) > MAX_NODES:
            raise BadInput(f"{where}: group {name!r} is larger than {MAX_NODES} nodes")
        groups[str(name)] = nodes
    inv = Inventory(groups=groups, defaults=defaults)
    for pattern, opts in _mapping(obj.get("nodes") or {}, f"{where}: nodes").items():
        if estimate_size(str(pattern)) > MAX_NODES:
            raise BadInput(f"{where}: nodes: {pattern!r} is larger than {MAX_NODES} nodes")
        try:
            names = list(NodeSet(str(pattern)))
        except NodeSetException as exc:
            raise BadInput(f"{where}: nodes: invalid node set {pattern!r}: {exc}") from None
        for name in names:
            base = inv.nodes.get(check_name(name), defaults)
            inv.nodes[name] = _conn(_mapping(opts or {}, f"{where}: {name}"), base, f"{where}: {name}")
    return inv


def _conn(obj: dict[str, Any], base: NodeConn, where: str) -> NodeConn:
    _no_extra(obj, _CONN_KEYS, where)
    out = base
    for key in ("address", "user", "identity_file", "known_hosts_file", "ssh_config"):
        if key in obj:
            value = str(obj[key])
            if key in ("address", "user") and not NODE_NAME.fullmatch(value):
                raise BadInput(f"{where}: {key} {value!r} is not a valid host or user name")
            if key not in ("address", "user") and (not value or value.startswith("-") or "\n" in value):
                raise BadInput(f"{where}: {key} {value!r} is not a valid path")
            if key == "ssh_config":
                _check_ssh_config(value, where)
            out = replace(out, **{key: value})  # type: ignore[arg-type]
    if "ship_python" in obj:
        from vllmdiag.sweep.ship import SHIP_PYTHON

        value = str(obj["ship_python"])
        if not re.fullmatch(SHIP_PYTHON, value):
            raise BadInput(f"{where}: ship_python {value!r} must be an absolute path of plain characters")
        out = replace(out, ship_python=value)
    if "port" in obj:
        port = obj["port"]
        if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
            raise BadInput(f"{where}: port must be an integer 1-65535")
        out = replace(out, port=port)
    if "strict_host_key_checking" in obj:
        value = obj["strict_host_key_checking"]
        value = {True: "yes", False: "no"}.get(value, value)
        if value not in STRICT_VALUES:
            raise BadInput(f"{where}: strict_host_key_checking must be one of {', '.join(STRICT_VALUES)}")
        out = replace(out, strict_host_key_checking=value)
    if "ssh_options" in obj:
        out = replace(out, ssh_options=_ssh_options(obj["ssh_options"], where))
    return out


def _check_ssh_config(path: str, where: str) -> None:
    """An ssh config file (-F) holds the same keywords as ssh_options, so the same allow-list applies to
    it (ProxyCommand, LocalCommand, Match exec, Include would run or pull in anything). A file that is
    not on this machine lives on the gateways (vllmdiag/sweep/tree.py) and cannot be checked here."""
    from vllmdiag.files.infile import InputError, read_input

    if not Path(path).exists():
        return
    try:
        text = read_input(path, "ssh config", 1 << 20)
    except InputError as exc:
        raise BadInput(f"{where}: ssh_config {exc}") from None
    for number, line in enumerate(text.splitlines(), 1):
        words = line.strip().replace("=", " ", 1).split()
        if not words or words[0].startswith("#"):
            continue
        if words[0].lower() not in SSH_OPTIONS_ALLOWED | {"host", "hostname"}:
            raise BadInput(f"{where}: ssh_config {path} line {number}: {words[0]} is not allowed (it can run "
                             "commands or change what ssh loads); allowed are the ssh_options keywords and Host")


def _ssh_options(opts: Any, where: str) -> tuple[str, ...]:
    if not isinstance(opts, list) or not all(isinstance(o, str) for o in opts):
        raise BadInput(f"{where}: ssh_options must be a list of -oKey=Value strings")
    for opt in opts:
        m = _OPTION.fullmatch(opt)
        if m is None:
            raise BadInput(f"{where}: ssh option {opt[:80]!r} must be one -oKey=Value string")
        if m.group(1).lower() not in SSH_OPTIONS_ALLOWED:
            raise BadInput(f"{where}: ssh option {m.group(1)} is not allowed (it can run commands "
                             "or change what ssh loads); allowed: Port, User, IdentityFile, ConnectTimeout, "
                             "StrictHostKeyChecking, UserKnownHostsFile, ProxyJump, ... (see the README)")
        if m.group(2).startswith("-"):
            raise BadInput(f"{where}: ssh option {m.group(1)}: a value must not start with '-'")
    return tuple(opts)


# Set by every sweep to keep it from hanging (transport.ssh_options puts them first, and ssh keeps the first
# value): a `-o` of these would be silently ignored, so it is refused, naming the option that sets it.
SET_BY_SWEEP = {"connecttimeout": "--connect-timeout", "serveraliveinterval": "vllmdiag (5 s)",
                "serveralivecountmax": "vllmdiag (2)", "loglevel": "vllmdiag (ERROR)",
                "stricthostkeychecking": "--strict-host-key-checking"}


def cli_ssh_option(text: str) -> str:
    """``sweep -o OPTION`` (clush's -o): one ssh option, ``Key=Value``, ``Key Value`` or ``-oKey=Value``, as
    ``-oKey=Value``; the inventory's allow-list applies (nothing that runs a command, loads code or config)."""
    body = text[2:] if text.startswith("-o") else text
    key, sep, value = body.strip().partition("=")
    if not sep:
        key, _, value = body.strip().partition(" ")
    key, value = key.strip(), value.strip()
    if not re.fullmatch(r"[A-Za-z]{1,64}", key) or not value:
        raise BadInput(f"-o {text[:80]!r}: give one ssh option as Key=Value (e.g. -o Port=2222)")
    option = f"-o{key}={value}"
    if key.lower() in SET_BY_SWEEP:
        raise BadInput(f"-o {key}: set by {SET_BY_SWEEP[key.lower()]}, not by -o")
    _ssh_options([option], "-o")
    return option


def _mapping(raw: Any, where: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise BadInput(f"{where}: expected a mapping, got {type(raw).__name__}")
    return raw


def _no_extra(obj: dict[str, Any], allowed: tuple[str, ...], where: str) -> None:
    extra = sorted(str(k) for k in obj if k not in allowed)
    if extra:
        raise BadInput(f"{where}: unknown key {extra[0]!r} (allowed: {', '.join(allowed)})")
