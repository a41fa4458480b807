"""Next steps that reach the node the way the sweep did: `--exec 'kubectl exec %h --'` steps say
`kubectl exec pod-3 -- py-spy dump ...`, not `ssh pod-3 ...` (there may be no ssh to that pod).

Pure string work on the steps and the template, shared by the fleet (the verdict's steps) and render
(each finding's confirm commands in a report), so neither has to import the other."""

from __future__ import annotations

import re
import shlex

_ON_NODE = re.compile(r"on (?P<node>[A-Za-z0-9_.@:+-]+): (?P<cmd>.+)", re.S)
# `ssh [-o Key=Value | -oKey=Value]... NODE COMMAND`, as the fleet playbooks write them
_SSH = re.compile(r"ssh (?:-o ?\S+ )*(?P<node>[A-Za-z0-9_.@:+-]+) (?P<cmd>.+)", re.S)


def via_exec(steps: list[str], exec_template: str | None) -> list[str]:
    """Rewrite node-directed steps for an exec template (``%h`` = the node); without one (ssh sweeps) or
    with one that does not parse or names no node (a saved report is untrusted) they stay as written."""
    if not exec_template or not valid_template(exec_template):
        return list(steps)
    out = []
    for step in steps:
        m = _ON_NODE.fullmatch(step)
        inner = _SSH.fullmatch(m["cmd"]) if m else _SSH.fullmatch(step)
        node, cmd = (inner["node"], inner["cmd"]) if inner else (m["node"], m["cmd"]) if m else (None, step)
        out.append(step if node is None else f"{exec_prefix(exec_template, node)} {cmd}")
    return out


def valid_template(template: str) -> bool:
    try:
        return any("%h" in t for t in shlex.split(template))
    except ValueError:  # unbalanced quotes
        return False


def exec_prefix(template: str, node: str) -> str:
    return shlex.join(t.replace("%h", node) for t in shlex.split(template))
