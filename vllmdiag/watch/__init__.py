"""``vllmdiag watch``: a long-running, read-only watcher for one node.

Every interval it runs only the cheap probes (process states, rings, /metrics), judges progress
per deployment, and on a stall with work in flight runs one full triage at once and keeps the
snapshot and a report of that moment. It never writes to the target; its own files live only in
``--out``. An optional exporter serves Prometheus metrics.
"""
