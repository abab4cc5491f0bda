"""anomaly: features.v1 → isolation-forest anomaly score on anomalies.v1 (ONNX)."""
