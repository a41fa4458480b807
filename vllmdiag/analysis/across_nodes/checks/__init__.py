"""Cross-node group checks: every module here *is* one (``CODES``, ``check_group(group, facts, failed)``;
their order: ``analysis/contract.GROUP_CHECK_PRECEDENCE``), found by folder (``analysis/contract.group_checks``)
and run on every rank group that spans nodes by ``analysis/across_nodes/analyze_nodes.py``, which imports none
of them by name."""
