"""Rank groups that span nodes (multi-node TP/PP, DP across nodes), joined and checked as one (pure).

Each node alone sees only its share of a multi-node group (node-rank 1 of a TP=8 group runs
``Worker_TP4``..``Worker_TP7``), so its process layer reports the other node's ranks as missing.
Here the shares are joined by the rendezvous address the group's command lines carry
(``--master-addr``/``--master-port``, ``--data-parallel-address``/``--data-parallel-rpc-port``,
or ``MASTER_ADDR``/``MASTER_PORT`` in the environment), the node-local ``process.rank_missing``
findings are replaced by one check over the union (``checks/rank_missing.py``), and ranks that live
on a node that did not answer are attributed to it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vllmdiag.analysis.views.deployments import Deployment

_ADDR_FLAGS = (("--master-addr", "--master-port"), ("--data-parallel-address", "--data-parallel-rpc-port"))


@dataclass
class Member:
    node: str
    deployment: Deployment
    node_rank: int | None
    nnodes: int | None
    headless: bool = False


@dataclass
class RankGroup:
    key: str
    members: list[Member] = field(default_factory=list)

    @property
    def nodes(self) -> list[str]:
        return sorted({m.node for m in self.members})

    @property
    def nnodes(self) -> int:
        return max([m.nnodes or 1 for m in self.members] + [len(self.nodes)])


def group_key(dep: Deployment) -> tuple[str | None, int | None, int | None]:
    """(rendezvous key, node rank, nnodes) from the deployment's command lines and environment."""
    key = None
    node_rank = nnodes = None
    for proc in dep.processes:
        argv = [str(a) for a in proc.get("cmdline") or []]
        flags = _flags(argv)
        for addr_flag, port_flag in _ADDR_FLAGS:
            if key is None and (addr_flag in flags or port_flag in flags):
                # vLLM's --master-addr defaults to 127.0.0.1; the port alone still names the group.
                key = f"{flags.get(addr_flag, '127.0.0.1')}:{flags.get(port_flag, '')}"
        node_rank = node_rank if node_rank is not None else _int(flags.get("--node-rank"))
        nnodes = nnodes if nnodes is not None else _int(flags.get("--nnodes"))
        env = proc.get("environ") or {}
        if key is None and env.get("MASTER_ADDR") and _int(env.get("WORLD_SIZE")) not in (None, 1):
            key = f"{env['MASTER_ADDR']}:{env.get('MASTER_PORT', '')}"
    if key is not None and (nnodes or 1) <= 1 and node_rank in (None, 0):
        key = None if "--headless" not in _all_args(dep) else key
    return key, node_rank, nnodes


def join(per_node: dict[str, list[Deployment]]) -> list[RankGroup]:
    groups: dict[str, RankGroup] = {}
    for node, deps in per_node.items():
        for dep in deps:
            key, node_rank, nnodes = group_key(dep)
            if key is not None:
                member = Member(node, dep, node_rank, nnodes, "--headless" in _all_args(dep))
                groups.setdefault(key, RankGroup(key)).members.append(member)
    return sorted(groups.values(), key=lambda g: g.key)


def _flags(argv: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for i, arg in enumerate(argv):
        name, eq, inline = arg.partition("=")
        if name.startswith("--"):
            out.setdefault(name, inline if eq else (argv[i + 1] if i + 1 < len(argv) else ""))
    return out


def _all_args(dep: Deployment) -> set[str]:
    return {str(a) for p in dep.processes for a in p.get("cmdline") or []}


def _int(value: Any) -> int | None:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return None
