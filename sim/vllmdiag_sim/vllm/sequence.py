"""Mirror of `vllm/sequence.py`: `IntermediateTensors`, what a non-last PP stage hands the next one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class IntermediateTensors:
    tensors: dict[str, Any]
