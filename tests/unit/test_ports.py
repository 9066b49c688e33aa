"""Ports for servers that run side by side on one host (the fleet, the tests)."""

from __future__ import annotations

import socket

from serving.ports import LOWEST_PORT, Ports, ephemeral_range, free_ports


def test_free_ports_are_distinct_bindable_and_outside_the_ephemeral_range() -> None:
    low, high = ephemeral_range()
    for _ in range(20):  # bind(0) one port at a time gave the same port twice in CI
        ports = free_ports(5)
        assert len(set(ports)) == 5
        assert all(LOWEST_PORT <= port < low or port > high for port in ports)
        for port in ports:
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", port))


def test_free_ports_leave_out_taken_and_bound_ports() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", free_ports(1)[0]))
        bound = held.getsockname()[1]
        taken = set(free_ports(200))
        for _ in range(10):
            assert not {bound} & set(free_ports(50, taken | {bound}))
            assert not taken & set(Ports.free(taken).all())
