"""Where the project, its caches and its runtime state live."""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def cache_dir() -> Path:
    return Path(os.environ.get("BORG_CACHE", Path.home() / ".cache" / "borg-orchestrator"))


def state_dir() -> Path:
    return Path(os.environ.get("BORG_STATE", cache_dir() / "state"))


def data_dir() -> Path:
    """Real trace data (never committed): BORG_DATA_DIR or ../shared/data beside the project."""
    return Path(os.environ.get("BORG_DATA_DIR", PROJECT_ROOT.parent / "shared" / "data"))


def bootstrap() -> str:
    return os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092")
