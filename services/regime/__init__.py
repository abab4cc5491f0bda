"""regime: features.v1 → contention regime, confidence and interference on regimes.v1 (ONNX)."""
