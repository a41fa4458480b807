"""A gate over nothing never passes (issue 25 item 5): `sweep @typo --inventory inv.yaml --gate` and
`@group` without an inventory printed PASS and exited 0 over zero nodes (JUnit tests="0")."""

from __future__ import annotations

import pytest

from vllmdiag.errors import BadInput
from vllmdiag.gate.result import FleetGateResult
from vllmdiag.sweep.inventory import Inventory
from vllmdiag.sweep.nodes import resolve_nodes


def test_resolution_never_yields_zero_nodes() -> None:
    inv = Inventory(groups={"gpus": "gpu[01-02]"})
    assert resolve_nodes(["@gpus"], inventory=inv) == ["gpu01", "gpu02"]
    with pytest.raises(BadInput):
        resolve_nodes(["@nope"], inventory=inv)
    with pytest.raises(BadInput):
        resolve_nodes(["@gpus"])


def test_a_gate_result_over_zero_nodes_fails() -> None:
    res = FleetGateResult(nodes={})
    assert not res.passed and res.exit_code != 0 and res.to_dict()["status"] == "fail"
