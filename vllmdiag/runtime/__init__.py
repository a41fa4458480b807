"""The run-time policy of one command: its budget and deadlines (deadline), the child killed at the budget
(hardstop, killtree), the last word a starved command still gives (lastword), its CPU priority (priority),
the probes' threads and limits (runner), the second look at the ranks that moved (second_look) and the one
/proc/<pid>/stat parser (procstat).

Kept import-free: ``vllmdiag/__main__.py`` imports ``runtime.priority`` before anything else."""
