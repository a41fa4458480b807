"""Gate checks, found by folder: every module here declares ``GATE_CHECKS`` (``gate/contract.py``)."""
