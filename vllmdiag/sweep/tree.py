"""Fleets past one fanout: the sweep through ClusterShell gateways (tree mode).

The root reaches each gateway over ssh and starts ClusterShell's gateway there
(``python3 -m ClusterShell.Gateway``; ``CLUSTERSHELL_GW_PYTHON_EXECUTABLE`` names another interpreter,
which needs ClusterShell installed). Each gateway runs the collect on its share of the nodes over its
own ssh, with the ssh options ClusterShell hands down from the root (ours: BatchMode, timeouts, keys,
``-F ssh_config``), and streams every node's output back, so the root holds a few connections instead of
one per node. Per-node settings cannot travel down a tree as argv: they belong in an ssh config file
(inventory ``defaults.ssh_config``) present on the gateways. The command is one string for every node
(``%h`` becomes the node name on the gateway), built from names already checked by ``nodes.check_name``.
"""

from __future__ import annotations

import shlex
import socket
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vllmdiag.errors import BadInput
from vllmdiag.sweep.inventory import NodeConn
from vllmdiag.sweep.nodes import check_name
from vllmdiag.sweep.transport import remote_argv, ssh_options

if TYPE_CHECKING:
    from vllmdiag.sweep.fanout import SweepPlan


@dataclass(frozen=True)
class TreeSpec:
    gateways: tuple[str, ...] = ()  # --gateway: root -> these -> every node
    topology_file: str | None = None  # --topology: ClusterShell's topology.conf ([routes] section)


def local_name() -> str:
    """The root's name in a topology: ClusterShell uses the short host name too."""
    return socket.gethostname().split(".")[0]


def check(plan: SweepPlan) -> None:
    spec = plan.tree
    if spec is None:
        return
    if bool(spec.gateways) == bool(spec.topology_file):
        raise BadInput("give either --gateway or --topology")
    if plan.transport.exec_template:
        raise BadInput("--gateway/--topology sweep over ssh; they do not combine with --exec")
    if plan.transport.ship:
        raise BadInput("--ship does not go through gateways yet: install vllmdiag on the nodes (--remote-cmd)")
    for gw in spec.gateways:
        check_name(gw)
    both = set(spec.gateways) & set(plan.nodes)
    if both:
        raise BadInput(f"{sorted(both)[0]} is both a gateway and a node to sweep")
    inv = plan.inventory
    odd = sorted(n for n in plan.nodes if inv is not None and n in inv.nodes and inv.nodes[n] != inv.defaults)
    if odd:
        raise BadInput(f"inventory settings for {odd[0]} cannot travel through a gateway: put them in an ssh "
                         "config file on the gateways (inventory defaults.ssh_config)")


def topology(spec: TreeSpec, nodes: list[str]) -> tuple[Any, str]:
    """ClusterShell's TopologyTree rooted at this host, from --topology or root -> gateways -> nodes."""
    from ClusterShell.NodeSet import NodeSet
    from ClusterShell.Topology import TopologyError, TopologyParser

    root = local_name()
    try:
        if spec.topology_file:
            from vllmdiag.files.infile import InputError, read_input

            try:
                text = read_input(Path(spec.topology_file), "topology", 1 << 20)  # regular file, size cap (issue 15)
            except InputError as exc:
                raise BadInput(f"--topology {exc}") from None
        else:
            gws, targets = NodeSet.fromlist(list(spec.gateways)), NodeSet.fromlist(nodes)
            text = f"[routes]\n{root}: {gws}\n{gws}: {targets}\n"
        with tempfile.NamedTemporaryFile("w", suffix=".conf", prefix="vllmdiag-topology-") as f:
            f.write(text)
            f.flush()
            return TopologyParser(f.name).tree(root), root
    except (TopologyError, ValueError, KeyError) as exc:
        raise BadInput(f"topology: {exc or type(exc).__name__} (the root is this host, {root!r})") from None


def schedule(task: Any, plan: SweepPlan, handler: Any) -> Any:
    """A TreeWorker running the collect on every node through the gateways; returns it."""
    from ClusterShell.NodeSet import NodeSet

    assert plan.tree is not None
    conn = plan.inventory.defaults if plan.inventory else NodeConn()
    # Task info travels to every gateway with the command: both hops use the same ssh settings.
    task.set_info("ssh_path", plan.transport.ssh_path)
    task.set_info("ssh_options", shlex.join(ssh_options(plan.transport, conn)))
    task.set_info("connect_timeout", plan.transport.connect_timeout_s)
    tree, root = topology(plan.tree, plan.nodes)
    task.topology = tree  # what the root sends each gateway (its ConfigurationMessage)
    command = shlex.join(remote_argv(plan.transport, "%h", plan.budget_s, conn))
    worker = _tree_worker_class()(NodeSet.fromlist(plan.nodes), handler, plan.node_timeout_s, command=command,
                                  topology=tree, newroot=root, stderr=True)
    task.schedule(worker)
    return worker


def _tree_worker_class() -> Any:
    from ClusterShell.NodeSet import NodeSet
    from ClusterShell.Propagation import RouteResolvingError
    from ClusterShell.Worker.Tree import TreeWorker
    from ClusterShell.Worker.Worker import DistantWorker

    class Tree(TreeWorker):
        """When a gateway fails and no other can take its nodes, ClusterShell raises out of the
        engine loop (RouteResolvingError), which would end the whole sweep: here those nodes end as
        unreachable (exit 255, the reason on stderr) and the sweep goes on with the others."""

        def _relaunch(self, previous_gateway: Any) -> None:
            targets = list(NodeSet.fromlist(self.gwtargets.get(previous_gateway, [])))
            try:
                super()._relaunch(previous_gateway)
            except RouteResolvingError as exc:
                for node in targets:
                    self._target_count += 1
                    why = f"gateway {previous_gateway} unreachable and no other route: {exc}"
                    DistantWorker._on_node_msgline(self, node, why.encode(), "stderr")
                    DistantWorker._on_node_close(self, node, 255)
                    self._close_count += 1
                self._check_fini()

    return Tree
