"""Stand-in for the `xgrammar` package: only the compiler entry point vLLM 0.33's backend calls."""
