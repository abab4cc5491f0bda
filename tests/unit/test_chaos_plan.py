"""`borgctl load chaos`: its options, phases and fault list (pure parts)."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtests.chaos import ChaosArgs, chaos_phases
from loadtests.chaos_faults import Fault, plan_faults
from loadtests.scenario import build_parser


def parse(*argv: str) -> ChaosArgs:
    return ChaosArgs.parse(build_parser().parse_args(["chaos", "--out", "/tmp/x", *argv]))


def test_quick_and_full_defaults() -> None:
    quick, full = parse("--quick"), parse()
    assert (quick.rate, quick.recovery_bound_s, quick.gap_s, quick.kube) == (250.0, 60.0, 3.0, True)
    assert (full.rate, full.recovery_bound_s, full.gap_s) == (2000.0, 90.0, 20.0)
    # only the quick run cuts the API server's graceful stop short (it outlasts both graces anyway)
    assert (quick.warmup_s, quick.apiserver_grace_s) == (8.0, 3.0)
    assert (full.warmup_s, full.apiserver_grace_s) == (30.0, 10.0)
    assert parse("--no-kube", "--rate", "300").kube is False
    assert parse("--env", "A=1").env == {"A": "1"}
    with pytest.raises(ValueError, match="rate"):
        parse("--rate", "0")


def test_phases_end_with_a_flush_that_closes_a_window() -> None:
    a = parse("--quick")
    warmup, chaos, flush = chaos_phases(a, faults=11)
    assert (warmup.name, chaos.name, flush.name) == ("warmup", "chaos", "flush")
    assert chaos.seconds >= 11 * (a.recovery_bound_s + a.gap_s)  # open-ended: ended by SIGUSR1
    assert flush.seconds >= 10 and {p.rate for p in (warmup, chaos, flush)} == {250.0}
    assert a.out == Path("/tmp/x")


def test_every_service_is_killed_then_the_broker_and_the_api_server_restart() -> None:
    names = [f.name for f in plan_faults(["features", "referee", "cluster-watcher"], kube=True)]
    assert names == ["kill:features", "kill:referee", "kill:cluster-watcher", "restart:kafka",
                     "restart:kube-apiserver"]
    assert [f.name for f in plan_faults(["features"], kube=False)] == ["kill:features", "restart:kafka"]


def test_the_bound_counts_from_the_kill_but_from_the_infrastructure_being_back() -> None:
    kill = Fault("kill", "features", t_inject=100.0, t_back=110.0, t_recovered=115.0)
    broker = Fault("kafka", "kafka", t_inject=100.0, t_back=130.0, t_recovered=135.0)
    assert (kill.bound_from, kill.recovery_s, kill.back_s) == (100.0, 15.0, 10.0)
    assert (broker.bound_from, broker.recovery_s) == (130.0, 35.0)
    assert Fault("kill", "x").recovery_s is None
