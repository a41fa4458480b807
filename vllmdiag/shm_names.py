"""What a /dev/shm entry is, from its name alone (pure; the shm probe records it, analysis reads it again
for snapshots written before a kind was known, as titles.py does for process titles)."""

from __future__ import annotations

import re

PSM = re.compile(r"psm_[0-9a-f]{8}")
# vLLM's CPU platform all-reduce buffers (vllm/distributed/device_communicators/cpu_communicator.py,
# _CPUSHMDistributed): `{VLLM_DIST_IDENT}-{group}-[{ranks}]-cpushm` + `_{rank}` per rank, the ident being the
# basename of the file:// init path (`vllm_dist_<uuid4 hex>`); 4 MiB each, mapped by the group's workers.
CPUSHM = re.compile(r"vllm_dist_[0-9a-f]{8,32}-.{1,64}-cpushm(_\d{1,4})?")
PREFIXES = (("vllm_mm_", "vllm_mm"), ("vllm_offload_", "vllm_offload"), ("vllm_ec_", "vllm_ec"), ("nccl-", "nccl"),
            ("sem.", "semaphore"))


def classify_name(name: str) -> str:
    if PSM.fullmatch(name):
        return "psm"
    if CPUSHM.fullmatch(name):
        return "vllm_cpushm"
    return next((kind for prefix, kind in PREFIXES if name.startswith(prefix)), "other")
