"""regime: features.v1 → contention regime, confidence and interference, or ``unknown`` with the reasons,
on regimes.v2 (ONNX)."""
