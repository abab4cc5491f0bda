"""The agent's input handling without Kafka: scoped re-evaluation and re-proposal suppression."""

from __future__ import annotations

from contracts.models import ClusterCapabilities, ProposalKind, UnsupportedAction
from contracts.topics import CAPABILITIES_TOPIC, REGIMES_TOPIC
from services.agents import admission_policy, reliability_policy
from services.agents.settings import AdmissionSettings, ReliabilitySettings
from services.agents.wiring import Agent
from tests.unit.test_agents_policies import NOW, dep, queue, regime, unknown


class Clock:
    def __init__(self) -> None:
        self.t = NOW / 1000

    def __call__(self) -> float:
        return self.t


def test_unchanged_proposal_is_not_resent_until_repropose_period() -> None:
    clock = Clock()
    agent = Agent("reliability", ReliabilitySettings(repropose_s=30), reliability_policy.evaluate, clock)
    state = queue("ns", deps=[dep("ns", "web", 4, 1)])
    first = agent.observe("clusterstate.v1", "c/ns", state)
    assert [c.proposal.kind for c in first] == ["scale_out"]
    clock.t += 5
    assert agent.observe("clusterstate.v1", "c/ns", state) == []
    clock.t += 30
    again = agent.observe("clusterstate.v1", "c/ns", state)
    assert [c.proposal.payload["replicas"] for c in again] == [6]
    changed = queue("ns", deps=[dep("ns", "web", 6, 1)])
    clock.t += 1
    assert [c.proposal.payload["replicas"] for c in agent.observe("clusterstate.v1", "c/ns", changed)] == [8]


def test_only_the_targets_an_input_touches_are_evaluated() -> None:
    agent = Agent("admission", AdmissionSettings(), admission_policy.evaluate, Clock())
    agent.observe(REGIMES_TOPIC, "n1", regime("n1", "llc", worst=1.8))
    # A second node's calm regime must not re-emit n1's taint.
    assert agent.observe(REGIMES_TOPIC, "n2", regime("n2")) == []


def test_a_node_turning_unknown_gets_no_taint_proposal() -> None:
    """The live VM node without hardware counters: its unknown label makes the admission agent say nothing."""
    agent = Agent("admission", AdmissionSettings(repropose_s=0), admission_policy.evaluate, Clock())
    assert [c.proposal.kind for c in agent.observe(REGIMES_TOPIC, "n1", regime("n1", "llc", worst=1.8))] == ["taint"]
    assert agent.observe(REGIMES_TOPIC, "n1", unknown("n1", ts=NOW + 1)) == []
    assert agent.observe(REGIMES_TOPIC, "n2", unknown("n2")) == []


def test_what_was_proposed_survives_a_restart_through_its_memory_records() -> None:
    clock = Clock()
    first = Agent("admission", AdmissionSettings(repropose_s=300), admission_policy.evaluate, clock)
    assert [c.proposal.kind for c in first.observe(REGIMES_TOPIC, "n1", regime("n1", "llc", worst=1.8))] == ["taint"]
    records = dict(first.take_unsaved())
    assert len(records) == 1 and first.take_unsaved() == [], "each record is handed over once"
    # a new process of the agent, its memory restored: the same input proposes nothing within repropose_s
    clock.t += 10
    second = Agent("admission", AdmissionSettings(repropose_s=300), admission_policy.evaluate, clock)
    assert second.restore_sent({**records, b"garbage": b"\xff", b'["n9","taint"]': b"[1]"}) == 1
    assert second.observe(REGIMES_TOPIC, "n1", regime("n1", "llc", worst=1.8)) == []
    # without it, the restarted agent would have sent the taint again
    forgetful = Agent("admission", AdmissionSettings(repropose_s=300), admission_policy.evaluate, clock)
    again = forgetful.observe(REGIMES_TOPIC, "n1", regime("n1", "llc", worst=1.8))
    assert [c.proposal.kind for c in again] == ["taint"]


def capabilities(*unsupported: ProposalKind) -> ClusterCapabilities:
    kinds: tuple[ProposalKind, ...] = ("taint", "cordon", "scale_out")
    return ClusterCapabilities(cluster="c", ts_ms=NOW, reporter="referee-0",
                               supported=[k for k in kinds if k not in unsupported],
                               unsupported=[UnsupportedAction(action=a, missing=["v1 nodes"]) for a in unsupported])


def test_an_action_the_cluster_cannot_carry_out_is_not_proposed_until_it_can() -> None:
    agent = Agent("admission", AdmissionSettings(repropose_s=0), admission_policy.evaluate, Clock())
    assert agent.observe(CAPABILITIES_TOPIC, "c", capabilities("taint")) == []
    assert agent.observe(REGIMES_TOPIC, "n1", regime("n1", "llc", worst=1.8)) == []
    assert agent.unsupported == {"taint": "its API does not serve v1 nodes"}
    # withheld proposals are not remembered as sent: once supported, the same input proposes at once
    agent.observe(CAPABILITIES_TOPIC, "c", capabilities())
    assert [c.proposal.kind for c in agent.observe(REGIMES_TOPIC, "n1", regime("n1", "llc", worst=1.8))] == ["taint"]


def test_other_actions_are_still_proposed_when_one_is_unsupported() -> None:
    agent = Agent("reliability", ReliabilitySettings(repropose_s=0), reliability_policy.evaluate, Clock())
    agent.observe(CAPABILITIES_TOPIC, "c", capabilities("memory_balloon", "taint"))
    state = queue("ns", deps=[dep("ns", "web", 4, 1)])
    assert [c.proposal.kind for c in agent.observe("clusterstate.v1", "c/ns", state)] == ["scale_out"]
