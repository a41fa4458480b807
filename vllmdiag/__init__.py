"""vllmdiag: read-only diagnostics for hung vLLM deployments."""

__version__ = "0.1.0"
