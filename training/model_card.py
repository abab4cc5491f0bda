"""Model directory layout, data fingerprints and the model card.

Layout (read by the online risk service; see training/README.md)::

    models/failure/CURRENT                 the version in use (one line)
    models/failure/<version>/horizon_<H>s.onnx    float32[N, features] -> probabilities[:, 1]
    models/failure/<version>/horizon_<H>s.ubj     the same booster for native XGBoost
    models/failure/<version>/model_card.json
    models/failure/<version>/baselines.json
    models/failure/<version>/validation_report.json, validation_pr_curves.png
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Final

import orjson

from training.errors import ModelDirError

CURRENT_FILE: Final = "CURRENT"
CARD_FILE: Final = "model_card.json"
BASELINES_FILE: Final = "baselines.json"


def horizon_file(horizon_us: int) -> str:
    return f"horizon_{horizon_us // 1_000_000}s.onnx"


def file_list(files: list[Path], root: Path) -> list[dict[str, Any]]:
    return [{"name": str(p.relative_to(root)) if p.is_relative_to(root) else p.name, "bytes": p.stat().st_size}
            for p in files]


def fingerprint(entries: list[dict[str, Any]]) -> str:
    """sha256 over sorted ``name<TAB>bytes`` lines (cheap, and stable across copies)."""
    text = "\n".join(f"{e['name']}\t{e['bytes']}" for e in sorted(entries, key=lambda e: str(e["name"])))
    return hashlib.sha256(text.encode()).hexdigest()


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_json(path: Path, payload: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(orjson.dumps(payload, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS
                                 | orjson.OPT_SERIALIZE_NUMPY) + b"\n")
    tmp.replace(path)


def read_json(path: Path) -> Any:
    try:
        return orjson.loads(path.read_bytes())
    except FileNotFoundError:
        raise ModelDirError(f"{path}: missing") from None
    except orjson.JSONDecodeError as exc:
        raise ModelDirError(f"{path}: not valid JSON ({exc})") from None


def resolve_model_dir(path: Path) -> Path:
    """A version directory, or a model root whose ``CURRENT`` names one."""
    if (path / CARD_FILE).is_file():
        return path
    current = path / CURRENT_FILE
    if current.is_file():
        version = current.read_text().strip()
        target = path / version
        if not version or "/" in version or not (target / CARD_FILE).is_file():
            raise ModelDirError(f"{current}: names {version!r}, which is not a model version in {path}")
        return target
    if not path.exists():
        raise ModelDirError(f"{path}: no such model directory")
    raise ModelDirError(f"{path}: neither a model version ({CARD_FILE}) nor a model root ({CURRENT_FILE})")


def set_current(root: Path, version: str) -> None:
    """Point ``root/CURRENT`` at ``version`` atomically (the service hot-reloads on change)."""
    tmp = root / f".{CURRENT_FILE}.{os.getpid()}.tmp"
    tmp.write_text(version + "\n")
    tmp.replace(root / CURRENT_FILE)
