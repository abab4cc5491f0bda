"""Listener ports handed to child processes come from outside the kernel's ephemeral range."""

from __future__ import annotations

import random
import socket
from pathlib import Path

import pytest

from loadtests.procs import LISTEN_PORTS_FROM, ephemeral_range, free_port


def test_ports_fall_outside_the_ephemeral_range_and_are_bindable() -> None:
    rng = random.Random(5)
    ports = [free_port(rng, ephemeral=(32768, 60999)) for _ in range(300)]
    assert all(LISTEN_PORTS_FROM <= p < 32768 or 60999 < p <= 65535 for p in ports)
    assert {p < 32768 for p in ports} == {True, False}  # both spans are used
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports[-1]))  # free when handed out


class Scripted(random.Random):
    """Offers the given ports in turn."""

    def __init__(self, *ports: int) -> None:
        super().__init__(0)
        self.ports = list(ports)

    def randint(self, a: int, b: int) -> int:
        return self.ports.pop(0) if len(self.ports) > 1 else self.ports[0]


def test_a_port_in_use_is_skipped() -> None:
    spare = free_port(random.Random(1), ephemeral=(32768, 60999))
    with socket.socket() as held:
        held.bind(("127.0.0.1", spare + 1 if spare < 32767 else spare - 1))
        taken = held.getsockname()[1]
        held.listen()
        assert free_port(Scripted(taken, spare), ephemeral=(32768, 60999)) == spare


def test_the_kernels_range_is_read_and_a_bad_file_falls_back_to_linux_default(tmp_path: Path) -> None:
    good = tmp_path / "range"
    good.write_text("40000\t50000\n")
    assert ephemeral_range(good) == (40000, 50000)
    bad = tmp_path / "bad"
    bad.write_text("garbage\n")
    assert ephemeral_range(bad) == (32768, 60999)
    assert ephemeral_range(tmp_path / "missing") == (32768, 60999)


def test_no_free_port_names_the_range() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        with pytest.raises(OSError, match="outside the ephemeral range 32768-60999"):
            free_port(Scripted(held.getsockname()[1]), ephemeral=(32768, 60999))
