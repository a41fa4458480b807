"""Rank sets fold as ClusterShell folds them, with or without ClusterShell's import (speed)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from vllmdiag.analysis.views.rank_compare import fold

NodeSet = __import__("ClusterShell.NodeSet", fromlist=["NodeSet"]).NodeSet

prefixes = st.sampled_from(["TP", "EP", "DP", "PP", "DP1_TP", "EngineCore_DP", "Worker_TP", "x"])
numbers = st.integers(min_value=0, max_value=300).map(str) | st.sampled_from(["00", "07", "010"])
names = st.lists(st.tuples(prefixes, numbers).map("".join), min_size=1, max_size=24)


@settings(max_examples=400, deadline=None)
@given(names)
def test_fold_is_clustershells(values: list[str]) -> None:
    assert fold(values) == str(NodeSet.fromlist(values))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=64), min_size=1, max_size=16))
def test_one_prefix_folds_without_clustershell_as_it_would(ranks: list[int]) -> None:
    values = [f"TP{r}" for r in ranks]
    assert fold(values) == str(NodeSet.fromlist(values))
