"""Print the verdict, findings, decoded rings and stack classes of a `vllmdiag triage/analyze --json` file."""

import json
import sys

from vllmdiag.analysis.views.stack_match import classify_threads


def main(path: str) -> None:
    with open(path) as fh:
        d = json.load(fh)
    v = d["verdict"]
    print("VERDICT:", v["status"], v["layer"], [(c["title"], c["pid"], c["role"], c["rank"]) for c in v["culprits"]])
    print("SUMMARY:", v["summary"])
    for f in d["findings"]:
        print(" -", f["code"], f["severity"], f["message"][:220])
    s = d["snapshot"]
    for name, p in s["probes"].items():
        if p.get("status") != "ok":
            print(" probe", name, p.get("status"), (p.get("reason") or "")[:150])
    rings = s["probes"].get("rings", {}).get("data") or {}
    for g in rings.get("rings", []):
        print(" ring", g["name"], g["geometry"], "mapped", g["mapped_by"], "full", g["full"], "blocked_on", g["blocked_on"],
              "unread", g["stable_unread"], "moved", g["moved"], "method", g["last_method"], "status", g["last_status"],
              "fmt", g["format"])
    for x in rings.get("rejected", []):
        print(" rejected", x)
    roles = {p["pid"]: (p.get("role"), p.get("title")) for p in s["probes"]["processes"]["data"]["processes"]}
    for x in (s["probes"].get("stacks", {}).get("data") or {}).get("dumps", []):
        role, title = roles.get(x["pid"], (None, None))
        c = classify_threads(x["threads"], role) if x.get("threads") else None
        print(" stack", x["pid"], title, x["status"], c.label if c else None, c.thread if c else None, c.where if c else None)


if __name__ == "__main__":
    main(sys.argv[1])
