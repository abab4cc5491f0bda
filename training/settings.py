"""Paths the training tools use (data is never inside the repository)."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MODEL_DIR = REPO_ROOT / "models" / "failure"


def data_dir() -> Path:
    """Real trace data: ``BORG_DATA_DIR``, default ``<repo>/../shared/data``."""
    return Path(os.environ.get("BORG_DATA_DIR", REPO_ROOT.parent / "shared" / "data"))


def google2011_dir() -> Path:
    return data_dir() / "google2011"
