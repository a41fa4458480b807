"""--rates: tokens/s and requests over the observation window from /metrics samples (pure)."""

from __future__ import annotations

from vllmdiag.analysis.facts import Facts
from vllmdiag.analysis.findings import finding
from vllmdiag.model import Finding

LAYER = "client"
CODES = ("client.token_rates",)


def analyze(facts: Facts) -> list[Finding]:
    snapshot, deployments = facts.snapshot, facts.deployments
    if not snapshot.options.get("watch_s"):
        return []
    pids = {pid: dep for dep in deployments for pid in dep.pids}
    out = []
    for server in snapshot.data("http").get("servers", []):
        dep = next((pids[p] for p in server.get("pids", []) if p in pids), None)
        samples = [m for m in server.get("metrics", []) if m.get("status") == 200]
        if dep is None or len(samples) < 2:
            continue
        first, last = samples[0], samples[-1]
        window = float(last.get("at_s") or 0) - float(first.get("at_s") or 0)
        if window <= 0:
            continue
        tokens = (last.get("generation_tokens") or 0) - (first.get("generation_tokens") or 0)
        rate = tokens / window
        msg = (f"{server.get('address')}: {rate:.1f} generated tokens/s over {window:.1f} s, "
               f"{last.get('running')} running, {last.get('waiting')} waiting")
        if tokens == 0:
            msg = f"{server.get('address')}: no token generated in {window:.1f} s (stayed still)"
        out.append(finding("client.token_rates", LAYER, "info", snapshot, dep, msg, list(server.get("pids", [])),
                           {"tokens_per_s": round(rate, 2), "window_s": round(window, 2),
                            "running": last.get("running"), "waiting": last.get("waiting")}, []))
    return out
