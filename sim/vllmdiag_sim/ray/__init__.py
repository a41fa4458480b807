"""A tiny stand-in for a Ray cluster on one node: a `raylet` that starts actor processes."""
