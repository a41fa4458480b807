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
# took ~19 ms of every triage with the pure-Python one); tests/test_contracts.py checks they agree.
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


def _fill(template: str, **values: Any) -> str:
    try:
        return template.format(**values)
    except (KeyError, IndexError, ValueError):
        return template
