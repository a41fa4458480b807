"""JUnit XML of gate results: one testsuite per node, one testcase per check.

fail -> <failure>, skip -> <skipped>, warn -> a passing testcase with a `status=warn` property and
the reason in <system-out> (CI shows it without failing the build). Numbers go into the body as JSON.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from datetime import datetime, timezone

from vllmdiag.gate.result import FleetGateResult, NodeGateResult


def to_junit(nodes: list[NodeGateResult], name: str = "vllmdiag gate") -> str:
    root = ET.Element("testsuites", name=name)
    totals = {"tests": 0, "failures": 0, "skipped": 0, "time": 0.0}
    stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
    for node in nodes:
        suite = ET.SubElement(root, "testsuite", name=node.node, hostname=node.node, timestamp=stamp)
        counts = node.counts()
        # failures counts <failure> elements: required checks that failed. An advisory fail is output only,
        # so a suite saying failures="1" under an exit 0 gate was a contradiction (issue 16).
        blocking = sum(1 for c in node.checks if c.blocks)
        attrs = {"tests": len(node.checks), "failures": blocking, "errors": 0, "skipped": counts["skip"],
                 "time": round(node.duration_s, 4)}
        for key, value in attrs.items():
            suite.set(key, str(value))
        props = ET.SubElement(suite, "properties")
        ET.SubElement(props, "property", name="gate_status", value="pass" if node.passed else "fail")
        for check in node.checks:
            case = ET.SubElement(suite, "testcase", name=check.name, classname=f"vllmdiag.gate.{node.node}",
                                 time=f"{check.duration_s:.6f}")
            cprops = ET.SubElement(case, "properties")
            ET.SubElement(cprops, "property", name="status", value=check.status)
            ET.SubElement(cprops, "property", name="required", value=str(check.required).lower())
            detail = json.dumps(check.numbers, sort_keys=True, default=str)
            if check.status == "fail":
                tag = "failure" if check.required else "system-out"
                el = ET.SubElement(case, tag)
                if tag == "failure":
                    el.set("message", check.reason)
                    el.set("type", "gate.fail")
                    el.text = detail
                else:  # an advisory fail must not fail the CI job: report it as output only
                    el.text = f"advisory check failed: {check.reason}\n{detail}"
            elif check.status == "skip":
                ET.SubElement(case, "skipped", message=check.reason)
            else:
                ET.SubElement(case, "system-out").text = f"{check.status}: {check.reason}\n{detail}"
        for key in ("tests", "failures", "skipped"):
            totals[key] += int(attrs[key])
        totals["time"] += node.duration_s
    totals["failures"] = sum(1 for n in nodes for c in n.checks if c.blocks)
    for key, value in totals.items():
        root.set(key, str(round(value, 4) if isinstance(value, float) else value))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def fleet_junit(fleet: FleetGateResult) -> str:
    return to_junit([fleet.nodes[n] for n in sorted(fleet.nodes)], name="vllmdiag sweep --gate")
