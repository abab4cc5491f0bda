"""`borgctl model status|promote|rollback`: which model version each stage serves, and switching it.

A model root (``models/<kind>/``) holds version directories (each with ``model_card.json``) and
``CURRENT``, the version the stages serve; they re-read it every ``MODEL_POLL_S`` and swap without a
restart (``services/runtime/model_watch.py``). ``promote`` checks the version (card readable, its model
kind, every ONNX file's sha256 as the card lists it) before it moves ``CURRENT`` — atomically, by
rename — and appends the version it replaced to ``CURRENT.history``; ``rollback`` moves ``CURRENT``
back to the newest entry there. A stage refuses a version whose feature schema differs from what it
computes and keeps the one it has (its log and ``borg_model_reloads_total{outcome="refused"}`` say so).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import orjson

from borgctl.errors import UserError
from services.runtime.model_watch import CARD_FILE, CURRENT_FILE, ModelRefusedError, verify_sha256

HISTORY_FILE = "CURRENT.history"
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
    before = current(kind_root)
    if before == version:
        return before
    if before is not None:
        with (kind_root / HISTORY_FILE).open("a") as out:
            out.write(before + "\n")
    _write_atomically(kind_root / CURRENT_FILE, version + "\n")
    return before


def rollback(kind_root: Path) -> str:
    """Serve the version ``promote`` last replaced again; returns it."""
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
    return lines


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="borgctl model", description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--models", type=Path, default=Path(os.environ.get("BORG_MODELS_DIR", DEFAULT_ROOT)),
                        help="model roots (default: the repository's models/, or $BORG_MODELS_DIR)")
    sub = parser.add_subparsers(dest="action", required=True)
    sub.add_parser("status", help="served and available versions per model kind")
    p = sub.add_parser("promote", help="serve VERSION of KIND (checked first)")
    p.add_argument("kind")
    p.add_argument("version")
    r = sub.add_parser("rollback", help="serve the version the last promote replaced")
    r.add_argument("kind")
    args = parser.parse_args(argv)
    try:
        if args.action == "status":
            if not args.models.is_dir():
                raise UserError(f"{args.models}: no model directory")
            print("\n".join(status_lines(args.models)))
        elif args.action == "promote":
            before = promote(_kind_root(args.models, args.kind), args.version)
            print(f"{args.kind}: serving {args.version} (was {before or 'nothing'}); stages pick it up within "
                  "MODEL_POLL_S")
        else:
            version = rollback(_kind_root(args.models, args.kind))
            print(f"{args.kind}: serving {version} again")
    except UserError as exc:
        print(f"borgctl model: {exc}", file=sys.stderr)
        return 2
    return 0
