"""One model call for a batch of FeatureVectors: what regime and anomaly share.

``score_vectors`` decodes each consumed ``features.v1`` event (``contracts.fast.featurevector``),
dead-letters what does not decode (the contract's error) and what the model cannot take
(``vector_problem``: another feature schema or length), runs the model once on the rest
and dead-letters the rows it fails on (isolated row by row as ``infer_rows`` does, with
its messages). What is left comes back as parallel lists plus the model's output arrays,
so the processors can turn a whole batch of outputs into Python values at once.

Dead letters go out in input order: first those of decoding and checking, then those of
the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import numpy as np

from contracts import ContractError
from contracts.fast.featurevector import FeatureRow, decode_feature_row
from featurelib.node.schema import N_FEATURES, vector_problem
from services.runtime.model_watch import ModelWatcher, infer_rows
from services.runtime.stream_io import Sink

__all__ = ["BatchModel", "ScoredBatch", "infer_batch", "model_input", "score_vectors"]

_ROW_BYTES = 8 * N_FEATURES  # float64 values of a vector the models take


class BatchModel(Protocol):
    def __call__(self, x: np.ndarray, /) -> tuple[np.ndarray, ...]: ...


M = TypeVar("M", bound=BatchModel)


@dataclass(frozen=True, slots=True)
class ScoredBatch(Generic[M]):
    """The rows a model scored: ``events[i]``, ``rows[i]`` and ``outputs[k][i]`` belong together."""

    model: M
    events: list[Any]
    rows: list[FeatureRow]
    outputs: tuple[np.ndarray, ...]
    failed: int
    """Rows the model failed on (dead-lettered, not in the lists)."""
    inputs: np.ndarray | None = None
    """The model input of the rows (``model_input``: float32, NaN = invalid), ``inputs[i]`` for ``rows[i]``,
    for what a processor judges beside the outputs (regime's abstention); None when no row was scored."""


def model_input(rows: Sequence[FeatureRow]) -> np.ndarray:
    """float32 rows with NaN where a feature is not valid, for rows of one length (at least one).

    Bit for bit ``np.stack([as_model_input(r.values, r.valid) for r in rows])``: the same
    float64 → float32 rounding, from the rows' packed values in one pass instead of 157
    Python floats at a time.
    """
    n = len(rows)
    values = np.frombuffer(b"".join([r.packed for r in rows]), dtype=np.float64).reshape(n, -1)
    mask = np.frombuffer(b"".join([r.mask for r in rows]), dtype=np.bool_).reshape(n, -1)
    return np.where(mask, values.astype(np.float32), np.float32(np.nan))


def infer_batch(model: BatchModel, x: np.ndarray) -> tuple[tuple[np.ndarray, ...], dict[int, str]]:
    """The model's outputs for the rows of ``x`` (stacked, failed rows left out) and ``{row: reason}``.

    ``infer_rows`` semantics (nothing non-finite passes; when the batch fails, rows are
    isolated one by one, with its error messages) but whole arrays in the common case
    instead of one tuple of numpy scalars per row.
    """
    try:
        whole = tuple(np.asarray(part) for part in model(x))
    except Exception as exc:
        failure: Exception | None = exc
    else:
        if all(bool(np.all(np.isfinite(part.astype(np.float64, copy=False)))) for part in whole):
            return whole, {}
        failure = None

    def answered(a: np.ndarray) -> tuple[np.ndarray, ...]:
        # infer_rows first tries the whole batch again: answer that with what it just
        # gave (the model is not run twice), then the single rows for real
        if a is x:
            if failure is not None:
                raise failure
            return whole
        return model(a)

    results, errors = infer_rows(answered, x)
    ok = [r for r in results if r is not None]
    if not ok:
        return (), errors
    return tuple(np.stack([r[k] for r in ok]) for k in range(len(ok[0]))), errors


async def score_vectors(events: Sequence[Any], *, sink: Sink, models: ModelWatcher[M], schema_hash: str,
                        consumer: str) -> ScoredBatch[M]:
    """Decode, check and score ``events`` in one model call (the model in use once decoded)."""
    accepted: list[Any] = []
    rows: list[FeatureRow] = []
    for event in events:
        try:
            row = decode_feature_row(event.message.value)
        except ContractError as exc:
            await sink.dead_letter(event, exc.message, exc.kind)
            continue
        # vector_problem is None exactly when this holds (it words the reason otherwise)
        if row.schema_hash != schema_hash or len(row.packed) != _ROW_BYTES:
            problem = vector_problem(row, schema_hash, consumer)
            if problem is not None:
                await sink.dead_letter(event, problem, "schema")
                continue
        accepted.append(event)
        rows.append(row)
    model = models.current
    if not rows:
        return ScoredBatch(model, [], [], (), 0)
    x = model_input(rows)
    outputs, errors = infer_batch(model, x)
    if errors:
        for i in sorted(errors):
            await sink.dead_letter(accepted[i], errors[i], "processing")
        accepted = [e for i, e in enumerate(accepted) if i not in errors]
        rows = [r for i, r in enumerate(rows) if i not in errors]
        x = np.delete(x, sorted(errors), axis=0)
    return ScoredBatch(model, accepted, rows, outputs, len(errors), x)
