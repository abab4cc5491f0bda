"""Model directories for the stream processors: model cards, schema checks, hot reload.

Layout (written by ``training``): ``<root>/CURRENT`` names a version; ``<root>/<version>/``
holds ``model_card.json`` (version, feature-schema hash, metrics, files and their sha256)
and the ONNX files. ``MODEL_DIR`` may also point straight at a version directory.

* Start-up: a card whose feature-schema hash differs from the one the service computes
  raises :class:`ModelRefusedError` with a message naming both hashes and how to fix it; the
  service exits instead of scoring vectors the model was not trained on.
* Hot reload: :class:`ModelWatcher` re-reads ``CURRENT`` every ``MODEL_POLL_S`` seconds;
  when it names another version (repoint it atomically, e.g. ``borgctl train regime``
  does), the new version is loaded and checked completely before it replaces the old
  one between two batches. A new version that fails to load is refused with an error
  log and the old one keeps serving.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, TypeVar

import onnxruntime as ort
import orjson
from prometheus_client import Counter, Gauge

from services.runtime.pause import pause

log = logging.getLogger(__name__)
T = TypeVar("T")
CARD_FILE = "model_card.json"
CURRENT_FILE = "CURRENT"

MODEL_RELOADS = Counter("borg_model_reloads_total", "Model versions loaded after start-up", ["model", "outcome"])
MODEL_INFO = Gauge("borg_model_loaded", "1 for the model version in use", ["model", "version"])


class ModelRefusedError(RuntimeError):
    """A model directory that cannot be used (missing, corrupt, or another feature schema)."""


def resolve(root: Path) -> Path:
    """A version directory: ``root`` itself when it holds a card, else the one ``CURRENT`` names."""
    if (root / CARD_FILE).is_file():
        return root
    current = root / CURRENT_FILE
    if not current.is_file():
        raise ModelRefusedError(f"{root}: neither a model version ({CARD_FILE}) nor a model root ({CURRENT_FILE}); "
                           "train one (borgctl train ...) or set the service's MODEL_DIR")
    version = current.read_text().strip()
    target = root / version
    if not version or "/" in version or not (target / CARD_FILE).is_file():
        raise ModelRefusedError(f"{current} names {version!r}, which is not a model version under {root}")
    return target


def read_card(version_dir: Path, *, kind: str, schema_hash: str, schema_field: str = "schema_hash") -> dict[str, Any]:
    """The model card, checked against the feature schema the service computes."""
    try:
        card: dict[str, Any] = orjson.loads((version_dir / CARD_FILE).read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise ModelRefusedError(f"{version_dir / CARD_FILE}: unreadable model card ({exc})") from None
    if card.get("model") not in (kind, None):
        raise ModelRefusedError(f"{version_dir}: a {card.get('model')!r} model, not a {kind!r} model")
    trained = (card.get("features") or {}).get(schema_field)
    if trained != schema_hash:
        raise ModelRefusedError(
            f"{version_dir}: model {card.get('version')!r} was trained on feature schema "
            f"{str(trained)[:12]}… but this service computes {schema_hash[:12]}… — the feature definition "
            f"changed since training; retrain (borgctl train {kind}) or point CURRENT at a matching version"
        )
    return card


def checked_file(version_dir: Path, name: str, digest: str | None) -> Path:
    """``version_dir/name``, present and with the sha256 the model card lists (else the version is refused)."""
    path = version_dir / name
    if not path.is_file():
        raise ModelRefusedError(f"{path}: listed in the model card but missing")
    if hashlib.sha256(path.read_bytes()).hexdigest() != digest:
        raise ModelRefusedError(f"{path}: sha256 differs from the model card (partial copy?)")
    return path


def verify_sha256(version_dir: Path, card: dict[str, Any]) -> None:
    for name, digest in ((card.get("onnx") or {}).get("sha256") or {}).items():
        checked_file(version_dir, name, digest)


def onnx_session(path: Path) -> ort.InferenceSession:
    """A single-threaded CPU session (several services share two cores)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    try:
        return ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])
    except Exception as exc:
        raise ModelRefusedError(f"{path}: onnxruntime cannot load it ({exc})") from None


class ModelWatcher(Generic[T]):
    """Holds the model in use and swaps in new versions named by ``CURRENT``."""

    def __init__(self, name: str, root: Path, loader: Callable[[Path], T], *, poll_s: float = 5.0) -> None:
        self.name = name
        self.root = root
        self.loader = loader
        self.poll_s = poll_s
        self.version_dir = resolve(root)
        self.current: T = loader(self.version_dir)
        MODEL_INFO.labels(name, self.version_dir.name).set(1)
        log.info("%s model %s loaded from %s", name, self.version_dir.name, self.version_dir)

    def check(self) -> bool:
        """Reload when CURRENT moved; True when a new version is now in use."""
        try:
            target = resolve(self.root)
        except ModelRefusedError as exc:
            log.error("%s model: %s (keeping %s)", self.name, exc, self.version_dir.name)
            return False
        if target == self.version_dir:
            return False
        try:
            model = self.loader(target)
        except ModelRefusedError as exc:
            MODEL_RELOADS.labels(self.name, "refused").inc()
            log.error("%s model %s refused, keeping %s: %s", self.name, target.name, self.version_dir.name, exc)
            return False
        MODEL_INFO.labels(self.name, self.version_dir.name).set(0)
        self.current, self.version_dir = model, target
        MODEL_INFO.labels(self.name, target.name).set(1)
        MODEL_RELOADS.labels(self.name, "loaded").inc()
        log.info("%s model %s now in use", self.name, target.name)
        return True

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            if not await pause(stop, self.poll_s):
                await asyncio.to_thread(self.check)


def infer_rows(fn: Callable[[Any], Any], x: Any) -> tuple[list[Any | None], dict[int, str]]:
    """Run ``fn`` on the batch ``x``; when it fails, again row by row to isolate the culprits.

    Returns one result per row (None where the model failed) and ``{row: reason}``. A result
    containing NaN or inf counts as a failure: nothing non-finite is ever published.
    """
    import numpy as np

    def finite(value: Any) -> bool:
        return all(bool(np.all(np.isfinite(np.asarray(v, dtype=np.float64)))) for v in value)

    try:
        whole = [np.asarray(part) for part in fn(x)]
        # one vectorised check for the whole batch (the common case); rows only when it fails
        if all(bool(np.all(np.isfinite(part.astype(np.float64, copy=False)))) for part in whole):
            return [tuple(part[i] for part in whole) for i in range(len(x))], {}
    except Exception:  # fall through to row-by-row isolation
        log.debug("batch inference failed; isolating rows", exc_info=True)
    results: list[Any | None] = []
    errors: dict[int, str] = {}
    for i in range(len(x)):
        try:
            part = fn(x[i : i + 1])
            row = tuple(np.asarray(p)[0] for p in part)
            if not finite(row):
                raise ValueError("model output is not finite (NaN/inf)")
            results.append(row)
        except Exception as exc:
            results.append(None)
            errors[i] = f"model failed: {type(exc).__name__}: {str(exc)[:500]}"
    return results, errors
