"""Progressive model rollout: the state a model root carries, the node split and the step machine.

A rollout lives beside the model versions, in ``<root>/ROLLOUT.json`` (``borgctl model`` writes it,
the stage re-reads it every ``ROLLOUT_POLL_S``: the stages are separate processes and may have
several replicas, so the file is the one place they all see). Its ``candidate`` is scored beside
``CURRENT`` on every window (shadow); while ``status`` is ``running`` or ``paused`` the nodes whose
stable hash falls below the step's fraction (10 % → 50 % → 100 %) are answered by the candidate.
A node once served by the candidate stays so at the later steps (the buckets only grow).

Transitions (``advance``): ``running`` moves one step after ``dwell_s`` when the comparison had
enough samples and found nothing worse; after the last step the candidate becomes ``CURRENT``
(``switch_current``, the same atomic rename and ``CURRENT.history`` as ``borgctl model promote``)
and ``status`` is ``promoted``. Worse by more than the margin (``judge``) → ``rolled_back`` with
the reason, at any step. ``shadow`` scores the candidate but serves it nowhere and never moves;
``paused`` keeps the step's split and does not move. Every transition is appended to
``ROLLOUT.events.jsonl``.
"""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import BaseModel, Field

log = logging.getLogger(__name__)

STATE_FILE = "ROLLOUT.json"
EVENTS_FILE = "ROLLOUT.events.jsonl"
SHADOW_PREFIX = "SHADOW."
"""``SHADOW.<instance>.json``: a stage replica's latest shadow comparison (``borgctl model status``)."""
CURRENT_FILE = "CURRENT"
HISTORY_FILE = "CURRENT.history"
STEPS: tuple[float, ...] = (0.1, 0.5, 1.0)
Status = Literal["shadow", "running", "paused", "rolled_back", "promoted"]
ACTIVE: frozenset[str] = frozenset({"shadow", "running", "paused"})


class RolloutFields(BaseModel):
    """Rollout settings each model stage adds to its own (``<STAGE>_ROLLOUT_*``)."""

    rollout_poll_s: float = Field(default=5.0, gt=0, le=300, description="how often ROLLOUT.json is re-read")
    rollout_margin: float = Field(default=0.05, ge=0, le=1,
                                  description="roll back when a candidate metric is worse than the current's by more")
    rollout_coverage_margin: float = Field(default=0.25, ge=0, le=1,
                                           description="regime: roll back when the candidate answers (does not "
                                                       "abstain) on this much less of the labelled windows")
    rollout_min_samples: int = Field(default=500, ge=1,
                                     description="labelled (or compared) windows before a metric is judged or a step "
                                                 "advances")
    rollout_min_agreement: float = Field(default=0.0, ge=0, le=1,
                                         description="roll back when agreement with the current model falls below "
                                                     "(0: off; the guard when no labels arrive)")


@dataclass(frozen=True)
class RolloutState:
    kind: str
    candidate: str
    baseline: str | None
    status: Status
    step: int = 0
    """Index into ``steps`` (meaningless for ``shadow``)."""
    dwell_s: float = 600.0
    started_ms: int = 0
    """Identifies this rollout (a new one restarts the comparison)."""
    step_started_ms: int = 0
    updated_ms: int = 0
    reason: str = ""
    steps: tuple[float, ...] = STEPS

    @property
    def active(self) -> bool:
        return self.status in ACTIVE

    @property
    def fraction(self) -> float:
        """Share of nodes the candidate answers for now."""
        if self.status not in ("running", "paused"):
            return 0.0
        return self.steps[min(max(self.step, 0), len(self.steps) - 1)]

    def label(self) -> str:
        """What an output carries in its ``borg-rollout`` header."""
        return f"{self.candidate};step={self.step + 1}/{len(self.steps)};fraction={self.fraction:g};{self.status}"

    def to_json(self) -> bytes:
        return orjson.dumps(asdict(self), option=orjson.OPT_INDENT_2)

    @staticmethod
    def from_json(raw: bytes) -> RolloutState:
        data: dict[str, Any] = orjson.loads(raw)
        steps = tuple(float(s) for s in data.pop("steps", STEPS))
        if not steps or any(not 0.0 < s <= 1.0 for s in steps) or list(steps) != sorted(steps):
            raise ValueError(f"steps must rise within (0, 1]: {steps}")
        state = RolloutState(**data, steps=steps)
        if not state.candidate or "/" in state.candidate or state.candidate.startswith("."):
            raise ValueError(f"candidate {state.candidate!r} is not a version name")  # never a path out of the root
        if state.status not in ("shadow", "running", "paused", "rolled_back", "promoted"):
            raise ValueError(f"unknown status {state.status!r}")
        return state


def node_bucket(node: str) -> float:
    """A node's place in [0, 1): stable across processes, releases and replicas (not Python's hash)."""
    return int.from_bytes(hashlib.blake2b(node.encode(), digest_size=8).digest(), "big") / 2.0**64


def serves_candidate(node: str, fraction: float) -> bool:
    return node_bucket(node) < fraction


@dataclass(frozen=True)
class Comparison:
    """One online metric of both models on the same traffic."""

    name: str
    current: float
    candidate: float
    samples: int
    higher_is_better: bool = True
    margin: float | None = None
    """This metric's own margin (None: the rollout's)."""
    labelled: bool = True
    """Measured against labels (False: ``completion``, agreement-like figures), so it says nothing about
    whether labels have arrived."""

    def worse_by(self) -> float:
        """How much worse the candidate is (negative: better)."""
        gap = self.current - self.candidate
        return gap if self.higher_is_better else -gap


@dataclass(frozen=True)
class Judgement:
    reason: str | None
    """Why to roll back; None: nothing worse."""
    ready: bool
    """Whether there were enough samples to advance a step."""
    details: dict[str, float] = field(default_factory=dict)


def judge(comparisons: list[Comparison], agreement: float | None, compared: int, *, margin: float,
          min_samples: int, min_agreement: float = 0.0, labels_expected: bool = False) -> Judgement:
    """Rollback rule: a metric (with ``min_samples``) worse by more than its margin (``margin`` unless the
    comparison has its own), or agreement below the floor.

    Ready to advance: every labelled metric that has samples is judged on ``min_samples``. With no
    labelled sample yet: when labels are expected (the stage has a truth source) never — compared
    windows alone once moved a step with nothing labelled —, otherwise (agreement-only rollouts)
    ``min_samples`` windows were compared.
    """
    details: dict[str, float] = {}
    for c in comparisons:
        details[f"{c.name}_current"], details[f"{c.name}_candidate"] = c.current, c.candidate
        allowed = margin if c.margin is None else c.margin
        if c.samples >= min_samples and c.worse_by() > allowed:
            over = "labelled windows" if c.labelled else "samples"
            return Judgement(f"candidate {c.name} {c.candidate:.3f} vs current {c.current:.3f}: worse by more than "
                             f"the margin {allowed:g} over {c.samples} {over}", False, details)
    if agreement is not None:
        details["agreement"] = agreement
        if min_agreement > 0 and compared >= min_samples and agreement < min_agreement:
            return Judgement(f"agreement with the current model {agreement:.3f} < {min_agreement:g} over {compared} "
                             "windows", False, details)
    labelled = [c for c in comparisons if c.labelled and c.samples > 0]
    if labelled:
        ready = all(c.samples >= min_samples for c in labelled)
    else:
        ready = not labels_expected and compared >= min_samples
    return Judgement(None, ready, details)


def advance(state: RolloutState, now_ms: int, verdict: Judgement) -> RolloutState:
    """The next state of an active rollout (itself when nothing changes)."""
    if state.status not in ("running", "paused", "shadow"):
        return state
    if verdict.reason is not None:
        return replace(state, status="rolled_back", reason=verdict.reason, updated_ms=now_ms)
    if state.status != "running" or not verdict.ready or now_ms - state.step_started_ms < state.dwell_s * 1000:
        return state
    if state.step + 1 < len(state.steps):
        return replace(state, step=state.step + 1, step_started_ms=now_ms, updated_ms=now_ms,
                       reason=f"dwell {state.dwell_s:g} s passed with nothing worse")
    return replace(state, status="promoted", updated_ms=now_ms, reason="every step passed")


def dwell_remaining_s(state: RolloutState, now_ms: int) -> float:
    return max(0.0, state.dwell_s - (now_ms - state.step_started_ms) / 1000) if state.status == "running" else 0.0


# ---- files -------------------------------------------------------------------------------


def write_atomically(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)  # a reader sees the old file or the new one, never half of one


def read_state(root: Path) -> RolloutState | None:
    """The rollout of a model root; None when there is none or it cannot be read (logged)."""
    path = root / STATE_FILE
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.error("%s: unreadable (%s); no rollout", path, exc)
        return None
    try:
        return RolloutState.from_json(raw)
    except (ValueError, TypeError) as exc:
        log.error("%s: not a rollout state (%s); no rollout", path, exc)
        return None


def write_state(root: Path, state: RolloutState) -> None:
    write_atomically(root / STATE_FILE, state.to_json())


def append_event(root: Path, event: dict[str, Any]) -> None:
    with (root / EVENTS_FILE).open("ab") as out:
        out.write(orjson.dumps(event) + b"\n")


def read_events(root: Path) -> list[dict[str, Any]]:
    path = root / EVENTS_FILE
    if not path.is_file():
        return []
    out: list[dict[str, Any]] = []
    for line in path.read_bytes().splitlines():
        try:
            out.append(orjson.loads(line))
        except orjson.JSONDecodeError:
            continue  # a line cut by a crash mid-append
    return out


def current_version(root: Path) -> str | None:
    path = root / CURRENT_FILE
    return (path.read_text().strip() or None) if path.is_file() else None


def switch_current(root: Path, version: str) -> str | None:
    """Serve ``version``: ``CURRENT`` renamed atomically, the replaced version appended to the history."""
    before = current_version(root)
    if before == version:
        return before
    if before is not None:
        with (root / HISTORY_FILE).open("a") as out:
            out.write(before + "\n")
    write_atomically(root / CURRENT_FILE, (version + "\n").encode())
    return before


def replace_status(state: RolloutState, status: Status, reason: str, now_ms: int) -> RolloutState:
    return replace(state, status=status, reason=reason, updated_ms=now_ms)
