"""vLLM's vocabulary, shared by probes, analysis and the gate: its process titles (titles), its /dev/shm
segment names (shm_names) and the classes of its stack frames (stack_classes)."""
