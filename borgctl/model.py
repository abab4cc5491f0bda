"""`borgctl model status|promote|rollback`: which model version each stage serves, and switching it.

A model root (``models/<kind>/``) holds version directories (each with ``model_card.json``) and
``CURRENT``, the version the stages serve; they re-read it every ``MODEL_POLL_S`` and swap without a
restart (``services/runtime/model_watch.py``). ``promote`` checks the version (card readable, its model
kind, every ONNX file's sha256 as the card lists it) before it moves ``CURRENT`` — atomically, by
rename — and appends the version it replaced to ``CURRENT.history``; ``rollback`` moves ``CURRENT``
back to the newest entry there. A stage refuses a version whose feature schema differs from what it
computes and keeps the one it has (its log and ``borg_model_reloads_total{outcome="refused"}`` say so).

Progressive rollout (docs/rollout.md): ``shadow KIND VERSION`` has the stages score VERSION beside
``CURRENT`` without serving it; ``promote KIND VERSION --progressive [--dwell S]`` serves it on 10 %,
then 50 %, then 100 % of nodes (stable hash of the node name), one step per dwell while its online
metrics are no worse than the current model's, after which the stage makes it ``CURRENT``. ``pause``,
``resume``, ``rollback`` and a plain ``promote`` act on a rollout under way; ``status`` shows its step,
the dwell left and the shadow comparison the stages last wrote.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson

from borgctl.errors import UserError
from services.runtime import rollout
from services.runtime.model_watch import CARD_FILE, CURRENT_FILE, ModelRefusedError, verify_sha256
from services.runtime.rollout import RolloutState

HISTORY_FILE = rollout.HISTORY_FILE
DEFAULT_DWELL_S = float(os.environ.get("ROLLOUT_DWELL_S", "600"))
DEFAULT_ROOT = Path(__file__).resolve().parents[1] / "models"


def _card(version_dir: Path) -> dict[str, Any]:
    try:
        card: dict[str, Any] = orjson.loads((version_dir / CARD_FILE).read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise UserError(f"{version_dir / CARD_FILE}: unreadable model card ({exc})") from None
    return card


def versions(kind_root: Path) -> list[str]:
    """Version directories (with a card), oldest first by name (names start with their training time)."""
    return sorted(p.name for p in kind_root.iterdir() if (p / CARD_FILE).is_file())


def current(kind_root: Path) -> str | None:
    path = kind_root / CURRENT_FILE
    return path.read_text().strip() or None if path.is_file() else None


def history(kind_root: Path) -> list[str]:
    path = kind_root / HISTORY_FILE
    return [line.strip() for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)  # a stage polling CURRENT reads the old name or the new one, never half a file


def check_version(kind_root: Path, version: str) -> dict[str, Any]:
    """The card of a version that may be served; UserError naming what is wrong otherwise."""
    if not version or "/" in version or version.startswith("."):
        raise UserError(f"{version!r} is not a version name")
    version_dir = kind_root / version
    if not (version_dir / CARD_FILE).is_file():
        known = ", ".join(versions(kind_root)) or "none"
        raise UserError(f"{version_dir}: no {CARD_FILE} (versions of {kind_root.name}: {known})")
    card = _card(version_dir)
    if card.get("model") not in (kind_root.name, None):
        raise UserError(f"{version_dir}: a {card.get('model')!r} model, not a {kind_root.name!r} model")
    try:
        verify_sha256(version_dir, card)
    except ModelRefusedError as exc:
        raise UserError(str(exc)) from None
    return card


def promote(kind_root: Path, version: str) -> str | None:
    """Make ``version`` the served one; returns the version it replaced."""
    check_version(kind_root, version)
    state = rollout.read_state(kind_root)
    if state is not None and state.active:
        # a plain promote ends a rollout under way: done if it names the candidate, replaced otherwise
        done = state.candidate == version
        _record(kind_root, state, "promoted" if done else "rolled_back",
                "operator promoted it" if done else f"operator promoted {version} instead")
    return rollout.switch_current(kind_root, version)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _record(kind_root: Path, state: RolloutState, status: rollout.Status, reason: str) -> RolloutState:
    now = _now_ms()
    after = rollout.replace_status(state, status, reason, now)
    if status == "running":
        after = replace(after, step_started_ms=now)  # resume: the step's dwell starts again
    rollout.write_state(kind_root, after)
    rollout.append_event(kind_root, {"ts_ms": now, "model": kind_root.name, "from": state.status, "status": status,
                                     "step": after.step + 1, "fraction": after.fraction,
                                     "candidate": after.candidate, "baseline": after.baseline, "reason": reason,
                                     "by": "borgctl"})
    return after


def start(kind_root: Path, version: str, *, progressive: bool, dwell_s: float) -> RolloutState:
    """Begin a shadow comparison (``progressive`` False) or a progressive rollout of ``version``."""
    check_version(kind_root, version)
    served = current(kind_root)
    if served == version:
        raise UserError(f"{kind_root.name}: {version} is already served (CURRENT)")
    before = rollout.read_state(kind_root)
    if before is not None and before.active and before.candidate != version:
        raise UserError(f"{kind_root.name}: a rollout of {before.candidate} is under way ({before.status}); "
                        "roll it back or promote it first")
    now = _now_ms()
    if before is not None and before.active and before.candidate == version:
        if not progressive or before.status != "shadow":
            raise UserError(f"{kind_root.name}: {version} is already {before.status}")
        started = before.started_ms  # shadow → rollout keeps the comparison gathered so far
    else:  # a new rollout: another id than the last one (a stage that vetoed that one must follow this)
        started = now if before is None else max(now, before.started_ms + 1)
    state = RolloutState(kind=kind_root.name, candidate=version, baseline=served,
                         status="running" if progressive else "shadow", step=0, dwell_s=dwell_s,
                         started_ms=started, step_started_ms=now, updated_ms=now,
                         reason="operator started a progressive rollout" if progressive else "operator started shadow")
    rollout.write_state(kind_root, state)
    rollout.append_event(kind_root, {"ts_ms": now, "model": kind_root.name, "from": None if before is None
                                     else before.status, "status": state.status, "step": 1,
                                     "fraction": state.fraction, "candidate": version, "baseline": served,
                                     "reason": state.reason, "by": "borgctl"})
    return state


def _active(kind_root: Path) -> RolloutState:
    state = rollout.read_state(kind_root)
    if state is None or not state.active:
        raise UserError(f"{kind_root.name}: no rollout under way")
    return state


def pause(kind_root: Path) -> RolloutState:
    state = _active(kind_root)
    if state.status != "running":
        raise UserError(f"{kind_root.name}: the rollout of {state.candidate} is {state.status}, not running")
    return _record(kind_root, state, "paused", "operator paused it")


def resume(kind_root: Path) -> RolloutState:
    state = _active(kind_root)
    if state.status != "paused":
        raise UserError(f"{kind_root.name}: the rollout of {state.candidate} is {state.status}, not paused")
    return _record(kind_root, state, "running", "operator resumed it")


def rollback(kind_root: Path) -> str:
    """End a rollout under way (the current model serves every node again), else serve the version
    ``promote`` last replaced again; returns the version served."""
    state = rollout.read_state(kind_root)
    if state is not None and state.active:
        _record(kind_root, state, "rolled_back", "operator rolled it back")
        served = current(kind_root)
        if served is None:
            raise UserError(f"{kind_root / CURRENT_FILE}: missing")
        return served
    past = history(kind_root)
    if not past:
        raise UserError(f"{kind_root / HISTORY_FILE}: no earlier version to roll back to")
    version = past[-1]
    check_version(kind_root, version)
    _write_atomically(kind_root / CURRENT_FILE, version + "\n")
    _write_atomically(kind_root / HISTORY_FILE, "".join(v + "\n" for v in past[:-1]))
    return version


def _kind_root(root: Path, kind: str) -> Path:
    kind_root = root / kind
    if not kind_root.is_dir():
        kinds = ", ".join(sorted(p.name for p in root.iterdir() if p.is_dir())) if root.is_dir() else "none"
        raise UserError(f"{kind_root}: no such model kind (kinds under {root}: {kinds})")
    return kind_root


def status_lines(root: Path) -> list[str]:
    lines = []
    for kind_root in sorted(p for p in root.iterdir() if p.is_dir()):
        served = current(kind_root)
        known = versions(kind_root)
        if not known:
            continue
        lines.append(f"{kind_root.name}: serving {served or '(no CURRENT)'}")
        for version in reversed(known):
            card = _card(kind_root / version)
            mark = "*" if version == served else " "
            trained = card.get("created_at") or card.get("trained_at") or ""
            lines.append(f"  {mark} {version}  {trained}")
        past = history(kind_root)
        if past:
            lines.append(f"    rollback → {past[-1]}")
        lines.extend(rollout_lines(kind_root))
    return lines


def _shadow(kind_root: Path, state: RolloutState) -> list[dict[str, Any]]:
    """What each stage replica last wrote about this rollout's comparison."""
    out = []
    for path in sorted(kind_root.glob(f"{rollout.SHADOW_PREFIX}*.json")):
        try:
            record: dict[str, Any] = orjson.loads(path.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            continue
        if record.get("started_ms") == state.started_ms:
            out.append({"instance": path.name[len(rollout.SHADOW_PREFIX):-5], **record})
    return out


def _fmt(value: Any) -> str:
    return f"{value:.3f}" if isinstance(value, float) else "-" if value is None else str(value)


def rollout_lines(kind_root: Path) -> list[str]:
    state = rollout.read_state(kind_root)
    if state is None:
        return []
    now = _now_ms()
    if state.status == "shadow":
        where = "shadow only (served on no node)"
    else:
        where = f"step {state.step + 1}/{len(state.steps)} ({state.fraction:.0%} of nodes)"
    lines = [f"    rollout of {state.candidate} (baseline {state.baseline or '-'}): {state.status}, {where}"]
    if state.status == "running":
        lines.append(f"      dwell left {rollout.dwell_remaining_s(state, now):.0f} s of {state.dwell_s:g} s")
    if state.reason:
        lines.append(f"      why: {state.reason}")
    for record in _shadow(kind_root, state):
        age = (now - int(record.get("ts_ms", now))) / 1000
        metrics = ", ".join(f"{m} {_fmt(record.get(m + '_current'))} → {_fmt(record.get(m + '_candidate'))}"
                            for m in ("matched_accuracy", "correct", "coverage", "accuracy")
                            if m + "_current" in record)
        lines.append(f"      shadow [{record['instance']}, {age:.0f} s ago]: agreement {_fmt(record.get('agreement'))}"
                     f" over {record.get('compared', 0)} windows, labelled {record.get('labelled', 0)}"
                     + (f"; {metrics}" if metrics else ""))
    return lines


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="borgctl model", description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--models", type=Path, default=Path(os.environ.get("BORG_MODELS_DIR", DEFAULT_ROOT)),
                        help="model roots (default: the repository's models/, or $BORG_MODELS_DIR)")
    sub = parser.add_subparsers(dest="action", required=True)
    sub.add_parser("status", help="served and available versions per model kind")
    p = sub.add_parser("promote", help="serve VERSION of KIND (checked first); --progressive: 10/50/100 %% of nodes")
    p.add_argument("kind")
    p.add_argument("version")
    p.add_argument("--progressive", action="store_true",
                   help="roll out step by step, rolled back automatically when its online metrics are worse")
    p.add_argument("--dwell", type=float, default=DEFAULT_DWELL_S,
                   help="seconds per step (default $ROLLOUT_DWELL_S or 600)")
    sh = sub.add_parser("shadow", help="score VERSION beside the served one on live traffic, serve it nowhere")
    sh.add_argument("kind")
    sh.add_argument("version")
    for name, what in (("pause", "hold a rollout at its step"), ("resume", "let a paused rollout move on")):
        sub.add_parser(name, help=what).add_argument("kind")
    r = sub.add_parser("rollback", help="end a rollout under way, else serve the version the last promote replaced")
    r.add_argument("kind")
    args = parser.parse_args(argv)
    if args.action == "promote" and args.dwell <= 0:
        parser.error("--dwell must be > 0")
    try:
        if args.action == "status":
            if not args.models.is_dir():
                raise UserError(f"{args.models}: no model directory")
            print("\n".join(status_lines(args.models)))
        elif (args.action == "promote" and args.progressive) or args.action == "shadow":
            state = start(_kind_root(args.models, args.kind), args.version, progressive=args.action == "promote",
                          dwell_s=args.dwell if args.action == "promote" else DEFAULT_DWELL_S)
            what = (f"step 1/{len(state.steps)} ({state.fraction:.0%} of nodes), {state.dwell_s:g} s per step"
                    if state.status == "running" else "shadow only")
            print(f"{args.kind}: rollout of {args.version} started, {what}; stages follow within ROLLOUT_POLL_S")
        elif args.action == "promote":
            before = promote(_kind_root(args.models, args.kind), args.version)
            print(f"{args.kind}: serving {args.version} (was {before or 'nothing'}); stages pick it up within "
                  "MODEL_POLL_S")
        elif args.action in ("pause", "resume"):
            state = (pause if args.action == "pause" else resume)(_kind_root(args.models, args.kind))
            print(f"{args.kind}: rollout of {state.candidate} {state.status} at step {state.step + 1}/"
                  f"{len(state.steps)} ({state.fraction:.0%} of nodes)")
        else:
            version = rollback(_kind_root(args.models, args.kind))
            print(f"{args.kind}: serving {version} again")
    except UserError as exc:
        print(f"borgctl model: {exc}", file=sys.stderr)
        return 2
    return 0
