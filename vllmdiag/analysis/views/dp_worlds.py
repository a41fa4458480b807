"""DP worlds split over deployments (pure, never a finding): which DP ranks each deployment runs, as its
command line, environment or titles state them, and which ranks of a world sit in the DP sync. Read by
the gpu layer's dp_world analyzer and the cross-node DP world (analysis/across_nodes/dp_world_joined.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vllmdiag.analysis.views.deployments import Deployment
from vllmdiag.analysis.views.parallel_ranks import SYNC
from vllmdiag.analysis.views.stack_match import StackClass

# vLLM 0.33 ParallelConfig defaults: data_parallel_master_ip, data_parallel_rpc_port.
DEFAULT_ADDRESS, DEFAULT_RPC_PORT = "127.0.0.1", 29550
MAX_DP = 4096
_FLAGS = {"size": ("--data-parallel-size", "-dp"), "rank": ("--data-parallel-rank", "-dpn"),
          "start": ("--data-parallel-start-rank", "-dpr"), "local": ("--data-parallel-size-local", "-dpl"),
          "address": ("--data-parallel-address", "-dpa"), "rpc_port": ("--data-parallel-rpc-port", "-dpp"),
          "master_addr": ("--master-addr",)}


@dataclass
class Member:
    """One deployment's part of a DP world: which ranks it runs, as its command line states them."""

    dep: Deployment
    size: int
    ranks: list[int]
    address: str
    rpc_port: int
    mode: str  # external | hybrid | headless | offline
    source: str  # argv | env | titles

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.address, self.rpc_port, self.size)


@dataclass
class World:
    key: tuple[str, int, int]
    members: list[Member] = field(default_factory=list)

    @property
    def size(self) -> int:
        return self.key[2]

    def unseen(self, seen: set[int]) -> list[int]:
        return [r for r in range(self.size) if r not in seen]

    def member_of(self, pid: int) -> Member | None:
        return next((m for m in self.members if pid in m.dep.pids), None)

    def describe(self) -> str:
        address, port, size = self.key
        return f"DP world of size {size} at {address} (rpc port {port})"


def dp_worlds(deployments: list[Deployment]) -> list[World]:
    """DP worlds split over deployments (or partly elsewhere): internal LB (`-dp N` alone, every rank
    in one deployment) is gpu_groups' and left out."""
    worlds: dict[tuple[str, int, int], World] = {}
    for dep in deployments:
        m = membership(dep)
        if m is not None:
            worlds.setdefault(m.key, World(m.key)).members.append(m)
    return [w for w in worlds.values()
            if len(w.members) > 1 or sorted(w.members[0].ranks) != list(range(w.size))]


def membership(dep: Deployment) -> Member | None:
    root = dep.by_pid(dep.root_pid) or {}
    args = parse_dp_args(root.get("cmdline") or [])
    env: dict[str, Any] = root["environ"] if isinstance(root.get("environ"), dict) else {}
    titled = sorted({int(p["ranks"]["dp"]) for p in dep.engines if "dp" in (p.get("ranks") or {})})
    source = "argv"
    size = args.get("size")
    if size is None and _int(env.get("VLLM_DP_SIZE")):
        # Offline DP (vLLM's examples/offline_inference/data_parallel.py): one LLM() per rank, told by env.
        size, source = _int(env.get("VLLM_DP_SIZE")), "env"
        args = {"rank": _int(env.get("VLLM_DP_RANK")), "address": env.get("VLLM_DP_MASTER_IP"),
                "rpc_port": _int(env.get("VLLM_DP_MASTER_PORT"))}
    if not size or size < 2 or size > MAX_DP:
        return None
    ranks, mode = _ranks(args, size, dep.headless)
    if ranks is None:
        if not titled or len(titled) >= size:
            return None  # internal LB, or nothing says which ranks run here
        ranks, mode, source = titled, "external", "titles"  # flags in a --config file: the titles tell
    address = str(args.get("address") or args.get("master_addr") or DEFAULT_ADDRESS)
    return Member(dep, size, ranks, address, int(args.get("rpc_port") or DEFAULT_RPC_PORT), mode, source)


def _ranks(args: dict[str, Any], size: int, headless: bool) -> tuple[list[int] | None, str]:
    """The ranks one `vllm serve` runs, as vLLM's arg_utils infers them (0.33)."""
    if args.get("rank") is not None:
        return ([args["rank"]] if args["rank"] < size else None), "external"
    if args.get("start") is not None or args.get("local") is not None:
        start, local = args.get("start") or 0, args.get("local") or size
        if local >= size and start == 0:
            return None, "internal"
        return [r for r in range(start, start + local) if r < size], "headless" if headless else "hybrid"
    return None, "internal"


def parse_dp_args(argv: list[Any]) -> dict[str, Any]:
    """The DP flags of a `vllm serve` command line (`--flag value` and `--flag=value`); bounded and
    strict: anything that is not a small number where one belongs is ignored (untrusted input)."""
    words = [str(a) for a in argv[:256]]
    out: dict[str, Any] = {}
    for i, word in enumerate(words):
        name, eq, inline = word.partition("=")
        key = next((k for k, names in _FLAGS.items() if name in names), None)
        if key is None:
            continue
        value = inline if eq else (words[i + 1] if i + 1 < len(words) else "")
        if key in ("address", "master_addr"):
            if 0 < len(value) <= 255 and not value.startswith("-"):
                out[key] = value
        elif (n := _int(value)) is not None:
            out[key] = n
    return out


def _int(value: Any) -> int | None:
    text = str(value or "")
    return int(text) if text.isdigit() and len(text) <= 6 else None


def split(by_dp: dict[int, list[dict[str, Any]]], classes: dict[int, StackClass]
          ) -> tuple[list[int], dict[int, list[dict[str, Any]]]]:
    """(DP ranks with a process in the DP sync, the other ranks seen here with their processes)."""
    in_sync = sorted(d for d, ps in by_dp.items() if any((c := classes.get(p["pid"])) and c.name in SYNC for p in ps))
    return in_sync, {d: ps for d, ps in by_dp.items() if d not in in_sync}
