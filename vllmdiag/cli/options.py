"""The one table of command-line options, in named groups (ClusterShell's CLI/OptionParser.py installs
option groups per command: one declaration per option, with its check, for every door that takes it).

An ``Option`` is declared here once, its range check with it (``Option.check``: the one place a range is
written); a ``Group`` is options that go together (output, collection, nodes, ssh, reach, gate); a command
is the groups it installs plus its own options (``command``), in the order its --help lists them. typer's
commands (``shared.typer_command``), the collector's argparse door (a shipped node has no typer:
``add_to_parser``) and the fast triage path (``fast_flags``/``fast_values``) are all built from these
tuples, help text included (tests/unit/test_cli_fast.py holds the three readings to one;
tests/unit/test_option_groups.py the table and its checks).

Importing this module imports neither typer nor argparse: each reader is built when it is used. It ships
to the nodes with the collector (sweep/ship.py): it imports nothing of vllmdiag but errors, and that late.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    import argparse

REQUIRED: Any = ...  # the default of an argument that must be given (typer: no default at all)


class Option(NamedTuple):  # not a dataclass: dataclasses (with inspect) would cost the fast path ~8 ms
    names: tuple[str, ...]  # as typed: ("-v", "--verbose"); () for a positional argument
    param: str  # the command's keyword
    kind: type  # bool: a flag; else the value's type (int, float, str, Path)
    help: str
    default: Any = None
    many: bool = False  # repeatable: a list of values
    metavar: str | None = None
    hidden: bool = False  # read but not listed in --help (a deprecated spelling)
    limits: tuple[float, float] | None = None  # the value's range, both ends allowed (None: not given, never checked)
    unit: str = ""  # said after the range: " seconds"
    why: str | None = None  # the message when out of range, where one line speaks for two options

    @property
    def flag(self) -> bool:
        return self.kind is bool

    def but(self, **changes: Any) -> Option:
        return self._replace(**changes)

    def check(self, value: Any) -> Any:
        """The value, or BadInput (one line, exit 2) when it is out of this option's range."""
        if self.limits is None or value is None:
            return value
        low, high = self.limits
        if not low <= value <= high:
            from vllmdiag.errors import BadInput

            raise BadInput(self.why or f"{self.names[-1]} must be between {low:g} and {high:g}{self.unit}")
        return value


class Group:  # a plain class: one more NamedTuple would cost the fast path ~0.2 ms
    """Options a command installs together; ``only`` and ``but`` fit them to one command (its help words)."""

    __slots__ = ("name", "options")

    def __init__(self, name: str, options: tuple[Option, ...]) -> None:
        self.name, self.options = name, options

    def only(self, *params: str) -> Group:
        missing = set(params) - {o.param for o in self.options}
        if missing:
            raise TypeError(f"group {self.name} has no {', '.join(sorted(missing))}")
        return Group(self.name, tuple(o for o in self.options if o.param in params))

    def but(self, **changes: str | Mapping[str, Any]) -> Group:
        """Per parameter: a new help text (a str), or the fields to change (a mapping)."""
        by = {o.param: o for o in self.options}
        for param, change in changes.items():
            fields = {"help": change} if isinstance(change, str) else dict(change)
            by[param] = by[param].but(**fields)
        return Group(self.name, tuple(by.values()))


def command(*parts: Group | Option, order: str) -> tuple[Option, ...]:
    """A command's options: the groups it installs and its own options, in ``order`` (parameter names: the
    order --help lists them in, kept as users know it). Each is listed exactly once, or this raises on import."""
    installed = [o for p in parts for o in (p.options if isinstance(p, Group) else (p,))]
    by = {o.param: o for o in installed}
    names = order.split()
    if len(by) != len(installed) or sorted(names) != sorted(by):
        raise TypeError(f"order {order!r} must name each installed option once: {', '.join(sorted(by))}")
    return tuple(by[n] for n in names)


def check(options: Iterable[Option], values: Mapping[str, Any]) -> None:
    """Every option's own check, in the command's order: the first value out of range is the one line said."""
    for o in options:
        if o.limits is not None:
            o.check(values.get(o.param))


def with_defaults(options: Iterable[Option], given: dict[str, Any]) -> dict[str, Any]:
    """Every parameter of a command: those given, the table's defaults for the rest."""
    out = {o.param: o.default for o in options if o.default is not REQUIRED}
    unknown = set(given) - {o.param for o in options}
    if unknown:
        raise TypeError(f"unknown option parameter(s): {', '.join(sorted(unknown))}")
    return {**out, **given}


# ---- the fast path: which words it reads (anything else goes to typer) --------------------------------
def fast_flags(options: Iterable[Option]) -> dict[str, str]:
    """option word -> parameter, for the flags."""
    return {name: o.param for o in options if o.flag for name in o.names}


def fast_values(options: Iterable[Option]) -> dict[str, tuple[str, type, bool]]:
    """option word -> (parameter, type, repeatable), for the options that take a value."""
    return {name: (o.param, o.kind, o.many) for o in options if not o.flag for name in o.names}


# ---- argparse (the collector's door: every node runs it, typer or not) --------------------------------
def add_to_parser(parser: argparse.ArgumentParser, options: Iterable[Option]) -> None:
    for o in options:
        if o.flag:
            parser.add_argument(*o.names, dest=o.param, action="store_true", help=_help(o))
        elif o.many:
            parser.add_argument(*o.names, dest=o.param, type=o.kind, action="append", metavar=o.metavar,
                                help=_help(o))
        else:
            parser.add_argument(*o.names, dest=o.param, type=o.kind, default=o.default, metavar=o.metavar,
                                help=_help(o))


def _help(o: Option) -> str:
    import argparse

    return argparse.SUPPRESS if o.hidden else o.help


# ==== the table ====================================================================================
S = " seconds"

# ---- output: what a command prints and writes ----------------------------------------------------------
JSON = Option(("--json",), "json_out", bool, "print the JSON contract instead of the rich view", False)
SAVE = Option(("--save",), "save", Path, "also write the raw snapshot to this file")
REPORT = Option(("--report",), "report", Path, "write a self-contained .html or .md report")
VERBOSE = Option(("-v", "--verbose"), "verbose", bool, "show every row (healthy ones are folded by default)", False)
OUTPUT = Group("output", (JSON, SAVE, REPORT, VERBOSE))

# ---- collection: what a look at a node takes --------------------------------------------------------------
# -p as py-spy spells it (issue 35 item 10).
PID = Option(("-p", "--pid"), "pid", int, "only the deployment(s) containing this pid (repeatable; -p as py-spy)",
             many=True, metavar="PID")
PROBE = Option(("--probe",), "probe", str, "run only these probes (repeatable)", many=True)
BUDGET = Option(("--budget",), "budget", float, "seconds for the whole command, from its start (interpreter and "
                "imports included) to the verdict printed; partial results, never late", 8.0, metavar="S",
                limits=(0.2, 600), unit=S)
NATIVE = Option(("--native",), "native", bool, "py-spy --native (C/CUDA frames)", False)
NONBLOCKING = Option(("--nonblocking",), "nonblocking", bool, "py-spy --nonblocking (never pauses a target)", False)
NCCL_RAS = Option(("--nccl-ras",), "nccl_ras", bool, "ask NCCL's RAS service once (NCCL >= 2.24)", False)
ENABLE = Option(("--enable",), "enable", str, "turn on an opt-in probe by name (repeatable; e.g. nccl_ras, preflight)",
                many=True, metavar="PROBE")
CONFIRM = Option(("--confirm",), "confirm", float, "when work is in flight and nothing moved, keep looking up to "
                 "this many seconds before calling it a hang (0 = off)", 10.0, metavar="S", limits=(0, 600), unit=S)
NO_BOOST = Option(("--no-boost",), "no_boost", bool, "keep normal scheduling priority (default as root: SCHED_FIFO "
                  "for the command's short life; VLLMDIAG_BOOST=0 too)", False)
COLLECTION = Group("collection", (PID, PROBE, BUDGET, NATIVE, NONBLOCKING, NCCL_RAS, ENABLE, CONFIRM, NO_BOOST))
NODE = Option(("--node",), "node", str, "node name to record (default: hostname)")

# ---- nodes: which nodes a sweep reaches (clush's -w/-x/-g/-X/--hostfile) ----------------------------------------
NODES = Group("nodes", (
    Option((), "nodeset", str, "nodes in ClusterShell syntax, e.g. 'gpu[00-47]' or '@group'"),
    Option(("-w",), "nodes", str, "more nodes (ClusterShell syntax; repeatable)", many=True),
    Option(("-x",), "exclude", str, "exclude these nodes (ClusterShell syntax, as clush -x; repeatable)", many=True),
    Option(("-g", "--group"), "group", str, "the nodes of this group (as clush -g; @GROUP too): --inventory's groups, "
           "else ClusterShell's groups.conf/groups.d", many=True),
    Option(("-X",), "exclude_group", str, "exclude the nodes of this group (as clush -X)", many=True),
    Option(("--hostfile",), "hostfile", Path, "file with one node (set) per line"),
    Option(("--inventory",), "inventory", Path, "fleet YAML: groups, per-node ssh options"),
))

# ---- ssh: how each node is reached, as clush -l/-o/-u/-t/-f ----------------------------------------------------
# -u and -t share one line: it says both ranges.
TIMEOUTS = "--timeout must be 0.5-3600 s and --connect-timeout 0.5-600 s"
SSH = Group("ssh", (
    Option(("-l",), "user", str, "ssh login user (as clush -l; wins over the inventory's)"),
    Option(("-o",), "ssh_option", str, "ssh options as clush -o takes them ('-oPort=2222 -oUser=x', or Key=Value; "
           "repeatable), split into an argv list, never a shell; those that run commands or load config are refused",
           many=True),
    Option(("-u", "--timeout"), "timeout", float, "per-node deadline in seconds, connect + collect (as clush -u, the "
           "command timeout)", 20.0, limits=(0.5, 3600), why=TIMEOUTS),
    Option(("-t", "--connect-timeout"), "connect_timeout", float, "ssh connect timeout in seconds (as clush -t)", 5.0,
           limits=(0.5, 600), why=TIMEOUTS),
    Option(("--sweep-timeout",), "sweep_timeout", float, "whole-sweep deadline in seconds", limits=(0.5, 86400), unit=S),
    Option(("-f", "--fanout"), "fanout", int, "nodes contacted at once (as clush -f)", 64, limits=(1, 4096)),
    Option(("--strict-host-key-checking",), "strict", str, "yes | no | accept-new"),
))

# ---- reach: what runs on a node, and through which hops -----------------------------------------------------
REACH = Group("reach", (
    Option(("--exec",), "exec_template", str, "command prefix per node, %h = node: 'kubectl exec %h --'"),
    Option(("--remote-cmd",), "remote_cmd", str, "the vllmdiag program on the nodes", "vllmdiag"),
    Option(("--ship",), "ship", bool, "copy a self-contained collector and run it with vLLM's Python", False),
    # typer's spelling of an on/off flag: only typer reads sweep's options.
    Option(("--ship-py-spy/--no-ship-py-spy",), "ship_py_spy", bool, "with --ship: bundle py-spy too", True),
    Option(("--ship-python",), "ship_python", str, "with --ship: the node's Python to run (root-owned, not writable by "
           "others); default: vLLM's if trusted, else /usr/bin/python3"),
    Option(("--gateway",), "gateway", str, "sweep through this ClusterShell gateway (repeatable)", many=True),
    Option(("--topology",), "topology", Path, "ClusterShell topology.conf: sweep through its gateways"),
))

# ---- gate files: what the pre-rollout gate takes and writes ------------------------------------------------
GATE_FILES = Group("gate", (
    Option(("--tp",), "tp", int, "planned tensor-parallel size on this node (overrides the config)"),
    Option(("--junit",), "junit", Path, "write JUnit XML here (one testsuite, one testcase per check)"),
    Option(("--prom",), "prom", Path, "write a Prometheus textfile here (node_exporter)"),
))

# ---- the commands ---------------------------------------------------------------------------------------
# The old name, easily taken for `vllmdiag watch`: still read, says once on stderr that it is --rates now
# (checked as --rates once merged into it).
RATES = Option(("--rates",), "rates", float, "observe this many seconds and report rates (rings, tokens/s); "
               "the resident watcher is `vllmdiag watch`", 0.0, metavar="S", limits=(0, 3600), unit=S)
TRIAGE = command(
    OUTPUT, COLLECTION, RATES,
    Option(("--probe-request",), "probe_request", bool, "send one 1-token completion to the API", False),
    Option(("--watch",), "watch", float, "deprecated spelling of --rates", 0.0, hidden=True),
    order="json_out save report pid probe budget native nonblocking nccl_ras probe_request enable rates watch confirm "
          "verbose no_boost")

COLLECT = command(
    OUTPUT.only("json_out").but(json_out="print the snapshot as JSON (default when --out is not given)"),
    COLLECTION.but(
        budget="seconds for the whole command, from its start (interpreter and imports included) to the snapshot "
               "written; partial results, never late",
        pid="limit stacks/rings to these deployments (repeatable; -p as py-spy)",
        # collect's own default is 0 (one quick look): a sweep passes its --confirm (default 10) to each node.
        confirm={"default": 0.0, "help": "when work is in flight and nothing moved, keep looking up to S seconds "
                 "(0 = off, collect's default: one quick look; `sweep --confirm`, default 10, passes its own)"},
        no_boost="keep normal scheduling priority (default as root: SCHED_FIFO for the collection's short life)"),
    Option(("--out",), "out", Path, "write the snapshot to this file"),
    Option(("--preflight",), "preflight", bool, "also collect the gate's preflight facts", False),
    NODE,
    order="json_out out probe budget pid native nonblocking nccl_ras preflight enable confirm node no_boost")

ANALYZE = command(
    Option((), "files", Path, "snapshot files, triage --json outputs, or sweep --save dirs", REQUIRED, many=True),
    OUTPUT.only("json_out", "report", "verbose").but(json_out="print the JSON contract"),
    PID.but(help="only the deployment(s) containing this pid", metavar=None),
    order="files json_out report pid verbose")

SWEEP = command(
    NODES, SSH, REACH,
    COLLECTION.only("probe", "enable", "confirm").but(
        probe="run only these probes on the nodes",
        enable={"help": "turn on an opt-in probe on the nodes (repeatable)", "metavar": None},
        confirm={"metavar": None, "help": "a node that sees work in flight and nothing moving keeps looking up to this many "
                 "seconds (nodes in parallel; the sweep's deadline grows by it unless --sweep-timeout is given); "
                 "0 = off, also the cross-node resample"}),
    Option(("--no-confirm",), "no_confirm", bool, "same as --confirm 0", False),
    OUTPUT.but(json_out="print the fleet JSON contract", save="write one snapshot JSON per node into this directory"),
    Option(("--gate",), "gate", bool, "run the pre-rollout gate on every node instead of triage", False),
    Option(("--gate-config",), "gate_config", Path, "gate YAML (see `vllmdiag gate --default-config`)"),
    GATE_FILES.but(tp="with --gate: planned tensor-parallel size per node", junit="with --gate: write JUnit XML here",
                   prom="with --gate: write a node_exporter textfile here (NAME.prom)"),
    order="nodeset nodes exclude group exclude_group user ssh_option hostfile inventory exec_template remote_cmd ship "
          "ship_py_spy ship_python timeout connect_timeout sweep_timeout fanout gateway topology strict probe enable "
          "confirm no_confirm json_out save report gate gate_config tp junit prom verbose")

GATE = command(
    Option(("--config",), "config", Path, "gate YAML (thresholds, required/advisory checks, ports)"),
    Option(("--url",), "url", str, "a deployed API (http://host:port): /health, /metrics, 1-token completion"),
    GATE_FILES, OUTPUT.only("json_out").but(json_out="print the results (and the snapshot) as JSON"),
    Option(("--default-config",), "show_config", bool, "print the documented default config and exit", False),
    Option(("--nagios",), "nagios", bool, "a Nagios/Icinga plugin: one line, exit 0 OK, 1 WARNING, 2 CRITICAL (a "
           "required check failed), 3 UNKNOWN (one could not look, or the gate could not run)", False),
    order="config tp url junit json_out prom show_config nagios")

WATCH = command(
    Option(("--out",), "out", Path, "directory for the snapshots and reports of stalls (default: /var/lib/vllmdiag/"
           "watch as root, else $XDG_STATE_HOME/vllmdiag/watch)"),
    Option(("--interval",), "interval", float, "seconds between cheap passes", 5.0, limits=(0.2, 3600), unit=S),
    COLLECTION.only("confirm", "budget").but(
        confirm={"help": "seconds the triage looks at a suspected stall (0: off)", "metavar": None},
        budget={"help": "collection seconds of the triage a stall opens", "metavar": None}),
    Option(("--keep",), "keep", int, "keep at most this many stalls in --out (oldest removed)", 50,
           limits=(1, 100000)),
    Option(("--max-bytes",), "max_bytes", str, "keep --out under this size, e.g. 256M", "256M"),
    Option(("--report-format",), "report_format", str, "html or md", "html"),
    Option(("--on-stall",), "on_stall", str, "command per stall (no shell); gets the snapshot path"),
    Option(("--on-stall-timeout",), "on_stall_timeout", float, "seconds before the command is killed", 30.0,
           limits=(0.1, 3600), unit=S),
    Option(("--webhook",), "webhook", str, "POST each stall's JSON to this http(s) URL"),
    Option(("--webhook-timeout",), "webhook_timeout", float, "seconds for the whole POST", 5.0, limits=(0.1, 600),
           unit=S),
    Option(("--metrics-port",), "metrics_port", int, "serve Prometheus /metrics here (0: any free port)",
           limits=(0, 65535)),
    Option(("--metrics-addr",), "metrics_addr", str, "address for --metrics-port", "127.0.0.1"),
    NODE.but(help="node name in logs, files and metrics (default: hostname)"),
    Option(("--select",), "select", str, "only deployments whose root has env KEY=VALUE", many=True),
    Option(("--gone-grace",), "gone_grace", float, "/livez fails once no watched deployment has been seen this many "
           "seconds (a restart in progress is not a hang)", 300.0, limits=(0, 86400), unit=S),
    Option(("--textfile",), "textfile", Path, "after each pass write the metrics for node_exporter: DIR (its textfile "
           "directory) or FILE.prom"),
    Option(("--max-passes",), "max_passes", int, "stop after this many passes", hidden=True),
    order="out interval confirm keep max_bytes report_format on_stall on_stall_timeout webhook webhook_timeout "
          "metrics_port metrics_addr budget node select gone_grace textfile max_passes")
