"""Gate configuration: thresholds, required vs advisory checks, ports, allowed fleet env differences.

Every key is optional; default_yaml() is the documented default. Bad config is a one-line
ConfigError (a BadInput: exit 2) naming the file and the key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from vllmdiag.errors import BadInput

# The checks' names, scopes and advisory defaults are theirs (gate/checks/, gate/contract.py): this
# module asks the contract for them when it validates a name, never at import (a check imports GateConfig).
_DEFAULT_YAML = """\
tp: 1                        # planned tensor-parallel size on this node (--tp overrides)
collect_budget_s: 8          # total seconds for collecting the snapshot
{advisory}# reported, but a fail does not fail the gate
skip: []                     # checks not run at all
ports: [8000, 29500, 29550]  # must be free before rollout (API, DP master, DP RPC)
shm:
  headroom: 256MiB           # on top of the ring buffers TP=N needs (NCCL's own nccl-* segments)
  leak_min_age_s: 5          # an unmapped segment younger than this may be mid-startup
limits:
  nofile_min: 8192           # RLIMIT_NOFILE below this fails
  nofile_recommended: 65535  # vLLM raises its soft limit to 65535 (set_ulimit); below: warn
  pids_min: 4096             # free pids/threads (cgroup pids.max, ulimit -u, pid_max)
gpu:
  require_nvml: false        # true: a node without readable NVML fails gpu_health
url:
  health_timeout_s: 3        # /health, /metrics, /v1/models each
  completion_deadline_s: 10  # the one-token completion must answer within this
  model: null                # default: the first model of /v1/models
fleet:
  allowed_env_differences: [VLLM_HOST_IP, VLLM_DP_RANK, VLLM_DP_RANK_LOCAL, RANK, LOCAL_RANK, NCCL_HOSTID]
"""

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(B|KiB|MiB|GiB|TiB|KB|MB|GB|TB|k|m|g)?\s*$", re.I)
_UNITS = {"b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40, "kb": 10**3, "mb": 10**6,
          "gb": 10**9, "tb": 10**12, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def default_yaml() -> str:
    """The documented default config (`vllmdiag gate --print-config`); its advisory list is the checks'."""
    line = f"advisory: [{', '.join(_default_advisory())}]"
    return _DEFAULT_YAML.replace("{advisory}", line + " " * max(3, 29 - len(line)))


def _default_advisory() -> tuple[str, ...]:
    from vllmdiag.gate.contract import default_advisory

    return default_advisory()


class ConfigError(BadInput):
    fix = "correct the gate config entry named above (`vllmdiag gate --help` lists the checks and their keys)"


MAX_CONFIG_BYTES = 1 << 20


@dataclass(frozen=True)
class GateConfig:
    tp: int = 1
    collect_budget_s: float = 8.0
    advisory: tuple[str, ...] = field(default_factory=_default_advisory)  # the checks declared advisory
    skip: tuple[str, ...] = ()
    ports: tuple[int, ...] = (8000, 29500, 29550)
    shm_headroom_bytes: int = 256 << 20
    shm_leak_min_age_s: float = 5.0
    nofile_min: int = 8192
    nofile_recommended: int = 65535
    pids_min: int = 4096
    require_nvml: bool = False
    health_timeout_s: float = 3.0
    completion_deadline_s: float = 10.0
    model: str | None = None
    allowed_env_differences: tuple[str, ...] = ("VLLM_HOST_IP", "VLLM_DP_RANK", "VLLM_DP_RANK_LOCAL", "RANK",
                                                "LOCAL_RANK", "NCCL_HOSTID")
    source: str = field(default="<default>", compare=False)

    def required(self, check: str) -> bool:
        return check not in self.advisory

    def with_tp(self, tp: int | None) -> GateConfig:
        return self if tp is None else replace(self, tp=_int_range("--tp", tp, 1, 1024))


# yaml key path -> (field, parser)
def _schema() -> dict[str, tuple[str, Any]]:
    return {
        "tp": ("tp", lambda k, v: _int_range(k, v, 1, 1024)),
        "collect_budget_s": ("collect_budget_s", lambda k, v: _num_range(k, v, 0.5, 600)),
        "advisory": ("advisory", _check_names),
        "skip": ("skip", _check_names),
        "ports": ("ports", lambda k, v: tuple(_int_range(k, p, 1, 65535) for p in _list(k, v))),
        "shm.headroom": ("shm_headroom_bytes", _size),
        "shm.leak_min_age_s": ("shm_leak_min_age_s", lambda k, v: _num_range(k, v, 0, 86400 * 365)),
        "limits.nofile_min": ("nofile_min", lambda k, v: _int_range(k, v, 1, 1 << 31)),
        "limits.nofile_recommended": ("nofile_recommended", lambda k, v: _int_range(k, v, 1, 1 << 31)),
        "limits.pids_min": ("pids_min", lambda k, v: _int_range(k, v, 1, 1 << 31)),
        "gpu.require_nvml": ("require_nvml", _bool),
        "url.health_timeout_s": ("health_timeout_s", lambda k, v: _num_range(k, v, 0.1, 120)),
        "url.completion_deadline_s": ("completion_deadline_s", lambda k, v: _num_range(k, v, 0.1, 600)),
        "url.model": ("model", lambda k, v: None if v is None else _str(k, v)),
        "fleet.allowed_env_differences": ("allowed_env_differences", lambda k, v: tuple(_str(k, s) for s in _list(k, v))),
    }


def load_config(path: Path | None) -> GateConfig:
    if path is None:
        return GateConfig()
    from vllmdiag.files.infile import InputError, read_yaml

    try:
        raw = read_yaml(path, "gate config", MAX_CONFIG_BYTES)  # regular file, size cap, no YAML aliases
    except InputError as exc:
        raise ConfigError(str(exc)) from None
    return parse_config(raw if raw is not None else {}, str(path))


def parse_config(raw: Any, source: str = "<config>") -> GateConfig:
    schema = _schema()
    values: dict[str, Any] = {}
    try:
        for key, value in _flatten(raw, ""):
            if key not in schema:
                raise ConfigError(f"unknown key {key!r}")
            name, parse = schema[key]
            values[name] = parse(key, value)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    cfg = replace(GateConfig(), source=source, **values)
    if cfg.nofile_recommended < cfg.nofile_min:
        raise ConfigError(f"{source}: limits.nofile_recommended must be >= limits.nofile_min")
    return cfg


def _flatten(raw: Any, prefix: str) -> list[tuple[str, Any]]:
    if not isinstance(raw, dict):
        raise ConfigError(f"{prefix or 'the top level'} must be a mapping, got {type(raw).__name__}")
    out: list[tuple[str, Any]] = []
    for key, value in raw.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and path in {"shm", "limits", "gpu", "url", "fleet"}:
            out.extend(_flatten(value, path + "."))
        else:
            out.append((path, value))
    return out


def _check_names(key: str, value: Any) -> tuple[str, ...]:
    from vllmdiag.gate.contract import all_names

    names = tuple(_str(key, v) for v in _list(key, value))
    known = all_names()
    for name in names:
        if name not in known:
            raise ConfigError(f"{key}: unknown check {name!r} (known: {', '.join(known)})")
    return names


def _list(key: str, value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise ConfigError(f"{key} must be a list")
    return value


def _str(key: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{key} must be a non-empty string")
    return value


def _bool(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{key} must be true or false")
    return value


def _int_range(key: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(f"{key} must be an integer from {low} to {high}, got {value!r}")
    return value


def _num_range(key: str, value: Any, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise ConfigError(f"{key} must be a number from {low:g} to {high:g}, got {value!r}")
    return float(value)


def _size(key: str, value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    m = _SIZE.match(value) if isinstance(value, str) else None
    if not m:
        raise ConfigError(f"{key} must be bytes or a size like 256MiB, got {value!r}")
    return int(float(m.group(1)) * _UNITS[(m.group(2) or "b").lower()])


def _check_fields() -> None:  # the schema must cover every field (a contract test calls this)
    covered = {name for name, _ in _schema().values()} | {"source"}
    missing = {f.name for f in fields(GateConfig)} - covered
    assert not missing, missing
