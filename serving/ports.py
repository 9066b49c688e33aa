"""Local ports for servers that run side by side on one host (the tests, the benchmarks, the fleet).

A TorchServe takes five ports, nginx one more; each must be free, distinct from the others chosen
with it, and outside the kernel's ephemeral range, where outgoing connections take theirs.
"""

from __future__ import annotations

import random
import socket
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

# Ports below the kernel's ephemeral range: bind(0) hands out ports from that range, where every
# outgoing connection (a load client, nginx to a replica) also takes its local port, so a server
# (re)started on a port chosen that way can find it taken and exit.
LOWEST_PORT = 10000


def ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def free_ports(count: int, taken: Collection[int] = ()) -> list[int]:
    """`count` distinct ports free on 127.0.0.1, none in `taken`, outside the ephemeral range.

    Each candidate stays bound until all are chosen, so no two are the same (closing one socket
    before binding the next can give the same port twice).
    """
    low, high = ephemeral_range()
    candidates = range(LOWEST_PORT, low) if low - LOWEST_PORT >= 1000 else range(high + 1, 65536)
    held: list[socket.socket] = []
    try:
        for port in random.sample(candidates, len(candidates)):
            if len(held) == count:
                break
            if port in taken:
                continue
            sock = socket.socket()
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                sock.close()
                continue
            held.append(sock)
        if len(held) < count:
            raise OSError(f"fewer than {count} free ports in {candidates}")
        return [int(sock.getsockname()[1]) for sock in held]
    finally:
        for sock in held:
            sock.close()


def free_port() -> int:
    return free_ports(1)[0]


@dataclass(frozen=True)
class Ports:
    """The five ports one TorchServe listens on."""

    inference: int
    management: int
    metrics: int
    grpc_inference: int
    grpc_management: int

    @classmethod
    def free(cls, taken: Collection[int] = ()) -> Ports:
        return cls(*free_ports(5, taken))

    def all(self) -> tuple[int, ...]:
        return (self.inference, self.management, self.metrics, self.grpc_inference, self.grpc_management)
