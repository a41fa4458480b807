"""Next steps that reach the node the way the sweep did: `--exec 'kubectl exec %h --'` steps say
`kubectl exec pod-3 -- py-spy dump ...`, not `ssh pod-3 ...` (there may be no ssh to that pod)."""

from __future__ import annotations

import re
import shlex

from vllmdiag.fleet.transport import Transport

_ON_NODE = re.compile(r"on (?P<node>[A-Za-z0-9_.@:+-]+): (?P<cmd>.+)", re.S)
# `ssh [-o Key=Value | -oKey=Value]... NODE COMMAND`, as the fleet playbooks write them
_SSH = re.compile(r"ssh (?:-o ?\S+ )*(?P<node>[A-Za-z0-9_.@:+-]+) (?P<cmd>.+)", re.S)


def via_transport(steps: list[str], transport: Transport) -> list[str]:
    """Rewrite node-directed steps for an exec template; ssh sweeps keep them as written."""
    if not transport.exec_template:
        return list(steps)
    out = []
    for step in steps:
        m = _ON_NODE.fullmatch(step)
        inner = _SSH.fullmatch(m["cmd"]) if m else _SSH.fullmatch(step)
        node, cmd = (inner["node"], inner["cmd"]) if inner else (m["node"], m["cmd"]) if m else (None, step)
        out.append(step if node is None else f"{exec_prefix(transport.exec_template, node)} {cmd}")
    return out


def exec_prefix(template: str, node: str) -> str:
    return shlex.join(t.replace("%h", node) for t in shlex.split(template))
