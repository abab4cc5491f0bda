"""Sample wire records shared by unit and integration tests (valid by construction)."""

from __future__ import annotations

from collections.abc import Sequence

from contracts import RegimeLabelV2
from contracts.models import AbstainReason


def unknown_label(node: str, ts_ms: int, reasons: Sequence[AbstainReason] = ("counters_missing",), *,
                  input_ts_ms: int | None = None, ood_score: float | None = None, changed: bool = False,
                  model_version: str = "m1") -> RegimeLabelV2:
    """A regimes.v2 label on which the regime stage abstained (``unknown``, no interference)."""
    return RegimeLabelV2(node=node, ts_ms=ts_ms, regime="unknown", confidence=0.0, raw_regime="unknown",
                         changed=changed, interference={}, abstain=list(reasons), ood_score=ood_score,
                         model_version=model_version, input_ts_ms=ts_ms if input_ts_ms is None else input_ts_ms)
