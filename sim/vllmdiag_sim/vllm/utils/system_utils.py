"""Mirror of `vllm/utils/system_utils.py`: process titles."""

from __future__ import annotations

import setproctitle

VLLM_PROCESS_NAME_PREFIX = "VLLM"


def set_process_title(name: str, suffix: str = "", prefix: str = VLLM_PROCESS_NAME_PREFIX) -> None:
    # setproctitle rewrites /proc/<pid>/cmdline and comm (truncated to 15 chars by the kernel).
    setproctitle.setproctitle(f"{prefix}::{name}_{suffix}" if suffix else f"{prefix}::{name}")
