"""env and rpc_base: NCCL/vLLM variables known to hang or break when inconsistent (vllm-internals 4.3, 6).

The environment is the running vLLM processes' (processes probe) or, before rollout, the gate's own
(preflight probe), which is what a deployment started from this pipeline step inherits.
"""

from __future__ import annotations

from typing import Any

from vllmdiag.gate.common import probe_problem, vllm_processes
from vllmdiag.gate.config import GateConfig
from vllmdiag.gate.contract import GateCheck
from vllmdiag.gate.result import CheckResult, result
from vllmdiag.model import Snapshot

# Per-process by design: ranks, device selection of one worker.
PER_PROCESS = ("RANK", "LOCAL_RANK", "VLLM_DP_RANK", "VLLM_DP_RANK_LOCAL", "CUDA_VISIBLE_DEVICES")
REMOVED = {"VLLM_RPC_TIMEOUT": "V0 only", "VLLM_ENGINE_ITERATION_TIMEOUT_S": "V0 only",
           "VLLM_SLEEP_WHEN_IDLE": "replaced by SpinCondition"}


def check_env(snap: Snapshot, cfg: GateConfig) -> CheckResult:
    name = "env"
    procs = vllm_processes(snap)
    denied = sorted(p["pid"] for p in procs if p.get("environ_unreadable") == "denied")
    if denied:  # blind is never a pass (issue 25 item 3): an unread environment is not a clean one
        shown = ", ".join(map(str, denied[:8])) + (f" (+{len(denied) - 8} more)" if len(denied) > 8 else "")
        return result(name, "fail", f"cannot read the environment of vLLM pid(s) {shown} (permission denied): "
                      "run the gate as root (or with CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH) or as the user "
                      "vLLM runs as", unreadable_pids=denied)
    if procs:
        groups = by_deployment(snap, procs)
        source = f"{len(procs)} vLLM process(es)" + (f" of {len(groups)} deployments" if len(groups) > 1 else "")
    else:
        problem = probe_problem(snap, "preflight")
        if problem:
            return result(name, "skip", problem)
        groups = {"": {0: dict(snap.data("preflight").get("env") or {})}}
        source = "the gate's environment"
    bad: list[str] = []
    odd: list[str] = []
    differ_all: dict[str, dict[str, str]] = {}
    for dep_id, envs in groups.items():
        dep_procs = [p for p in procs if p["pid"] in envs]
        b, o = env_hazards(next(iter(envs.values())), cfg.tp, _cmdlines(dep_procs))
        where = f"{dep_id}: " if len(groups) > 1 else ""
        bad += [where + x for x in b if where + x not in bad]
        odd += [where + x for x in o if where + x not in odd]
        # Ranks of ONE deployment must agree; two deployments may differ (issue 26: they failed as one).
        differ = inconsistent(envs)
        if differ:
            differ_all[dep_id or "node"] = differ
            bad.append(f"processes of deployment {dep_id or 'here'} disagree on "
                       + ", ".join(f"{k} ({v})" for k, v in differ.items()))
    first = next(iter(next(iter(groups.values())).values()))
    numbers = {"source": source, "tp": cfg.tp,
               "inconsistent": next(iter(differ_all.values())) if len(differ_all) == 1 and len(groups) == 1
               else differ_all,
               "env": {k: v for k, v in first.items() if k.startswith(("NCCL_", "CUDA_", "VLLM_"))}}
    if bad:
        return result(name, "fail", "; ".join(bad + odd), **numbers)
    if odd:
        return result(name, "warn", "; ".join(odd), **numbers)
    return result(name, "pass", f"no known-hazardous NCCL/vLLM settings in {source}", **numbers)


def by_deployment(snap: Snapshot, procs: list[dict[str, Any]]) -> dict[str, dict[int, dict[str, str]]]:
    """deployment id -> pid -> environ, for these processes; those in no deployment are one group."""
    from vllmdiag.analysis.views.deployments import find_deployments

    wanted = {p["pid"]: dict(p.get("environ") or {}) for p in procs}
    out: dict[str, dict[int, dict[str, str]]] = {}
    try:
        deps = find_deployments(snap)
    except (TypeError, ValueError, KeyError):  # a process tree it cannot group: all as one, as before
        deps = []
    for dep in deps:
        envs = {pid: wanted.pop(pid) for pid in sorted(dep.pids) if pid in wanted}
        if envs:
            out[dep.id] = envs
    if wanted:
        out[snap.node or "node"] = wanted
    return out


def env_hazards(env: dict[str, str], tp: int, cmdlines: list[str]) -> tuple[list[str], list[str]]:
    bad: list[str] = []
    odd: list[str] = []
    method = env.get("VLLM_WORKER_MULTIPROC_METHOD")
    if method is not None and method not in ("fork", "spawn"):
        bad.append(f"VLLM_WORKER_MULTIPROC_METHOD={method!r} is not fork or spawn (workers cannot start)")
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None:
        visible = [d for d in cvd.split(",") if d.strip()]
        if len(visible) < tp:
            bad.append(f"CUDA_VISIBLE_DEVICES={cvd!r} shows {len(visible)} GPU(s), TP={tp} needs {tp}")
    p2p_off = env.get("NCCL_P2P_DISABLE", "0").strip() not in ("0", "", "false")
    if p2p_off and env.get("NCCL_P2P_LEVEL"):
        odd.append(f"NCCL_P2P_DISABLE and NCCL_P2P_LEVEL={env['NCCL_P2P_LEVEL']} both set (contradictory)")
    if p2p_off and tp > 1 and not any("--disable-custom-all-reduce" in c for c in cmdlines):
        # vLLM 0.33's custom all-reduce still uses P2P when NCCL does not (open PR #45004): the hang of #8410/#5484.
        odd.append("NCCL_P2P_DISABLE=1 but custom all-reduce still uses P2P; add --disable-custom-all-reduce")
    if env.get("CUDA_LAUNCH_BLOCKING", "0") not in ("0", ""):
        odd.append("CUDA_LAUNCH_BLOCKING set: every kernel is synchronous (debug only)")
    for var, why in REMOVED.items():
        if var in env:
            odd.append(f"{var} has no effect in vLLM 0.33 ({why})")
    timeout = env.get("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS")
    if timeout is not None and (not timeout.isdigit() or int(timeout) < 60):
        odd.append(f"VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS={timeout}: long steps become EngineDeadError (#17965)")
    return bad, odd


def inconsistent(envs: dict[int, dict[str, str]]) -> dict[str, str]:
    """NCCL_/VLLM_ variables whose values differ between processes (ranks disagreeing on NCCL hang)."""
    keys = {k for env in envs.values() for k in env if k.startswith(("NCCL_", "VLLM_", "TORCH_NCCL"))}
    out: dict[str, str] = {}
    for key in sorted(keys - set(PER_PROCESS)):
        values = {env.get(key, "<unset>") for env in envs.values()}
        if len(values) > 1:
            out[key] = " vs ".join(sorted(values))[:200]
    return out


def _cmdlines(procs: list[dict[str, Any]]) -> list[str]:
    return [" ".join(p.get("cmdline") or []) for p in procs]


def check_rpc_base(snap: Snapshot, cfg: GateConfig) -> CheckResult:
    name = "rpc_base"
    problem = probe_problem(snap, "preflight")
    if problem:
        return result(name, "skip", problem)
    base = snap.data("preflight").get("rpc_base") or {}
    procs = vllm_processes(snap)
    uid = procs[0].get("uid") if procs else snap.data("host").get("euid")
    numbers = {k: base.get(k) for k in ("path", "exists", "is_dir", "mode", "uid", "gid", "readonly")}
    numbers["vllm_uid"] = uid
    where = f"VLLM_RPC_BASE_PATH {base.get('path')}"
    if not base.get("exists"):
        return result(name, "fail", f"{where} does not exist ({base.get('error', 'missing')}): no ipc:// endpoint can bind",
                      **numbers)
    if not base.get("is_dir"):
        return result(name, "fail", f"{where} is not a directory", **numbers)
    if base.get("readonly"):
        return result(name, "fail", f"{where} is on a read-only filesystem", **numbers)
    if not writable(int(base.get("mode") or 0), base.get("uid"), base.get("gid"), uid):
        return result(name, "fail", f"{where} (mode {int(base.get('mode') or 0):o}) is not writable by uid {uid}", **numbers)
    return result(name, "pass", f"{where} is a writable directory for uid {uid}", **numbers)


def writable(mode: int, owner: Any, group: Any, uid: Any) -> bool:
    """Write + search (w and x) for uid: owner bits for the owner, "other" bits for anyone else.
    Group membership is not in the snapshot, so group bits are not trusted (strict, never optimistic)."""
    if uid == 0:
        return True
    if uid is not None and uid == owner:
        return mode & 0o300 == 0o300
    return mode & 0o003 == 0o003


GATE_CHECKS = (
    GateCheck("env", "node", "env", check_env),
    GateCheck("rpc_base", "node", "env", check_rpc_base),
)
