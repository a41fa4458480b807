"""Free TCP ports for tests, picked where no outgoing connection can take them.

A port the kernel hands out for bind(0) lies in its ephemeral range, the same range it draws every
client's local port from. Between our check and the server's bind, any connect() on the machine can
take it, or the port next to it when a deployment binds a block (the simulator binds master_port,
+1 and +2): CI saw "Address already in use" on master_port+1. So the base is drawn below the
ephemeral range, and every port of the block is checked bindable.
"""

from __future__ import annotations

import random
import socket

LOWEST = 20000  # above the well-known and most registered service ports


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(address: str, port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((address, port))
        except OSError:
            return False
    return True


def free_port(address: str = "127.0.0.1", count: int = 1) -> int:
    """The first of `count` consecutive free ports on `address`, outside the ephemeral range."""
    high = _ephemeral_low() - count
    for _ in range(500):
        base = random.randrange(LOWEST, max(high, LOWEST + 1))
        if all(_bindable(address, base + i) for i in range(count)):
            return base
    raise RuntimeError(f"no {count} consecutive free ports on {address} between {LOWEST} and {high + count}")
