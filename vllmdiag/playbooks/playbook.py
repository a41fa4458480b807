"""Playbooks: YAML data under playbooks/, one entry per finding code, validated at load.

Each ``playbooks/<layer>.yaml`` maps codes to::

    process.zombie:
      title: A vLLM process is a zombie
      meaning: ...
      confirm: ["ps -o pid,ppid,stat,cmd -p {pid}"]   # read-only commands; {pid} {node} filled in
      causes: ["..."]                                  # may cite vLLM issues (#1234)
      remediation: ["..."]
"""

from __future__ import annotations

import functools
import re
from importlib import resources
from typing import Any

import yaml

from vllmdiag.errors import BadInput
from vllmdiag.model import Finding

# libyaml's safe loader when PyYAML was built with it: the same documents, ~8x faster (the stack rules
# took ~19 ms of every triage with the pure-Python one); tests/unit/test_contracts.py checks they agree.
SAFE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

_SAFE_WORD = re.compile(r"[\w./:@\[\],-]{1,200}")
REQUIRED = ("title", "meaning", "confirm", "remediation")


class PlaybookError(BadInput, ValueError):
    """A playbook file that does not validate (bad input: exit 2)."""

    fix = "correct the playbook file named above: each code needs title, meaning, confirm, causes and remediation"


@functools.lru_cache(maxsize=1)
def load_playbooks() -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    root = resources.files("vllmdiag.playbooks")
    for entry in sorted(root.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".yaml") or entry.name.startswith("stack"):
            continue
        try:
            data = yaml.load(entry.read_text(encoding="utf-8"), Loader=SAFE_LOADER) or {}
        except yaml.YAMLError as exc:
            raise PlaybookError(f"{entry.name}: not valid YAML: {str(exc).splitlines()[0]}") from None
        if not isinstance(data, dict):
            raise PlaybookError(f"{entry.name}: top level must be a mapping of finding codes")
        for code, body in data.items():
            validate_entry(entry.name, str(code), body)
            if code in out:
                raise PlaybookError(f"{entry.name}: code {code} defined twice")
            out[str(code)] = body
    return out


def validate_entry(source: str, code: str, body: Any) -> None:
    if not isinstance(body, dict):
        raise PlaybookError(f"{source}: {code}: entry must be a mapping")
    for key in REQUIRED:
        if key not in body:
            raise PlaybookError(f"{source}: {code}: missing {key!r}")
    for key in ("confirm", "remediation", "causes"):
        if key in body and not (isinstance(body[key], list) and all(isinstance(x, str) for x in body[key])):
            raise PlaybookError(f"{source}: {code}: {key} must be a list of strings")


def next_steps_for(f: Finding) -> list[str]:
    entry = load_playbooks().get(f.code)
    if entry is None:
        return []
    pid = f.culprits[0].pid if f.culprits and f.culprits[0].pid else (f.pids[0] if f.pids else None)
    if not isinstance(pid, int) or isinstance(pid, bool):
        pid = None
    # Snapshots are untrusted: only plain ints and path-like words may land in a suggested command.
    values = {k: v for k, v in f.evidence.items() if _safe(v)}
    values.update(pid=pid, node=f.node if _safe(f.node) else "NODE")
    steps = []
    for cmd in entry.get("confirm", []):
        if "{pid}" in cmd and pid is None:
            continue
        steps.append(_fill(cmd, **values))
    return steps


def _safe(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return isinstance(value, str) and bool(_SAFE_WORD.fullmatch(value))


class _KeepApi(dict[str, Any]):
    """{curl_api} stays for `aim_api`, which knows the deployment's API server; any other missing key fails."""

    def __missing__(self, key: str) -> str:
        if key == "curl_api":
            return API
        raise KeyError(key)


def _fill(template: str, **values: Any) -> str:
    try:
        return template.format_map(_KeepApi(values))
    except (KeyError, IndexError, ValueError):
        return template


# ---- the deployment's own API server in a step (issue 35 item 3) ----------------------------------
API = "{curl_api}"  # in a playbook: `{curl_api}/metrics | grep ...`, filled with how to reach this deployment's server
UNKNOWN_API = "curl -s http://API_HOST:PORT"
_HOST = re.compile(r"[A-Za-z0-9.:_-]{1,100}")


def api_command(servers: Any, pids: set[int]) -> str | None:
    """`curl -s http://127.0.0.1:8001` for the API server (of these pids) the http probe found listening;
    from another network namespace (a container), `nsenter -t PID -n curl -s ...`. None when none was seen:
    the caller says so rather than guess vLLM's default port (a node with two vLLMs, or --port 8001)."""
    for s in servers if isinstance(servers, list) else []:
        if not isinstance(s, dict) or not set(s.get("pids") or []) & pids:
            continue
        host, port = s.get("host"), s.get("port")
        if not (isinstance(host, str) and _HOST.fullmatch(host) and isinstance(port, int) and 0 < port < 65536):
            continue  # snapshots are untrusted: only a plain host and a port land in a command
        url = f"http://{f'[{host}]' if ':' in host else host}:{port}"
        own = [p for p in s.get("pids") or [] if isinstance(p, int) and not isinstance(p, bool)]
        if s.get("same_netns", True) is False and own:
            return f"nsenter -t {own[0]} -n curl -s {url}"
        return f"curl -s {url}"
    return None


def aim_api(steps: list[str], command: str | None) -> list[str]:
    """Each step's {curl_api} filled; when the server was not seen, a step of its own becomes a shell comment
    that says so (pasting it runs nothing) and a wrapped one (`ssh node '...'`) names API_HOST:PORT to fill in."""
    out = []
    for step in steps:
        if API not in step:
            out.append(step)
        elif command is not None:
            out.append(step.replace(API, command))
        elif step.startswith(API):
            out.append("# no API server seen for this deployment, so its port is unknown; fill in HOST:PORT: "
                       + step.replace(API, UNKNOWN_API))
        else:
            out.append(step.replace(API, UNKNOWN_API))
    return out


def aim_report(report: Any) -> None:
    """Fill {curl_api} in the verdicts' next steps of a Report (each deployment's, and the report's own, which
    is its culprit's deployment, or the only one with an API server seen). Idempotent; every output calls it
    (cli.shared.emit, render.screen.draw, render.files.report_text). A report of another shape is left as it is."""
    try:
        _aim_report(report)
    except (AttributeError, TypeError, ValueError):
        pass


def _aim_report(report: Any) -> None:
    by_node = {s.node: s.data("http").get("servers") for s in report.snapshots}
    commands = {dep.id: api_command(by_node.get(dep.node), dep.pids) for dep in report.deployments}
    for dep in report.deployments:
        dep.verdict.next_steps = aim_api(dep.verdict.next_steps, commands[dep.id])
    blamed = {(c.node, c.pid) for c in report.verdict.culprits if c.pid is not None}
    mine = [dep.id for dep in report.deployments if {(dep.node, pid) for pid in dep.pids} & blamed]
    known = sorted({c for c in commands.values() if c})
    command = commands[mine[0]] if mine else known[0] if len(known) == 1 else None
    report.verdict.next_steps = aim_api(report.verdict.next_steps, command)
