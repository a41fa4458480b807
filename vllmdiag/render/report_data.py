"""What the report files show, read from `report.render_dict()` only (pure): the JSON contract plus the
typed sections analysis attached (`Report.sections`: each node's rings and stacks, analysis/sections.py).

The HTML and Markdown reports share these readers, so both say the same thing. Everything here
formats: a saved `triage --json` output gets its sections when it is read back, so it renders the same
as a live run. Nothing here decides a ring's role, a stack class or a blamed reader.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from vllmdiag.model.report import CollectionRow, NodeSection, RingRow, short_label
from vllmdiag.model.verdict import LAYERS

SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}
STATUS_ORDER = {"blocked": 0, "degraded": 1, "inconclusive": 2, "starting": 3, "no-deployment": 4, "healthy": 5}


@dataclass
class NodeData:
    """One node of the report: its deployments and findings, who is blamed there, and its section."""

    name: str
    deployments: list[dict[str, Any]] = field(default_factory=list)
    findings: list[dict[str, Any]] = field(default_factory=list)
    culprit_pids: set[int] = field(default_factory=set)
    culprit_ranks: set[int] = field(default_factory=set)
    section: NodeSection | None = None  # its rings, stacks, endpoints, servers and GPUs (``sections``)

    @property
    def pids(self) -> set[int]:
        return {int(p["pid"]) for d in self.deployments for p in d.get("processes", [])}

    def procs(self) -> dict[int, dict[str, Any]]:
        return {int(p["pid"]): p for d in self.deployments for p in d.get("processes", [])}


def collection(d: dict[str, Any]) -> list[CollectionRow]:
    """How each snapshot was collected (``Report.collection``, analysis/sections.py), in their order."""
    raw = d.get("collection")
    return [c for c in raw if isinstance(c, CollectionRow)] if isinstance(raw, list) else []


def nodes(d: dict[str, Any]) -> list[NodeData]:
    """Nodes worst first (their deployments' status), each with what belongs to it."""
    raw = d.get("sections")
    sections: dict[str, Any] = raw if isinstance(raw, dict) else {}
    out = {c.node: NodeData(c.node, section=sections.get(c.node)) for c in collection(d)}
    for dep in d.get("deployments", []):
        node = out.setdefault(str(dep.get("node")), NodeData(str(dep.get("node"))))
        node.deployments.append(dep)
    for f in d.get("findings", []):
        if str(f.get("node")) in out:
            out[str(f.get("node"))].findings.append(f)
    culprits = list((d.get("verdict") or {}).get("culprits") or [])
    culprits += [c for dep in d.get("deployments", []) for c in (dep.get("verdict") or {}).get("culprits") or []]
    for c in culprits:
        blamed = out.get(str(c.get("node")))
        if blamed is not None and c.get("pid") is not None:
            blamed.culprit_pids.add(int(c["pid"]))
        if blamed is not None and c.get("rank") is not None and c.get("role") == "worker":
            blamed.culprit_ranks.add(int(c["rank"]))
    return sorted(out.values(), key=lambda n: (_node_rank(n), n.name))


def vllm_label(dep: dict[str, Any]) -> str:
    """``vLLM 0.32.0``: the version analysis read of the deployment's install, "" when not seen. Every
    view shows it in the deployment's header line, from here. Untrusted text: callers escape it."""
    version = dep.get("vllm_version")
    return f"vLLM {version[:80]}" if isinstance(version, str) and version else ""


def _node_rank(n: NodeData) -> int:
    statuses = [(dep.get("verdict") or {}).get("status", "healthy") for dep in n.deployments] or ["no-deployment"]
    return min(STATUS_ORDER.get(s, 5) for s in statuses)


def node_status(n: NodeData) -> str:
    """The worst status among the node's deployments (``no-deployment`` when it has none)."""
    return min(((dep.get("verdict") or {}).get("status", "healthy") for dep in n.deployments),
               key=lambda s: STATUS_ORDER.get(s, 5), default="no-deployment")


def node_why(d: dict[str, Any], n: dict[str, Any]) -> str:
    """The fleet grid's "why" for one node entry: what fleet analysis wrote (``why``); a report written
    before it has only the reason a node did not answer, or its deployments' verdict summary."""
    if n.get("why"):
        return str(n["why"])
    if n.get("status") != "ok":
        return str(n.get("reason") or n.get("status") or "")
    if n.get("verdict") in ("healthy", "no-deployment", None, ""):
        return ""
    worst = sorted((dep.get("verdict") or {} for dep in d.get("deployments") or [] if dep.get("node") == n.get("name")),
                   key=lambda v: STATUS_ORDER.get(str(v.get("status")), 5))
    return str(worst[0].get("summary") or "") if worst else ""


def sorted_findings(findings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(findings, key=lambda f: (SEVERITY_ORDER.get(f.get("severity", ""), 3), LAYERS.index(f["layer"])
                                           if f.get("layer") in LAYERS else 9, str(f.get("code"))))


def fold(names: list[str]) -> str:
    """`gpu[00,02-03]`; names that are not plain node names (untrusted) are listed as they are."""
    plain = all(re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", n) for n in names)
    if plain and names:
        try:
            from ClusterShell.NodeSet import NodeSet

            return str(NodeSet.fromlist(names))
        except Exception:  # noqa: BLE001 - folding is cosmetic; the plain list is always right
            pass
    return ",".join(names)


def said(text: Any, summary: Any) -> bool:
    """Is `text` (a culprit's reason, an evidence line) already in the summary? Then a view does not repeat it:
    the summary once, not four times before the findings (issue 35 item 8)."""
    core = str(text or "").strip().rstrip(".")
    core = core.split(": ", 1)[1] if core.startswith(("straggler: ", "mismatch: ", "missing: ")) else core
    return bool(core) and core in str(summary or "")


def unsaid_evidence(v: dict[str, Any], limit: int = 20) -> list[Any]:
    """The verdict's evidence less the lines its summary already says."""
    return [e for e in v.get("evidence") or [] if not said(e, v.get("summary"))][:limit]


def hosts(names: list[str], limit: int = 12) -> str:
    """The report header's hosts as one folded node set (`gpu[00-03]`), never a long list (issue 35 item 8)."""
    folded = fold(sorted(set(names)))
    if len(folded) <= 200:
        return folded
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def report_hosts(d: dict[str, Any], nodes: list[NodeData]) -> list[str]:
    """Every host of the report: a sweep's nodes (those not reached too), else the snapshots' nodes."""
    fleet = [str(n.get("name")) for n in d.get("nodes") or [] if isinstance(n, dict) and n.get("name")]
    return fleet or [n.name for n in nodes]


def not_seen(d: dict[str, Any], snaps: list[CollectionRow]) -> list[str]:
    """What the report could not see: the probes that did not, and the nodes a sweep did not reach."""
    groups: dict[str, list[str]] = {}
    for n in d.get("nodes") or []:
        if isinstance(n, dict) and n.get("status") not in ("ok", None):
            cause = str(n.get("reason") or "").split(": ", 1)[0]
            groups.setdefault(f"{n.get('status')}" + (f" ({cause})" if cause else ""), []).append(str(n.get("name")))
    return [f"{fold(names)}: {what}" for what, names in groups.items()] + folded_probe_problems(snaps)


def budget(snaps: list[CollectionRow]) -> str:
    """One budget for the header: `8 s`, or a range when nodes' collectors got different shares of theirs
    (each collector gets what its command's start left): `7.1-7.3 s`, never one entry per node."""
    got = sorted({round(float(b), 1) for b in (s.budget_s for s in snaps)
                  if isinstance(b, (int, float)) and not isinstance(b, bool)})
    if not got:
        return ""
    return f"{got[0]:g} s" if len(got) == 1 else f"{got[0]:g}-{got[-1]:g} s"


def folded_findings(findings: list[dict[str, Any]]) -> list[tuple[dict[str, Any], str]]:
    """Identical findings on several nodes (same code, severity and message) shown once with the node set."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for f in sorted_findings(findings):
        groups.setdefault((str(f.get("code")), str(f.get("severity")), str(f.get("message"))), []).append(f)
    return [(fs[0], fold(list(dict.fromkeys(str(f.get("node")) for f in fs)))) for fs in groups.values()]


def folded_probe_problems(snaps: list[CollectionRow]) -> list[str]:
    groups: dict[tuple[str, str, str], list[str]] = {}
    for s in snaps:
        for probe, status, why in s.probe_problems:
            groups.setdefault((probe, status, why), []).append(str(s.node))
    return [f"{fold(names)}: {probe} {status}" + (f" ({why})" if why else "") for (probe, status, why), names in groups.items()]


def confirm_commands(d: dict[str, Any], f: dict[str, Any]) -> list[str]:
    """A finding's playbook confirm commands, filled in; on a fleet, aimed at the finding's node the way
    the sweep reached it (`--exec` template, else `on NODE:`), never a bare command for the wrong host."""
    from vllmdiag.model import Finding
    from vllmdiag.playbooks.playbook import aim_api, next_steps_for

    try:
        finding = Finding.from_dict(f)
        cmds = next_steps_for(finding)
    except (KeyError, TypeError, ValueError):
        return []
    cmds = aim_api(cmds, _api_command(d, finding.deployment, str(f.get("node"))))
    if "nodes" not in d:
        return cmds
    node = str(f.get("node"))
    aimed = [c if c.startswith("ssh ") else f"on {node}: {c}" for c in cmds]
    template = d.get("exec_template")
    if not isinstance(template, str) or not template:
        return aimed
    from vllmdiag.playbooks.steps import via_exec

    return via_exec(aimed, template)  # a saved report is untrusted: an odd template leaves the commands as they are


def _api_command(d: dict[str, Any], deployment: str | None, node: str) -> str | None:
    """How to reach the finding's deployment's API server (playbook.api_command), None when not seen."""
    from vllmdiag.playbooks.playbook import api_command

    deps = [x for x in d.get("deployments") or [] if isinstance(x, dict) and x.get("id") == deployment]
    pids = {p.get("pid") for x in deps for p in x.get("processes") or [] if isinstance(p, dict)}
    section = (d.get("sections") or {}).get(node)
    servers = [row.server for row in section.http] if isinstance(section, NodeSection) else []
    return api_command(servers, {p for p in pids if isinstance(p, int)}) if pids else None


def is_command(step: str) -> bool:
    """A next step to paste into a shell (`py-spy dump --pid 1`, `# ...`, `on gpu01: ...`), not a sentence
    (`Re-run as root ...`): playbook commands start lower-case by rule (tests/live/test_operator_path_triage_live.py);
    the analysis' fixes are sentences."""
    return bool(re.match(r"[a-z0-9/.~#{]", step.lstrip()))


def short_name(p: dict[str, Any] | None) -> str:
    """`TP3`, `EngineCore`, `APIServer`: how people call a vLLM process."""
    if not p:
        return "?"
    return short_label(str(p.get("title") or ""), str(p.get("role") or ""))


def is_culprit(node: NodeData, p: dict[str, Any]) -> bool:
    return int(p["pid"]) in node.culprit_pids or (p.get("role") == "worker" and p.get("rank") in node.culprit_ranks
                                                   and not node.culprit_pids)


# ---- rings and stacks: analysis decided them (analysis/sections.py); formatted here ----------------
RingView = RingRow  # one ring as the node's queue section shows it


def _section(node: NodeData) -> NodeSection | None:
    return node.section if isinstance(node.section, NodeSection) else None


def rings(node: NodeData) -> list[RingView]:
    """The node's rings, laggards first, as analysis decided them (none for a report without sections)."""
    section = _section(node)
    if section is not None and section.rings_error is not None:
        raise section.rings_error  # the view that draws it says it could not (untrusted data)
    return list(section.rings) if section is not None else []


def stack_classes(node: NodeData) -> list[dict[str, Any]]:
    """The analysis' folded classes (gpu.stack_classes), each with one member's full stack attached."""
    section = _section(node)
    if section is not None and section.stacks_error is not None:
        raise section.stacks_error
    return [{**row.entry, "label": row.label, "stack": row.stack, "culprit": row.culprit}
            for row in (section.stacks if section is not None else [])]


# ---- rank strip and timeline (analysis/reporting.py computes them) ---------------------------------
def rank_strip(dep: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in dep.get("rank_strip") or [] if isinstance(c, dict)]


def timeline(dep: dict[str, Any]) -> dict[str, Any] | None:
    """The deployment's timeline with only well-formed rows (a saved report is untrusted); None when absent."""
    tl = dep.get("timeline")
    if not isinstance(tl, dict):
        return None
    def seconds(v: Any) -> list[float]:
        return [float(t) for t in v if isinstance(t, (int, float)) and not isinstance(t, bool)] if isinstance(v, list) else []
    rows = [{"kind": str(r.get("kind")), "name": str(r.get("name")), "looks": seconds(r.get("looks")),
             "moved": seconds(r.get("moved"))} for r in tl.get("rows") or [] if isinstance(r, dict)]
    window = tl.get("window_s")
    return {"window_s": float(window) if isinstance(window, (int, float)) else 0.0, "passes": seconds(tl.get("passes")),
            "rows": [r for r in rows if r["looks"]]}


def last_moved(row: dict[str, Any]) -> float | None:
    return max(row["moved"]) if row["moved"] else None


# ---- endpoints, http, gpus: analysis picked and read them (analysis/sections.py); formatted here ----
def _part(node: NodeData, name: str) -> NodeSection | None:
    """The node's section for one part, raising the error analysis met building it (its view says so)."""
    section = _section(node)
    if section is not None and name in section.errors:
        raise section.errors[name]
    return section


def endpoints(node: NodeData) -> list[dict[str, Any]]:
    """Each ZMQ listener of the node's deployments with its ZMTP answer; problems first."""
    section = _part(node, "endpoints")
    return [dict(vars(r)) for r in section.endpoints] if section is not None else []


def http_servers(node: NodeData) -> list[dict[str, Any]]:
    section = _part(node, "http")
    return [r.server for r in section.http] if section is not None else []


def gpus(node: NodeData) -> list[dict[str, Any]]:
    """NVML rows, each with the rank(s) whose worker pid runs on it."""
    section = _part(node, "gpus")
    return [{**r.nvml, "ranks": r.ranks} for r in section.gpus] if section is not None else []


def nvml_probe(node: NodeData) -> dict[str, Any] | None:
    """NVML's status and reason where the probe ran (None where it did not)."""
    section = _section(node)
    return section.nvml_probe if section is not None else None
