"""One declaration per opt-in probe: its SPEC (default=False) is the flag; `--enable NAME` turns it on
in triage, collect and sweep alike (issue 16)."""

from __future__ import annotations

import pytest

from vllmdiag.errors import BadInput
from vllmdiag.registry import discover, opt_in
from vllmdiag.sweep.transport import Transport, remote_argv


def test_every_opt_in_probe_can_be_enabled_by_name() -> None:
    optional = [n for n, p in discover().items() if not p.spec.default]
    assert "preflight" in optional
    assert opt_in(optional) == dict.fromkeys(optional, True)
    with pytest.raises(BadInput, match="not an opt-in probe"):
        opt_in(["host"])  # on by default: nothing to enable
    with pytest.raises(BadInput):
        opt_in(["nope"])


def test_sweep_passes_enable_to_the_nodes() -> None:
    argv = remote_argv(Transport(enable=("nccl_ras",)), "gpu01", 10.0)
    assert argv[argv.index("--enable") + 1] == "nccl_ras"
    with pytest.raises(BadInput):
        Transport(enable=("x; rm -rf /",))
