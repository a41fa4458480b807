"""Which nodes a sweep talks to: node sets (ClusterShell syntax, inventory groups) and host files (pure).

Node names end up in argv lists (``ssh NODE``, ``kubectl exec NODE --``) and in the remote
command line that ssh hands to the remote shell, so every name is checked against a strict
pattern before anything runs: a hostile name is rejected, never quoted and hoped for.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vllmdiag.errors import BadInput
from vllmdiag.model.fleet import NODE_NAME, natural_key

if TYPE_CHECKING:
    from vllmdiag.sweep.inventory import Inventory

MAX_NODES = 100_000


def check_name(name: str) -> str:
    if not NODE_NAME.fullmatch(name):
        raise BadInput(f"invalid node name {name!r}: only letters, digits and _.:+- are allowed (no leading -)")
    return name


def resolve_nodes(patterns: list[str], hostfile: Path | None = None, inventory: Inventory | None = None,
                  deadline: float | None = None) -> list[str]:
    """Expand ClusterShell node sets (``gpu[00-47]``, ``@group`` from the inventory) into checked names.

    Plain names (a hostfile's usual line) skip ClusterShell, whose set updates grow with the set (100,000
    lines took a minute); only real node-set syntax is parsed. ``deadline`` (monotonic): resolution is
    part of the sweep's time and gives up with a one-line error past it."""
    texts = list(patterns)
    if hostfile is not None:
        texts += _read_hostfile(hostfile)
    if not texts and inventory is not None:
        texts = [",".join(f"@{g}" for g in inventory.groups) or ",".join(inventory.nodes)]
    texts = [t for t in texts if t]
    if not texts:
        raise BadInput("no nodes given: pass a node set (gpu[00-47]), -w, --hostfile or --inventory")
    if len(texts) > MAX_NODES:
        raise BadInput(f"node list too long: more than {MAX_NODES} entries")
    plain: dict[str, None] = {}
    sets: list[str] = []
    for i, text in enumerate(texts):
        if "\n" in text or "\r" in text or "\0" in text:
            raise BadInput("invalid node set: contains a line break or NUL")
        if NODE_NAME.fullmatch(text) and "[" not in text:
            plain[text] = None
        else:
            sets.append(text)
        if deadline is not None and i % 1024 == 0:
            _in_time(deadline)
    names = _expand(sets, inventory, deadline) if sets else []
    if not plain:
        if not names:  # a gate over nothing must never pass (issue 25 item 5)
            raise BadInput(f"node set {','.join(sets)[:200]!r} names no nodes")
        return names
    merged = dict.fromkeys(names)
    merged.update(plain)
    if len(merged) > MAX_NODES:
        raise BadInput(f"node set too large: more than {MAX_NODES} nodes")
    return sorted(merged, key=natural_key)


def _expand(texts: list[str], inventory: Inventory | None, deadline: float | None) -> list[str]:
    from ClusterShell.NodeSet import NodeSet, NodeSetException
    from ClusterShell.NodeUtils import GroupResolverError, GroupSourceError

    resolver = _resolver(inventory)
    total = NodeSet(resolver=resolver)
    for text in texts:
        _check_groups(text, inventory, resolver)
        if estimate_size(text) > MAX_NODES:  # ClusterShell expands ranges into sets: check before parsing
            raise BadInput(f"node set too large: more than {MAX_NODES} nodes")
        try:
            total.update(NodeSet(text, resolver=resolver))
        except (NodeSetException, GroupResolverError, GroupSourceError, ValueError) as exc:
            raise BadInput(f"invalid node set {text!r}: {str(exc).splitlines()[0] if str(exc) else exc}") from None
        if len(total) > MAX_NODES:
            raise BadInput(f"node set too large: more than {MAX_NODES} nodes")
        if deadline is not None:
            _in_time(deadline)
    return [check_name(n) for n in total]


_GROUP = re.compile(r"@(?:[A-Za-z0-9_.+-]*:)?([A-Za-z0-9_.+*-]+)")
_GROUP_REF = re.compile(r"@(?:[A-Za-z0-9_.+-]*:)?[A-Za-z0-9_.+*-]+")
CLUSH_GROUPS = "ClusterShell's groups (/etc/clustershell/groups.conf, groups.d/*.yaml)"


def _resolver(inventory: Inventory | None) -> Any:
    """The inventory's groups when --inventory is given; else ClusterShell's own resolution, as clush reads
    `@group` (groups.conf and its groups.d YAML sources; issue 35 item 10)."""
    if inventory is not None:
        from ClusterShell.NodeUtils import GroupResolver, GroupSource

        return GroupResolver(GroupSource("inventory", groups=dict(inventory.groups)))
    from ClusterShell.NodeSet import std_group_resolver

    return std_group_resolver()


def _check_groups(text: str, inventory: Inventory | None, resolver: Any = None) -> None:
    """``@name`` must be a group that names nodes: ClusterShell expands an unknown or empty group to
    nothing, and ``sweep @typo --gate`` then passed over zero nodes (issue 25 item 5)."""
    if inventory is None:
        for ref in _GROUP_REF.findall(text):
            _check_clush_group(ref, resolver)
        return
    for name in _GROUP.findall(text):
        if name == "*" and inventory.groups:
            continue  # ClusterShell's every group
        if name not in inventory.groups:
            known = ", ".join(sorted(inventory.groups)[:10]) or "none"
            raise BadInput(f"@{name}: no such group in the inventory (its groups: {known})")
        if not str(inventory.groups[name]).strip():
            raise BadInput(f"@{name}: the inventory's group is empty")


def _check_clush_group(ref: str, resolver: Any) -> None:
    """`@rack1` or `@site:rack1` through ClusterShell's resolver: a group it does not know, or one that names
    no node, is a usage error naming where groups come from (one line, exit 2)."""
    from ClusterShell.NodeSet import NodeSet, NodeSetException
    from ClusterShell.NodeUtils import GroupResolverError, GroupSourceError

    try:
        found = len(NodeSet(ref, resolver=resolver))
    except (NodeSetException, GroupResolverError, GroupSourceError, ValueError, OSError) as exc:
        raise BadInput(f"{ref}: {CLUSH_GROUPS} cannot resolve it ({str(exc).splitlines()[0][:200]})") from None
    if not found:
        raise BadInput(f"{ref}: no such group, or it names no node, in {CLUSH_GROUPS}; or give --inventory "
                       "(a fleet YAML with groups:)")


def _in_time(deadline: float) -> None:
    import time

    if time.monotonic() > deadline:
        raise BadInput("the node list took longer than --sweep-timeout to resolve; split it or raise the timeout")


def estimate_size(text: str) -> int:
    """Upper bound of the nodes a node-set string names, from its bracket ranges alone (cheap)."""
    total = 0
    for element in re.split(r",(?![^\[]*\])", text):
        count = 1
        for body in re.findall(r"\[([^\]]*)\]", element):
            size = 0
            for part in body.split(","):
                lo, _, hi = part.partition("-")
                bounds = re.findall(r"\d+", lo), re.findall(r"\d+", hi)
                size += abs(int(bounds[1][0]) - int(bounds[0][0])) + 1 if bounds[0] and bounds[1] else 1
            count *= max(1, size)
        total += count
    return total


def _read_hostfile(path: Path) -> list[str]:
    from vllmdiag.files.infile import InputError, read_input

    try:
        lines = read_input(path, "hostfile", 64 << 20).splitlines()  # regular file, never blocks, capped
    except InputError as exc:
        raise BadInput(f"--hostfile {exc}") from None
    return [line.split("#", 1)[0].strip() for line in lines if line.split("#", 1)[0].strip()]
